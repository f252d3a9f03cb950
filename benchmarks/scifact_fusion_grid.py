"""Fusion grids on SciFact train through the real search: minmax α and RRF weights.

    python -m benchmarks.scifact_fusion_grid                 # both grids, top_k 100
    python -m benchmarks.scifact_fusion_grid --top-k 10      # at the depth users search
    python -m benchmarks.scifact_fusion_grid --only minmax-a0.6 rrf-w0.4-0.6

Every configuration is a set of ``search_rifflux`` options (``fusion``, ``alpha``,
``lexical_weight``, ``semantic_weight``) passed to the core's ``SearchService.search``,
scored exactly as ``rifflux eval --qrels train`` scores (documents by their best chunk;
nDCG@10, Recall@top_k, MRR@10, P@10). The cached eval index is reused (``rifflux eval``
builds it). Query embeddings are computed once and reused across configurations, so the
printed milliseconds are ranking costs only; ``rifflux eval`` reports end-to-end p50s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import SCIFACT as DEFAULT_DATASET
from benchmarks.harness import emit, emit_machine
from benchmarks.scifact_lab import MemoEmbedder
from rifflux.config import Settings
from rifflux.eval import beir
from rifflux.eval.runner import evaluate_search, judged_queries, prepare_index, service_search
from rifflux.search.service import SearchService

ALPHAS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
WEIGHTS = (
    (1.0, 1.0),
    (0.4, 0.6),
    (0.6, 0.4),
    (0.5, 1.0),
    (1.0, 0.5),
    (1.25, 1.0),
    (1.5, 1.0),
    (2.0, 1.0),
    (1.0, 1.5),
)


def configurations() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for lexical, semantic in WEIGHTS:
        options = {"lexical_weight": lexical, "semantic_weight": semantic}
        found[f"rrf-w{lexical:g}-{semantic:g}"] = options
    for alpha in ALPHAS:
        found[f"minmax-a{alpha:g}"] = {"fusion": "minmax", "alpha": alpha}
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--qrels", default="train")
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--only", nargs="*", help="configuration names (default: all)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    grid = configurations()
    chosen = args.only or list(grid)
    unknown = [name for name in chosen if name not in grid]
    if unknown:
        parser.error(f"unknown configurations: {', '.join(unknown)}; known: {', '.join(grid)}")

    settings = Settings.from_env().with_overrides(embedding_backend="onnx")
    qrels = beir.load_qrels(beir.resolve_qrels(args.dataset, args.qrels))
    queries = judged_queries(beir.load_queries(args.dataset), qrels)
    index = prepare_index(args.dataset, settings, progress_stream=sys.stderr)
    embedder = MemoEmbedder(index.embedder)
    service = SearchService(index.settings, embedder=embedder)  # type: ignore[arg-type]
    emit_machine(
        dataset=args.dataset.name,
        qrels=args.qrels,
        queries=len(queries),
        top_k=args.top_k,
        model=index.report.embedding_model,
    )
    results: dict[str, dict[str, float]] = {}
    try:
        # Warm the memo so no configuration pays for embedding.
        for text in queries.values():
            embedder.embed_batch([text])
        for name in chosen:
            started = time.perf_counter()
            result = evaluate_search(
                service_search(service, "hybrid", grid[name]),
                queries,
                qrels,
                index.doc_of_path,
                top_k=args.top_k,
            )
            per_query = (time.perf_counter() - started) * 1000 / max(1, len(queries))
            results[name] = {**result.to_dict(args.top_k), "ms_per_query": round(per_query, 1)}
            emit("fusion", configuration=name, **results[name])
    finally:
        service.close()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
