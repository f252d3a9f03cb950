"""Latency of the search options and of a query cache hit, on SciFact.

    python -m benchmarks.search_options_latency [--queries 200]

Uses the cached SciFact eval index (``rifflux eval`` builds it; ONNX MiniLM-int8, 5,183
files, 9,109 chunks). For each configuration, every query is searched once through
``SearchService.search_response`` (what the MCP tool and ``rifflux search --json`` call,
top_k 10, hybrid) with the query cache off; "cache hit" repeats each query on a service
whose cache holds it. Prints one JSON line per configuration (ms percentiles).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import SCIFACT as DEFAULT_DATASET
from benchmarks.harness import emit, emit_machine, percentiles
from rifflux.config import Settings
from rifflux.eval import beir
from rifflux.eval.runner import judged_queries, prepare_index
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService

CONFIGS: dict[str, dict[str, Any]] = {
    "hybrid rrf (default)": {},
    "fusion=minmax": {"fusion": "minmax"},
    "group_by=file": {"group_by": "file"},
    "weights 0.4/0.6": {"lexical_weight": 0.4, "semantic_weight": 0.6},
    "min_cosine=0.3": {"min_cosine": 0.3},
    "path_glob docs/1* (~1/9)": {"path_glob": "docs/1*"},
    "file_types md (all)": {"file_types": ["md"]},
    "content_contains 'cell'": {"content_contains": "cell"},
    "modified_after 2000": {"modified_after": "2000-01-01"},
    'phrase "..."': {"phrase": True},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="only the default configuration, with code that has no options or cache "
        "(run with PYTHONPATH pointing at an older checkout)",
    )
    args = parser.parse_args()
    settings = Settings.from_env().with_overrides(embedding_backend="onnx")
    qrels = beir.load_qrels(beir.resolve_qrels(args.dataset, "train"))
    texts = list(judged_queries(beir.load_queries(args.dataset), qrels).values())
    texts = texts[: args.queries]
    index = prepare_index(args.dataset, settings, progress_stream=sys.stderr)
    if args.baseline:
        uncached = SearchService(index.settings, embedder=index.embedder)
    else:
        uncached = SearchService(
            index.settings.with_overrides(query_cache_size=0), embedder=index.embedder
        )
    cached = SearchService(index.settings, embedder=index.embedder)
    emit_machine(
        dataset=str(args.dataset),
        files=index.report.files_scanned,
        queries=len(texts),
        top_k=10,
        model=index.report.embedding_model,
    )
    try:
        for text in texts[:20]:  # Warm the model, the vector cache and SQLite's pages.
            uncached.search_response(SearchRequest(text))
        for name, options in CONFIGS.items() if not args.baseline else [("baseline", {})]:
            samples = []
            for text in texts:
                query = text
                extra = dict(options)
                if extra.pop("phrase", False):
                    words = text.split()
                    query = " ".join(['"' + " ".join(words[:2]) + '"', *words[2:]])
                request = (
                    SearchRequest(query)
                    if args.baseline
                    else SearchRequest.from_arguments({"query": query, **extra})
                )
                started = time.perf_counter()
                uncached.search_response(request)
                samples.append((time.perf_counter() - started) * 1000)
            emit("search_option", option=name, ms=percentiles(samples))
        if args.baseline:
            return 0
        for text in texts:
            cached.search_response(SearchRequest(text))
        hits = []
        for text in texts:
            started = time.perf_counter()
            cached.search_response(SearchRequest(text))
            hits.append((time.perf_counter() - started) * 1000)
        emit(
            "query_cache_hit",
            ms=percentiles(hits, digits=3),
            hits=cached._query_cache.hits,
            misses=cached._query_cache.misses,
        )
    finally:
        uncached.close()
        cached.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
