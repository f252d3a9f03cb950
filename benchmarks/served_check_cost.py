"""What the served-paths check (allowed roots and deny list) adds to an MCP search.

    .venv/bin/python -m benchmarks.served_check_cost [--corpus DIR] [--rounds 5]

Builds a hash-embedded index of the corpus (default: the vendored awesome-copilot files
in tests/corpus) in a temporary directory, then, with the query cache off, runs every
query of ``benchmarks/awesome_copilot_queries.jsonl`` through
``SearchService.search_response`` without and with a
:class:`~rifflux.search.served.ServedPaths` whose root is the corpus (what the MCP tool
passes; every file passes it), alternating per query so both sides share the load.
Prints the machine, then one JSON line per configuration (``top_k`` 10 and 100,
``group_by`` chunk and file, hybrid): the p50 without the check and the median of the
per-query differences, in ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness import REPO, VENDORED_CORPUS, emit, emit_machine
from rifflux.config import Settings
from rifflux.index.allowed import real
from rifflux.index.indexer import Indexer
from rifflux.logs import configure_logging
from rifflux.search.request import SearchRequest
from rifflux.search.served import ServedPaths
from rifflux.search.service import SearchService

QUERIES = REPO / "benchmarks" / "awesome_copilot_queries.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=VENDORED_CORPUS)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    queries = [json.loads(line)["query"] for line in QUERIES.read_text().splitlines() if line]
    configure_logging("WARNING")
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.from_env(
            {
                "RIFFLUX_DB_PATH": str(Path(tmp) / "index.db"),
                "RIFFLUX_EMBEDDING_BACKEND": "hash",
                "RIFFLUX_BASE_DIR": str(args.corpus),
                "RIFFLUX_QUERY_CACHE_SIZE": "0",
            }
        )
        report = Indexer(settings).run([args.corpus])
        emit_machine(corpus=str(args.corpus), files=report.files_indexed, queries=len(queries))
        service = SearchService(settings)
        served = ServedPaths((real(args.corpus),))
        try:
            for top_k in (10, 100):
                for group_by in ("chunk", "file"):
                    measure(service, served, queries, args.rounds, top_k, group_by)
        finally:
            service.close()


def measure(
    service: SearchService,
    served: ServedPaths,
    queries: list[str],
    rounds: int,
    top_k: int,
    group_by: str,
) -> None:
    without: list[float] = []
    extra: list[float] = []
    for round_ in range(rounds + 1):  # The first round warms up.
        for query in queries:
            request = SearchRequest(query=query, top_k=top_k, group_by=group_by)  # type: ignore[arg-type]
            started = time.perf_counter()
            service.search_response(request)
            plain = time.perf_counter() - started
            started = time.perf_counter()
            service.search_response(request, served)
            checked = time.perf_counter() - started
            if round_:
                without.append(plain * 1000)
                extra.append((checked - plain) * 1000)
    row = {
        "top_k": top_k,
        "group_by": group_by,
        "p50_ms_without": round(statistics.median(without), 2),
        "median_extra_ms": round(statistics.median(extra), 3),
        "searches": len(without),
    }
    emit("served_check_cost", **row)


if __name__ == "__main__":
    main()
