"""Index a BEIR dataset through the real pipeline and score each search mode on it.

A document's score is its best chunk's score: chunks are searched deep enough to hold
``top_k`` distinct documents and each document keeps its first (best) position.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rifflux.config import Settings
from rifflux.embed.base import Embedder
from rifflux.embed.factory import make_embedder
from rifflux.eval import beir
from rifflux.eval.metrics import mean, mrr_at_k, ndcg_at_k, precision_at_k, recall_at_k
from rifflux.index.indexer import Indexer
from rifflux.index.report import IndexReport
from rifflux.progress import ProgressLine
from rifflux.search.request import SearchRequest, check_mode, check_top_k
from rifflux.search.service import SearchService

# nDCG and MRR are cut at 10 (BEIR's headline numbers); recall at the run's top_k.
CUTOFF = 10
# Chunks searched per wanted document; doubled while fewer distinct documents come back.
CHUNKS_PER_DOC = 3
# Smaller embed batches than the default: the progress line moves more often.
EVAL_BATCH_TARGET_BYTES = 64_000

ChunkSearch = Callable[[str, int], Sequence[str]]
"""(query, n) → stored paths of the best ``n`` chunks, best first."""


@dataclass(frozen=True, slots=True)
class EvalIndex:
    """A dataset's corpus materialised and indexed in its cache directory."""

    cache_dir: Path
    settings: Settings
    embedder: Embedder
    doc_of_path: dict[str, str]
    report: IndexReport


@dataclass(slots=True)
class ModeResult:
    ndcg: float
    recall: float
    mrr: float
    p50_ms: float
    precision: float = 0.0
    runs: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def to_dict(self, top_k: int) -> dict[str, float]:
        return {
            f"ndcg@{CUTOFF}": round(self.ndcg, 4),
            f"recall@{top_k}": round(self.recall, 4),
            f"mrr@{CUTOFF}": round(self.mrr, 4),
            f"precision@{CUTOFF}": round(self.precision, 4),
            "p50_ms": round(self.p50_ms, 2),
        }


@dataclass(slots=True)
class EvalReport:
    dataset: str
    qrels: str
    queries: int
    top_k: int
    index: EvalIndex
    modes: dict[str, ModeResult]
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        report = self.index.report
        return {
            "dataset": self.dataset,
            "qrels": self.qrels,
            "queries": self.queries,
            "top_k": self.top_k,
            "options": self.options,
            "embedding_model": report.embedding_model,
            "cache_dir": str(self.index.cache_dir),
            "index": {
                "files": report.files_scanned,
                "files_indexed": report.files_indexed,
                "files_unchanged": report.files_unchanged,
                "chunks_written": report.chunks_written,
                "vectors_new": report.vectors_new,
                "duration_s": report.duration_s,
            },
            "modes": {mode: result.to_dict(self.top_k) for mode, result in self.modes.items()},
        }


def eval_settings(settings: Settings, cache_dir: Path) -> Settings:
    """``settings`` pointed at the cache directory's index and markdown files."""
    return settings.with_overrides(
        db_path=cache_dir / beir.DB_NAME,
        base_dir=cache_dir,
        include_globs=("*.md",),
        exclude_globs=(),
        batch_target_bytes=min(settings.batch_target_bytes, EVAL_BATCH_TARGET_BYTES),
    )


def prepare_index(
    dataset_dir: Path,
    settings: Settings,
    *,
    cache_root: Path | None = None,
    progress_stream: TextIO | None = None,
    force: bool = False,
) -> EvalIndex:
    """Materialise the corpus (once) and bring its index up to date (a no-op when cached).

    ``force`` re-chunks every document; vectors of unchanged embedding inputs are reused.
    """
    cache_dir = beir.cache_dir_for(dataset_dir, settings, cache_root)
    doc_of_path = beir.materialise(dataset_dir, cache_dir)
    indexed = eval_settings(settings, cache_dir)
    embedder = make_embedder(indexed)
    bar = ProgressLine(progress_stream or sys.stderr, "indexing", "files")
    try:
        report = Indexer(indexed, embedder=embedder).run(
            [cache_dir / beir.DOCS_DIR], force=force, progress=bar.update
        )
    finally:
        bar.close()
    return EvalIndex(cache_dir, indexed, embedder, doc_of_path, report)


