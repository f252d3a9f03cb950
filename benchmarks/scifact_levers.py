"""Retrieval-quality levers on a BEIR dataset (SciFact train qrels by default).

    python benchmarks/scifact_levers.py --list               # experiment names
    python benchmarks/scifact_levers.py --only rrf-k20 minmax-a0.3
    python benchmarks/scifact_levers.py                      # all (~40 min on 2 cores)
    python benchmarks/scifact_levers.py --index chunk2000    # another index variant
    python benchmarks/scifact_levers.py --top-k 10           # the depth a user searches at

Each experiment changes one thing against the core defaults (FTS5 porter BM25 over
heading_path + content, MiniLM-int8 cosine, RRF k=60, candidate_multiplier 2) and is
scored exactly like ``rifflux eval``: documents ranked by their best chunk, nDCG@10,
Recall@top_k and MRR@10 averaged over the qrels' queries. A mode an experiment does not
change is printed as "·". The index is built (or reused) in the eval cache; index
variants (embedding input, chunk size) get their own cache directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime
from scifact_lab import (
    Feedback,
    Fusion,
    Lab,
    max_scaled,
    rrf_fusion,
    score_fusion,
    zscore,
)

from rifflux.config import Settings
from rifflux.eval import beir
from rifflux.eval.runner import ChunkSearch, evaluate_search, judged_queries, prepare_index
from rifflux.search.lexical import DEFAULT_OPTIONS, LexicalOptions

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = REPO_ROOT.parent / "shared" / "eval" / "scifact"
MODES = ("lexical", "semantic", "hybrid")

SearchFactory = Callable[[Lab], ChunkSearch]


@dataclass(frozen=True)
class Experiment:
    name: str
    setting: str
    searches: dict[str, SearchFactory]
    lexical: LexicalOptions = DEFAULT_OPTIONS


def core(mode: str) -> SearchFactory:
    return lambda lab: lab.core(mode)


def experiments() -> list[Experiment]:
    every_mode = {mode: core(mode) for mode in MODES}
    lex_hybrid = {"lexical": core("lexical"), "hybrid": core("hybrid")}
    found = [Experiment("baseline", "core defaults", every_mode)]
    for heading, content in ((0.5, 1.0), (2.0, 1.0), (3.0, 1.0), (5.0, 1.0)):
        found.append(
            Experiment(
                f"bm25-h{heading:g}",
                f"bm25() weights heading {heading:g}, content {content:g}",
                lex_hybrid,
                LexicalOptions(heading_weight=heading, content_weight=content),
            )
        )
    found.append(
        Experiment(
            "keep-stopwords",
            "keep English stop words in the query (the core drops them)",
            lex_hybrid,
            LexicalOptions(stop_words=frozenset()),
        )
    )
    for k in (5, 10, 20, 40, 100):
        found.append(
            Experiment(
                f"rrf-k{k}", f"RRF k={k}", {"hybrid": lambda lab, k=k: lab.hybrid(rrf_fusion(k))}
            )
        )
    for mult in (1, 4, 10):
        found.append(
            Experiment(
                f"depth-x{mult}",
                f"candidate_multiplier {mult}",
                {"hybrid": lambda lab, m=mult: lab.hybrid(rrf_fusion(60), multiplier=m)},
            )
        )
    for lw, sw in ((1.0, 1.5), (1.5, 1.0), (1.0, 2.0)):
        found.append(
            Experiment(
                f"rrf-w{lw:g}-{sw:g}",
                f"RRF k=60, weights lexical {lw:g} semantic {sw:g}",
                {"hybrid": lambda lab, lw=lw, sw=sw: lab.hybrid(rrf_fusion(60, lw, sw))},
            )
        )
    for alpha in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
        found.append(
            Experiment(
                f"minmax-a{alpha:g}",
                f"min-max score fusion, alpha (lexical share) {alpha:g}",
                {"hybrid": lambda lab, a=alpha: lab.hybrid(score_fusion(a))},
            )
        )
    for name, normalise in (("zscore", zscore), ("maxnorm", max_scaled)):
        for alpha in (0.4, 0.5, 0.6, 0.7):
            found.append(
                Experiment(
                    f"{name}-a{alpha:g}",
                    f"{name} score fusion, alpha (lexical share) {alpha:g}",
                    {"hybrid": lambda lab, a=alpha, f=normalise: lab.hybrid(score_fusion(a, f))},
                )
            )
    for k, lw in ((k, lw) for k in (5, 10, 20, 30) for lw in (1.25, 1.5, 2.0)):
        found.append(
            Experiment(
                f"rrf-k{k}-w{lw:g}-1",
                f"RRF k={k}, weights lexical {lw:g} semantic 1",
                {"hybrid": lambda lab, k=k, lw=lw: lab.hybrid(rrf_fusion(k, lw, 1.0))},
            )
        )
    for beta, depth, source in (
        (0.5, 3, "hybrid"),
        (1.0, 3, "hybrid"),
        (1.0, 5, "hybrid"),
        (0.5, 3, "lexical"),
        (1.0, 3, "lexical"),
    ):
        feedback = Feedback(beta, depth, source)
        found.append(
            Experiment(
                f"prf-{source[:3]}-b{beta:g}-d{depth}",
                f"semantic query + {beta:g} x mean of {source} top-{depth} chunk vectors, RRF",
                {
                    "semantic": lambda lab, f=feedback: lab.semantic(f),
                    "hybrid": lambda lab, f=feedback: lab.hybrid(rrf_fusion(60), feedback=f),
                },
            )
        )
    # Combinations of the levers that helped on their own.
    tuned_lexical = LexicalOptions(heading_weight=3.0)
    combos: list[tuple[str, str, Fusion, Feedback | None]] = [
        ("rrf-k5-w1.25", "RRF k=5, weights 1.25/1", rrf_fusion(5, 1.25), None),
        ("rrf-k10-w1.5", "RRF k=10, weights 1.5/1", rrf_fusion(10, 1.5), None),
        ("minmax-a0.6", "min-max alpha 0.6", score_fusion(0.6), None),
        ("maxnorm-a0.5", "maxnorm alpha 0.5", score_fusion(0.5, max_scaled), None),
    ]
    for fusion_name, fusion_setting, fusion, _ in list(combos):
        for source in ("lexical", "hybrid"):
            feedback = Feedback(0.5, 3, source)
            combos.append(
                (
                    f"{fusion_name}-prf-{source[:3]}",
                    f"{fusion_setting} + PRF 0.5 x {source} top-3",
                    fusion,
                    feedback,
                )
            )
    for name, setting, fusion, feedback in combos:
        found.append(
            Experiment(
                f"combo-{name}",
                f"heading 3, stop words dropped, {setting}",
                {
                    "lexical": core("lexical"),
                    "hybrid": lambda lab, f=fusion, fb=feedback: lab.hybrid(f, feedback=fb),
                },
                tuned_lexical,
            )
        )
        if feedback is None:
            continue  # the same fusion without the lexical changes is listed above
        found.append(
            Experiment(
                f"plain-{name}",
                setting,
                {"hybrid": lambda lab, f=fusion, fb=feedback: lab.hybrid(f, feedback=fb)},
            )
        )
    return found


# Index variants are settings overrides. The heading-breadcrumb embedding input this
# script once compared (a patch of rifflux.index.prepare) is the core's default since
# its measured gain (BENCHMARKS.md), so no variant patches a module any more.
INDEX_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "chunk2000": {"max_chunk_chars": 2000},
}


def machine() -> str:
    return (
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"onnxruntime {onnxruntime.__version__}, {platform.platform()}"
    )


def fmt(result: dict[str, float] | None) -> str:
    if result is None:
        return f"{'·':>22}"
    return f"{result['ndcg']:>8.4f}{result['recall']:>7.3f}{result['mrr']:>7.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--qrels", default="train")
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--index", default="default", choices=sorted(INDEX_VARIANTS))
    parser.add_argument("--only", nargs="*", help="experiment names (default: all)")
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--list", action="store_true", help="print experiment names and exit")
    args = parser.parse_args()

    if args.list:
        for experiment in experiments():
            print(f"{experiment.name:<28}{experiment.setting}")
        return 0

    chosen = [e for e in experiments() if not args.only or e.name in args.only]
    if not chosen:
        parser.error(f"no experiment named {args.only}; --list shows the names")
    qrels_path = beir.resolve_qrels(args.dataset, args.qrels)
    qrels = beir.load_qrels(qrels_path)
    queries = judged_queries(beir.load_queries(args.dataset), qrels)
    settings = Settings.from_env().with_overrides(**INDEX_VARIANTS[args.index])
    index = prepare_index(args.dataset, settings, cache_root=args.cache_dir)
    print(f"machine: {machine()}")
    print(
        f"dataset: {args.dataset} qrels {qrels_path.name}: {len(queries)} queries, "
        f"{index.report.files_scanned} documents, index variant {args.index!r}"
    )
    print(
        f"index:   {index.cache_dir} ({index.report.embedding_model}, "
        f"{index.report.vectors_new} embedded now)"
    )
    print(f"top_k:   {args.top_k} documents per query (nDCG@10, R@{args.top_k}, MRR@10)\n")
    header = "".join(f"{m + ' nDCG R MRR':>22}" for m in MODES)
    print(f"{'experiment':<18}{header}  setting")
    lab = Lab(index)
    lab.warm_queries(list(queries.values()))
    rows = []
    try:
        for experiment in chosen:
            started = time.perf_counter()
            results: dict[str, dict[str, float] | None] = dict.fromkeys(MODES)
            variant = lab.with_lexical(experiment.lexical)
            for mode, factory in experiment.searches.items():
                run = evaluate_search(
                    factory(variant), queries, qrels, index.doc_of_path, top_k=args.top_k
                )
                results[mode] = {
                    "ndcg": run.ndcg,
                    "recall": run.recall,
                    "mrr": run.mrr,
                    "p50_ms": run.p50_ms,
                }
            line = "".join(fmt(results[m]) for m in MODES)
            print(
                f"{experiment.name:<18}{line}  {experiment.setting} "
                f"({time.perf_counter() - started:.0f}s)",
                flush=True,
            )
            rows.append(
                {
                    "name": experiment.name,
                    "setting": experiment.setting,
                    "index": args.index,
                    "top_k": args.top_k,
                    "modes": results,
                }
            )
    finally:
        lab.close()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
