"""Index and search latency on a real corpus (default: awesome-copilot), in-process.

Measures a full index, an incremental no-change run, and search p50/p95 per mode.
With ``--backend onnx`` the index is embedded with the ONNX model (slow: ~25 chunks/s
on 2 cores) and kept in ``--workdir`` for reuse; query embedding time is included in
semantic and hybrid latency.

    .venv/bin/python -m benchmarks.index_and_search --backend hash
    .venv/bin/python -m benchmarks.index_and_search --backend onnx --workdir /tmp/rifflux-bench-onnx

Prints the machine, then one JSON line per measure: ``index`` (full and no-change
runs), ``search`` (p50 / p95 / p99 ms per mode).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import DEFAULT_CORPUS, emit, emit_machine, percentiles

MODES = ("lexical", "semantic", "hybrid")
QUERIES = [
    "how to write unit tests in python",
    "terraform azure best practices",
    "react component accessibility",
    "security review checklist",
    "github actions workflow caching",
    "database migration strategy",
    "prompt engineering guidelines",
    "kubernetes deployment manifest",
    "code review comments tone",
    "docker image size optimisation",
    "dotnet dependency injection",
    "api rate limiting",
    "refactoring legacy code",
    "write documentation for a cli",
    "performance profiling java",
    "mcp server tools",
    "commit message conventions",
    "error handling in go",
    "playwright end to end tests",
    "sql injection prevention",
]


def time_searches(service: Any, modes: Sequence[str], rounds: int) -> dict[str, object]:
    """Percentiles (ms) of ``rounds`` passes over QUERIES per mode, after one warm-up."""
    report: dict[str, object] = {}
    for mode in modes:
        service.search(QUERIES[0], top_k=10, mode=mode)  # warm-up: model load, cache build
        timings = []
        for _ in range(rounds):
            for query in QUERIES:
                t0 = time.perf_counter()
                service.search(query, top_k=10, mode=mode)
                timings.append((time.perf_counter() - t0) * 1000)
        report[f"{mode}_ms"] = percentiles(timings)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--backend", choices=("hash", "onnx"), default="hash")
    parser.add_argument("--workdir", type=Path, help="keep the index here (default: temp dir)")
    parser.add_argument("--rounds", type=int, default=5, help="passes over the query set")
    args = parser.parse_args()

    from rifflux.config import Settings
    from rifflux.index.indexer import Indexer
    from rifflux.logs import configure_logging
    from rifflux.search.service import SearchService
    from rifflux.status import index_counts

    configure_logging("WARNING")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rifflux-bench-"))
    fresh = not (workdir / "index.db").exists()
    # A reused index keeps the base directory it recorded when it was built.
    settings = Settings(
        db_path=workdir / "index.db",
        base_dir=args.corpus.parent if fresh else None,
        embedding_backend=args.backend,
    )
    indexer = Indexer(settings)
    emit_machine(corpus=str(args.corpus), backend=args.backend)
    report: dict[str, object] = {}
    started = time.perf_counter()
    full = indexer.run([args.corpus])
    full_seconds = time.perf_counter() - started
    if fresh:
        report["full_index_s"] = round(full_seconds, 3)
    report["files"] = full.files_scanned
    started = time.perf_counter()
    incremental = indexer.run([args.corpus])
    report["incremental_no_change_s"] = round(time.perf_counter() - started, 3)
    assert incremental.files_indexed == 0

    service = SearchService(settings)
    report["chunks"] = index_counts(service)["chunks"]
    emit("index", **report)
    for mode, timings in time_searches(service, MODES, args.rounds).items():
        emit("search", mode=mode.removesuffix("_ms"), chunks=report["chunks"], ms=timings)
    service.close()
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
