"""Hybrid levers on the awesome-copilot judged queries, file level, against the naive pipeline.

    python -m benchmarks.awesome_copilot_hybrid_grid                        # every setting, tune
    python -m benchmarks.awesome_copilot_hybrid_grid --only base rrf-k20    # some settings
    python -m benchmarks.awesome_copilot_hybrid_grid --split heldout --only base rrf-k20

Every setting is a hybrid search through the real ``SearchService.search`` over the index
``benchmarks.awesome_copilot_quality`` builds (same corpus subset, cache directory and vector
cache; run that script first, this one embeds only the queries), scored as that script
scores: the distinct files of the ranked chunks in rank order (``rank_documents``, as
``rifflux eval``), nDCG@10 / Recall@10 / MRR@10 with the graded judgements. A setting
varies settings fields (``rrf_k``, ``candidate_multiplier``, ``lexical_weight``,
``semantic_weight``), per-call ``search_rifflux`` options (``candidate_k``, ``group_by``)
or the lexical bm25() column weights (which then apply to the hybrid's lexical side).
The naive pipeline's hybrid is printed alongside on the same split.

A ``replica`` setting answers "would a path column help?" without a schema change: the
index's chunks are copied into in-memory FTS5 tables with the same tokenizer, with the
file's path (its separators split words) as an extra field, ranked by bm25() with the same
query terms and column weights, ties by path and chunk index as the core does (a path-only
FTS5 table, one row per chunk, adds its weighted bm25() to a copy of ``chunks_fts``, so the
path's words do not change the other columns' IDF); its hybrid fuses that list with the
real semantic side by ``rrf_fuse`` at the same depths. This prototype came first; the
``path*`` settings measure the shipped path field (``LexicalOptions.path_weight``, one
row per file) through the real search. ``replica-p0`` (path weight 0) must reproduce
``path0``, the search without the path field.

Settings are chosen on ``tune``; ``heldout`` is for the few settings one considers
shipping, run once each (``--split heldout --only ...``), never to choose among many.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.awesome_copilot_quality import (
    CUTOFF,
    DEFAULT_CACHE,
    DEFAULT_CORPUS,
    DEFAULT_DISTRACTORS,
    DEFAULT_QUERIES,
    SPLITS,
    CachedEmbedder,
    NaivePipeline,
    Ranker,
    chunker_fingerprint,
    prepare_corpus,
    score,
)
from benchmarks.harness import emit, emit_machine
from rifflux.config import Settings
from rifflux.embed.onnx import OnnxEmbedder
from rifflux.eval.runner import rank_documents
from rifflux.search.fusion import rrf_fuse
from rifflux.search.lexical import DEFAULT_OPTIONS, LexicalOptions
from rifflux.search.query import build_match_query
from rifflux.search.service import SearchService

Key = tuple[str, int]
Setting = dict[str, dict[str, Any]]


class ReplicaLexical:
    """The index's chunks in in-memory FTS5 tables: a copy of ``chunks_fts`` and a path
    table with each chunk's file path (module docstring)."""

    def __init__(self, index_db: Path) -> None:
        source = sqlite3.connect(f"file:{index_db}?mode=ro", uri=True)
        rows = source.execute(
            "SELECT c.id, f.path, c.chunk_index, c.heading_path, c.content "
            "FROM chunks c JOIN files f ON f.id = c.file_id"
        ).fetchall()
        source.close()
        self.keys: dict[int, Key] = {int(r[0]): (str(r[1]), int(r[2])) for r in rows}
        self.db = sqlite3.connect(":memory:")
        tokenize = "tokenize='porter unicode61 remove_diacritics 2'"
        self.db.execute(f"CREATE VIRTUAL TABLE t USING fts5(heading_path, content, {tokenize})")
        self.db.execute(f"CREATE VIRTUAL TABLE p USING fts5(path, {tokenize})")
        with self.db:
            self.db.executemany(
                "INSERT INTO t(rowid, heading_path, content) VALUES (?, ?, ?)",
                [(r[0], r[3], r[4]) for r in rows],
            )
            self.db.executemany(
                "INSERT INTO p(rowid, path) VALUES (?, ?)", [(r[0], r[1]) for r in rows]
            )

    def ranked(self, text: str, limit: int, weights: tuple[float, float, float]) -> list[Key]:
        """bm25(heading_path, content) + path weight × bm25(path), best ``limit`` keys."""
        match = build_match_query(text)
        if match is None:
            return []
        path_weight, heading, content = weights
        scores: dict[int, float] = {}
        for rowid, bm25 in self.db.execute(
            f"SELECT rowid, bm25(t, {heading}, {content}) FROM t WHERE t MATCH ?", (match,)
        ):
            scores[int(rowid)] = float(bm25)
        if path_weight > 0:
            for rowid, bm25 in self.db.execute(
                "SELECT rowid, bm25(p) FROM p WHERE p MATCH ?", (match,)
            ):
                scores[int(rowid)] = scores.get(int(rowid), 0.0) + path_weight * float(bm25)
        hits = sorted((value, self.keys[rowid]) for rowid, value in scores.items())
        return [key for _value, key in hits[:limit]]