def distinct_documents(paths: Sequence[str], doc_of_path: Mapping[str, str]) -> list[str]:
    """Document ids in order of their best chunk; paths of no document are ignored."""
    seen: dict[str, None] = {}
    for path in paths:
        doc = doc_of_path.get(path)
        if doc is not None and doc not in seen:
            seen[doc] = None
    return list(seen)


def rank_documents(
    search: ChunkSearch, query: str, doc_of_path: Mapping[str, str], top_k: int
) -> list[str]:
    """The ``top_k`` best documents for ``query``, each scored by its best chunk."""
    depth = top_k * CHUNKS_PER_DOC
    while True:
        paths = search(query, depth)
        docs = distinct_documents(paths, doc_of_path)
        if len(docs) >= top_k or len(paths) < depth:
            return docs[:top_k]
        depth *= 2


def judged_queries(
    queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, str]:
    """The qrels' queries that have a text and at least one relevant document."""
    return {
        qid: queries[qid]
        for qid, grades in qrels.items()
        if qid in queries and any(g > 0 for g in grades.values())
    }


def evaluate_search(
    search: ChunkSearch,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    doc_of_path: Mapping[str, str],
    *,
    top_k: int,
    progress: Callable[[int, int], None] | None = None,
) -> ModeResult:
    """Mean nDCG@10, Recall@top_k, MRR@10 and Precision@10 of ``search`` over ``queries``."""
    runs: dict[str, list[str]] = {}
    timings: list[float] = []
    for done, (qid, text) in enumerate(queries.items(), start=1):
        started = time.perf_counter()
        runs[qid] = rank_documents(search, text, doc_of_path, top_k)
        timings.append((time.perf_counter() - started) * 1000)
        if progress is not None:
            progress(done, len(queries))
    return ModeResult(
        ndcg=mean([ndcg_at_k(runs[q], qrels[q], CUTOFF) for q in runs]),
        recall=mean([recall_at_k(runs[q], qrels[q], top_k) for q in runs]),
        mrr=mean([mrr_at_k(runs[q], qrels[q], CUTOFF) for q in runs]),
        precision=mean([precision_at_k(runs[q], qrels[q], CUTOFF) for q in runs]),
        p50_ms=statistics.median(timings) if timings else 0.0,
        runs=runs,
    )


def service_search(
    service: SearchService, mode: str, options: Mapping[str, Any] | None = None
) -> ChunkSearch:
    """``service.search`` in ``mode`` with the optional SearchRequest fields ``options``."""
    extra = dict(options or {})

    def search(query: str, n: int) -> list[str]:
        return [hit["path"] for hit in service.search(query, top_k=n, mode=mode, **extra)]

    return search


def run_eval(
    dataset_dir: Path,
    qrels_path: Path,
    *,
    settings: Settings,
    modes: Sequence[str] = ("lexical", "semantic", "hybrid"),
    top_k: int = 100,
    cache_root: Path | None = None,
    progress_stream: TextIO | None = None,
    options: Mapping[str, Any] | None = None,
) -> EvalReport:
    """Index ``dataset_dir`` (or reuse its cached index) and score every mode.

    ``options``: optional SearchRequest fields every search gets (``fusion``, ``alpha``,
    ``group_by``...), checked before anything is indexed."""
    modes = [check_mode(mode) for mode in modes]
    top_k = check_top_k(top_k, maximum=None)
    options = dict(options or {})
    SearchRequest.from_arguments({**options, "query": ""})
    qrels = beir.load_qrels(qrels_path)
    queries = judged_queries(beir.load_queries(dataset_dir), qrels)
    index = prepare_index(
        dataset_dir, settings, cache_root=cache_root, progress_stream=progress_stream
    )
    service = SearchService(index.settings, embedder=index.embedder)
    results: dict[str, ModeResult] = {}
    try:
        for mode in modes:
            bar = ProgressLine(progress_stream or sys.stderr, f"{mode:>8}", "queries")
            try:
                results[mode] = evaluate_search(
                    service_search(service, mode, options),
                    queries,
                    qrels,
                    index.doc_of_path,
                    top_k=top_k,
                    progress=bar.update,
                )
            finally:
                bar.close()
    finally:
        service.close()
    return EvalReport(
        dataset=dataset_dir.resolve().name,
        qrels=str(qrels_path),
        queries=len(queries),
        top_k=top_k,
        index=index,
        modes=results,
        options=SearchRequest.from_arguments({**options, "query": ""}).option_arguments(),
    )
