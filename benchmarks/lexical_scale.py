"""Lexical search latency at ~200k chunks, in-process, with the FTS5 segment count.

Generates the corpus with ``benchmarks.scale_corpus`` if ``WORKDIR/corpus`` is missing (25k files
≈ 200k chunks by default) and indexes it in-process with the hash embedder if
``WORKDIR/index.db`` is missing, then times ``SearchService.search(mode="lexical")``
(query cache off) over realistic queries lifted from the indexed chunks: runs of 2–6
consecutive words, some quoted as phrases (``benchmarks.scale_queries``). Each query is labelled
by the rarest of its terms: ``rare`` (a term in under 0.1% of chunks), ``common`` (every
term in 1% or more) or ``mid``; ``phrase`` for the quoted ones. Reports p50/p95/p99
overall and per label, and the FTS5 segment count of ``chunks_fts``.

``--reference`` also times the same queries with every match scored
(``LexicalOptions(bounded=False)``, no score bounds) and checks that
both return the same rankings (ids and bm25() values).

``--fresh-counts`` also times the same queries with every search counting its clauses
afresh (the search before the clause counts kept per connection), first, in the same
process, and checks the rankings are the same.

``--optimize`` then merges every FTS5 table into one segment (what a large job's finalize
does now, rifflux.store.segments), reports what that cost and times the same queries
again, and checks that every query returns the same ranking (ids and scores).

    .venv/bin/python -m benchmarks.lexical_scale --workdir /work/bench-fts --optimize
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import rifflux
from benchmarks.harness import DEFAULT_CORPUS, emit, machine, percentiles
from benchmarks.scale_corpus import generate
from benchmarks.scale_queries import make_queries
from rifflux.config import Settings
from rifflux.errors import SearchTimeoutError
from rifflux.index.indexer import Indexer
from rifflux.search.lexical import DEFAULT_OPTIONS, LexicalOptions
from rifflux.search.service import SearchService
from rifflux.search.snapshot import IndexSnapshot
from rifflux.store.fts import ClauseCounts
from rifflux.store.segments import FTS5_TABLES, optimize, segment_count


def build(workdir: Path, files: int, source: Path, settings: Settings) -> dict[str, Any]:
    corpus = workdir / "corpus"
    out: dict[str, Any] = {}
    if not corpus.is_dir():
        started = time.perf_counter()
        generate(corpus, files, source=source)
        out["generate_s"] = round(time.perf_counter() - started, 1)
    if not Path(settings.db_path).exists():
        started = time.perf_counter()
        Indexer(settings).run([corpus])
        out["index_s"] = round(time.perf_counter() - started, 1)
    return out


class FreshCounts(SearchService):
    """A service whose every search counts its clauses afresh (no counts kept)."""

    def snapshot(self) -> IndexSnapshot:
        return dataclasses.replace(super().snapshot(), counts=ClauseCounts())


def measure(
    settings: Settings,
    queries: list[tuple[str, str]],
    rounds: int,
    lexical: LexicalOptions = DEFAULT_OPTIONS,
    service_type: type[SearchService] = SearchService,
) -> tuple[dict[str, Any], list[list[tuple[str, float]]]]:
    service = service_type(settings, lexical=lexical)
    by_label: dict[str, list[float]] = {}
    # This process's CPU time per query, by label: steadier on a loaded machine.
    cpu: dict[str, list[float]] = {}
    rankings: list[list[tuple[str, float]]] = []
    timeouts: list[str] = []
    try:
        service.search(queries[0][1], top_k=10, mode="lexical")  # warm-up
        for round_no in range(rounds):
            for label, query in queries:
                t0, c0 = time.perf_counter(), time.process_time()
                try:
                    response = service.search(query, top_k=10, mode="lexical")
                except SearchTimeoutError:
                    response = []
                    if round_no == 0:
                        timeouts.append(query)
                elapsed = (time.perf_counter() - t0) * 1000
                cpu.setdefault(label, []).append((time.process_time() - c0) * 1000)
                by_label.setdefault(label, []).append(elapsed)
                if round_no == 0:
                    rankings.append(
                        [(r["chunk_id"], r["score_breakdown"]["bm25"]) for r in response]
                    )
    finally:
        service.close()
    every = [t for times in by_label.values() for t in times]
    out: dict[str, Any] = {"all": percentiles(every)}
    out.update({label: percentiles(times) for label, times in sorted(by_label.items())})
    out["cpu_ms"] = {"all": percentiles([t for times in cpu.values() for t in times])}
    out["cpu_ms"].update({label: percentiles(times) for label, times in sorted(cpu.items())})
    out["timed_out"] = timeouts
    return out, rankings


def segments(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return {table: segment_count(conn, table) for table in FTS5_TABLES}
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/work/bench-fts"))
    parser.add_argument("--db", type=Path, help="index (default: WORKDIR/index.db)")
    parser.add_argument("--files", type=int, default=25_000)
    parser.add_argument("--source", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--optimize", action="store_true", help="merge, then measure again")
    parser.add_argument(
        "--reference",
        action="store_true",
        help="also time every match scored (no bounds) and check the rankings are the same",
    )
    parser.add_argument(
        "--fresh-counts",
        action="store_true",
        help="first time every search counting its clauses afresh (no counts kept)",
    )
    args = parser.parse_args()
    os.environ["RIFFLUX_EMBEDDING_BACKEND"] = "hash"
    os.environ["RIFFLUX_QUERY_CACHE_SIZE"] = "0"
    args.workdir.mkdir(parents=True, exist_ok=True)
    db = args.db or args.workdir / "index.db"
    settings = Settings.from_env().with_overrides(db_path=db)
    report: dict[str, Any] = {
        "machine": machine(),
        "db": str(db),
        "code": str(Path(rifflux.__file__).parent),
    }
    report["build"] = build(args.workdir, args.files, args.source, settings)
    conn = sqlite3.connect(db)
    try:
        report["chunks"] = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        report["fts_data_rows"] = conn.execute("SELECT count(*) FROM chunks_fts_data").fetchone()[0]
        queries = make_queries(conn, args.queries, args.seed)
    finally:
        conn.close()
    report["segments"] = segments(db)
    if args.fresh_counts:
        report["lexical_ms_fresh_counts"], fresh = measure(
            settings, queries, args.rounds, service_type=FreshCounts
        )
    report["lexical_ms"], rankings = measure(settings, queries, args.rounds)
    if args.fresh_counts:
        report["same_rankings_as_fresh_counts"] = fresh == rankings
    emit("lexical_scale", **report)
    if args.reference:
        full = LexicalOptions(bounded=False)
        report["lexical_ms_full_scoring"], reference = measure(settings, queries, args.rounds, full)
        report["same_rankings_as_full_scoring"] = reference == rankings
        report["differing_queries"] = [
            query for (_, query), a, b in zip(queries, rankings, reference, strict=True) if a != b
        ]
        emit("lexical_scale", **report)
    if args.optimize:
        conn = sqlite3.connect(db)
        try:
            started = time.perf_counter()
            merged = optimize(conn)
            report["optimize_s"] = round(time.perf_counter() - started, 2)
            report["optimized_tables"] = merged
            report["fts_data_rows_after"] = conn.execute(
                "SELECT count(*) FROM chunks_fts_data"
            ).fetchone()[0]
        finally:
            conn.close()
        report["segments_after"] = segments(db)
        report["lexical_ms_after"], after = measure(settings, queries, args.rounds)
        report["same_rankings"] = after == rankings
        emit("lexical_scale", **report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
