"""``rifflux eval DATASET_DIR``: retrieval quality of every search mode on a BEIR dataset."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rifflux.config import command_settings
from rifflux.errors import InvalidQueryError
from rifflux.eval import beir
from rifflux.eval.runner import CUTOFF, EvalReport, run_eval
from rifflux.search.request import MODES, SearchRequest, add_request_arguments, check_mode

# Eval's own --modes and --top-k take the place of these request fields; a token
# budget trims contents, which eval never reads.
NOT_OPTIONS = ("query", "top_k", "mode", "max_tokens")

DEFAULT_TOP_K = 100


def parse_modes(raw: str) -> list[str]:
    modes = [m.strip() for m in raw.split(",") if m.strip()]
    for mode in modes:
        check_mode(mode)
    if not modes:
        raise InvalidQueryError(f"--modes needs at least one of {', '.join(MODES)}")
    return list(dict.fromkeys(modes))


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``eval`` command to ``rifflux``'s subparsers; its handler is :func:`cmd_eval`."""
    parser = subparsers.add_parser(
        "eval",
        help="nDCG@10, Recall@k, MRR@10 and P@10 of each mode on a BEIR dataset",
        description=(
            "Index a BEIR dataset (corpus.jsonl, queries.jsonl, qrels/*.tsv) through the "
            "real pipeline, cached by the dataset's hash, and score every query of the qrels."
        ),
    )
    parser.add_argument("dataset_dir", type=Path, help="directory with corpus.jsonl etc.")
    parser.add_argument(
        "--qrels",
        help="qrels TSV: a path, or a split name in DATASET_DIR/qrels (e.g. train); "
        "default: the dataset's only qrels file",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated modes to score (default: {','.join(MODES)})",
    )
    parser.add_argument(
        "--top-k", type=int, default=DEFAULT_TOP_K, help="documents ranked per query (recall@k)"
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        help=f"where materialised corpora and their indexes live "
        f"(default: ${beir.CACHE_ENV} or {beir.DEFAULT_CACHE_ROOT})",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_request_arguments(parser.add_argument_group("search options"), skip=NOT_OPTIONS)
    parser.set_defaults(handler=cmd_eval)
    return parser


def format_report(report: EvalReport) -> str:
    top_k = report.top_k
    index = report.index.report
    lines = [
        f"{report.dataset}: {report.queries} queries ({report.qrels}), "
        f"{index.files_scanned} documents, {report.index.report.embedding_model}",
        f"index {report.index.cache_dir}: {index.files_indexed} indexed, "
        f"{index.files_unchanged} unchanged, {index.vectors_new} embedded "
        f"in {index.duration_s:.1f}s",
        f"{'mode':<10}{f'nDCG@{CUTOFF}':>10}{f'R@{top_k}':>10}{f'MRR@{CUTOFF}':>10}"
        f"{f'P@{CUTOFF}':>10}{'p50 ms':>10}",
    ]
    if report.options:
        shown = ", ".join(f"{k}={v}" for k, v in report.options.items())
        lines.insert(2, f"options: {shown}")
    for mode, result in report.modes.items():
        lines.append(
            f"{mode:<10}{result.ndcg:>10.4f}{result.recall:>10.4f}"
            f"{result.mrr:>10.4f}{result.precision:>10.4f}{result.p50_ms:>10.1f}"
        )
    return "\n".join(lines)


def search_options(args: argparse.Namespace) -> dict[str, Any]:
    """The search options given on the command line, checked as a SearchRequest would."""
    given = {k: v for k, v in vars(args).items() if k not in NOT_OPTIONS}
    return SearchRequest.from_arguments({**given, "query": ""}).option_arguments()


def cmd_eval(args: argparse.Namespace) -> int:
    dataset_dir: Path = args.dataset_dir
    if not dataset_dir.is_dir():
        raise InvalidQueryError(f"dataset directory {dataset_dir} does not exist")
    report = run_eval(
        dataset_dir,
        beir.resolve_qrels(dataset_dir, args.qrels),
        settings=command_settings(args),
        modes=parse_modes(args.modes),
        top_k=args.top_k,
        cache_root=args.cache_dir,
        progress_stream=sys.stderr,
        options=search_options(args),
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report))
    return 0