def settings_grid() -> dict[str, Setting]:
    """name → {"settings": Settings overrides, "options": search options, "lexical": ...}."""
    grid: dict[str, Setting] = {"base": {}}
    for k in (5, 10, 20, 30, 40, 100):
        grid[f"rrf-k{k}"] = {"settings": {"rrf_k": k}}
    for multiplier in (1, 3, 4, 8):
        grid[f"cm{multiplier}"] = {"settings": {"candidate_multiplier": multiplier}}
    for depth in (20, 40, 60, 100, 200):
        grid[f"ck{depth}"] = {"options": {"candidate_k": depth}}
    for lexical, semantic in ((1.0, 0.5), (1.0, 0.75), (0.75, 1.0), (0.5, 1.0), (1.5, 1.0)):
        grid[f"w{lexical:g}-{semantic:g}"] = {
            "settings": {"lexical_weight": lexical, "semantic_weight": semantic}
        }
    for heading in (0.0, 1.0, 2.0, 5.0):
        grid[f"h{heading:g}"] = {"lexical": {"heading_weight": heading}}
    grid["group-file"] = {"options": {"group_by": "file"}}
    for k in (1, 2, 3, 7, 15):
        grid[f"rrf-k{k}"] = {"settings": {"rrf_k": k}}
    for k in (5, 10, 20):
        for lexical, semantic in ((1.25, 1.0), (1.0, 1.25)):
            grid[f"rrf-k{k}-w{lexical:g}-{semantic:g}"] = {
                "settings": {"rrf_k": k, "lexical_weight": lexical, "semantic_weight": semantic}
            }
        grid[f"rrf-k{k}-group-file"] = {
            "settings": {"rrf_k": k},
            "options": {"group_by": "file"},
        }
    grid["group-file-ck60"] = {"options": {"group_by": "file", "candidate_k": 60}}
    for path in (0.0, 0.1, 0.25, 0.5, 1.0, 2.0):
        grid[f"replica-p{path:g}"] = {"replica": {"path": path, "heading": 3.0}}
    for path in (0.0, 0.1, 0.25, 0.5, 1.0):
        grid[f"path{path:g}"] = {"lexical": {"path_weight": path}}
    grid["h5-ck40"] = {"lexical": {"heading_weight": 5.0}, "options": {"candidate_k": 40}}
    grid["h5-w0.75-1"] = {
        "lexical": {"heading_weight": 5.0},
        "settings": {"lexical_weight": 0.75, "semantic_weight": 1.0},
    }
    return grid


def file_ranker(search: Any, chunks_read: int | None, doc_of_path: dict[str, str]) -> Ranker:
    """Files in rank order: of one ``top_k=chunks_read`` search, else as ``rifflux eval``."""

    def ranked(text: str) -> list[str]:
        if chunks_read is not None:
            return list(dict.fromkeys(search(text, chunks_read)))[:CUTOFF]
        return rank_documents(search, text, doc_of_path, CUTOFF)

    return ranked


def replica_search(
    replica: ReplicaLexical, service: SearchService, weights: dict[str, float], mode: str
) -> Any:
    """``search(text, n)`` over the replica's lexical side (and the real semantic side)."""
    settings = service.settings
    bm25_weights = (weights["path"], weights["heading"], DEFAULT_OPTIONS.content_weight)

    def search(text: str, n: int) -> list[str]:
        depth = n * settings.candidate_multiplier
        if mode == "semantic":
            return [h["path"] for h in service.search(text, top_k=n, mode="semantic")]
        lexical = replica.ranked(text, depth, bm25_weights)
        if mode == "lexical":
            return [key[0] for key in lexical[:n]]
        semantic = [
            (h["path"], int(h["chunk_index"]))
            for h in service.search(text, top_k=depth, mode="semantic")
        ]
        fused = rrf_fuse(lexical, semantic, k=settings.rrf_k)
        return [hit.key[0] for hit in fused[:n]]

    return search


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--queries", type=Path, default=DEFAULT_QUERIES)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--split", choices=SPLITS, default="tune")
    parser.add_argument("--distractors", type=int, default=DEFAULT_DISTRACTORS)
    parser.add_argument("--full", action="store_true", help="the whole corpus's index")
    parser.add_argument("--only", nargs="*", help="setting names (default: all)")
    parser.add_argument("--no-naive", action="store_true", help="skip the naive reference")
    parser.add_argument(
        "--timings",
        action="store_true",
        help="add each Rifflux cell's p50 ms per search call (query embeddings cached)",
    )
    parser.add_argument(
        "--chunks-read",
        type=int,
        help="score the distinct files of one top_k=N search (what an agent reads); the "
        "naive pipeline is then scored on its best N chunks and on all its fused chunks",
    )
    parser.add_argument(
        "--modes", nargs="+", default=["hybrid"], choices=("lexical", "semantic", "hybrid")
    )
    args = parser.parse_args(argv)
    grid = settings_grid()
    chosen = args.only or list(grid)
    unknown = [name for name in chosen if name not in grid]
    if unknown:
        parser.error(f"unknown settings: {', '.join(unknown)}; known: {', '.join(grid)}")

    queries, all_files, files, cache, root = prepare_corpus(args)
    base = Settings.from_env()
    index_db = cache / f"rifflux-{chunker_fingerprint(base)}" / "index.db"
    if not index_db.is_file():
        sys.exit(f"no index at {index_db}: run python -m benchmarks.awesome_copilot_quality first")
    embedder = CachedEmbedder(OnnxEmbedder(), args.cache_dir / "vectors.sqlite")
    chosen_queries = [q for q in queries if q.split == args.split]
    doc_of_path = {path: path for path in files}
    emit_machine(
        files=len(files),
        corpus_files=len(all_files),
        index=str(index_db),
        split=args.split,
        queries=len(chosen_queries),
    )

    def quality(found: dict[str, Any]) -> dict[str, float]:
        return {k: round(found[k], 3) for k in ("ndcg", "recall", "mrr")}

    if not args.no_naive:
        naive = NaivePipeline(root, files, embedder)
        depths: dict[str, int | None] = {"naive": None}
        if args.chunks_read is not None:
            depths = {f"naive, best {args.chunks_read} chunks": args.chunks_read} | depths
        for label, depth in depths.items():
            for mode in args.modes:
                ranker: Ranker = lambda text, mode=mode, depth=depth: naive.rank_files(  # noqa: E731
                    text, mode, depth
                )
                found = score(chosen_queries, ranker)
                emit("file_level_quality", setting=label, mode=mode, **quality(found))
    replica: ReplicaLexical | None = None
    for name in chosen:
        setting = grid[name]
        settings = base.with_overrides(
            db_path=index_db,
            base_dir=root,
            embedding_backend="onnx",
            **setting.get("settings", {}),
        )
        lexical = LexicalOptions(
            heading_weight=setting.get("lexical", {}).get(
                "heading_weight", DEFAULT_OPTIONS.heading_weight
            ),
            content_weight=DEFAULT_OPTIONS.content_weight,
            path_weight=setting.get("lexical", {}).get("path_weight", DEFAULT_OPTIONS.path_weight),
        )
        service = SearchService(settings, embedder=embedder, lexical=lexical)
        options = setting.get("options", {})
        for mode in args.modes:
            if "replica" in setting:
                if replica is None:
                    replica = ReplicaLexical(index_db)
                search = replica_search(replica, service, setting["replica"], mode)
            else:

                def search(
                    text: str,
                    n: int,
                    mode: str = mode,
                    service: SearchService = service,
                    options: dict[str, Any] = options,
                ) -> list[str]:
                    hits = service.search(text, top_k=n, mode=mode, **options)
                    return [h["path"] for h in hits]

            timings: list[float] = []

            def timed(
                text: str, n: int, search: Any = search, timings: list[float] = timings
            ) -> Any:
                started = time.perf_counter()
                found = search(text, n)
                timings.append((time.perf_counter() - started) * 1000)
                return found

            found = score(chosen_queries, file_ranker(timed, args.chunks_read, doc_of_path))
            extra = {"p50_ms": round(statistics.median(timings), 1)} if args.timings else {}
            emit("file_level_quality", setting=name, mode=mode, **quality(found), **extra)
        service.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
