"""What the lexical path field costs: the writer, the index file, and searches while indexing.

    python -m benchmarks.path_field_cost                       # whole awesome-copilot corpus
    python -m benchmarks.path_field_cost --rounds 2 --edits 10

Uses only the public API (``Indexer``, ``SearchService``, ``LexicalOptions``), so the same
command measures any commit: run it from a checkout of the code before and after a change
(``PYTHONPATH=/path/to/other/checkout``), back to back, and compare. Per round:

* **writer**: a full index of a copy of the corpus into a fresh database, in-process with
  the hash embedder (so the embedder costs next to nothing and the store's share is
  largest); the wall and CPU time (this process's, which is steadier than wall time on a
  shared machine) and the database's size after a WAL checkpoint.
* **search p50**: every judged awesome-copilot query through ``SearchService.search``
  (top_k 10), lexical and hybrid, with the path weight at its default and at 0 (two
  services, alternating per query; one warm-up pass, then three timed).
* **first search after an edit**: ``--edits`` times, one file gets a line appended and is
  reindexed (the index generation changes), then the same query is searched twice on a
  service opened before the edits: the first and the second call's time.

``--joins`` (this commit's code only) then compares ways of writing the path join on the
built index (:func:`compare_joins`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import rifflux
from benchmarks.awesome_copilot_quality import (
    DEFAULT_CORPUS,
    DEFAULT_QUERIES,
    load_queries,
    sync_copy,
)
from benchmarks.harness import emit, emit_machine
from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.search import lexical
from rifflux.search.lexical import LexicalOptions
from rifflux.search.query import build_match_query
from rifflux.search.service import SearchService
from rifflux.store import fts
from rifflux.store.connection import open_index_readonly

EDIT_QUERY = "deploy kubernetes manifests with terraform"


def p50(samples: list[float]) -> str:
    return f"{statistics.median(samples):.2f}"


def timed_ms(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def one_round(corpus_copy: Path, work: Path, queries: list[str], edits: int) -> dict[str, str]:
    db = work / "index.db"
    for stale in work.glob("index.db*"):
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    settings = Settings.from_env().with_overrides(
        db_path=db, base_dir=corpus_copy, embedding_backend="hash"
    )
    started, cpu_started = time.perf_counter(), time.process_time()
    report = Indexer(settings).run([corpus_copy])
    index_s, index_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    chunks = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    conn.close()
    row: dict[str, str] = {
        "files": str(report.files_indexed),
        "chunks": str(chunks),
        "index_s": f"{index_s:.2f}",
        "index_cpu_s": f"{index_cpu_s:.2f}",
        "db_bytes": str(db.stat().st_size),
    }
    # Both services answer each query in turn (alternating which goes first), so a load
    # spike from the machine's other jobs hits both alike.
    services = {
        "path": SearchService(settings),
        "nopath": SearchService(settings, lexical=LexicalOptions(path_weight=0.0)),
    }
    for mode in ("lexical", "hybrid"):
        samples: dict[str, list[float]] = {label: [] for label in services}
        for repeat in range(4):
            for n, text in enumerate(queries):
                order = list(services)[:: 1 if (n + repeat) % 2 else -1]
                for label in order:
                    took = timed_ms(
                        lambda t=text, m=mode, s=services[label]: s.search(t, top_k=10, mode=m)
                    )
                    if repeat:  # The first pass warms the page cache and query embeddings.
                        samples[label].append(took)
        for label, taken in samples.items():
            row[f"{mode}_{label}_p50_ms"] = p50(taken)
    for service in services.values():
        service.close()
    service = SearchService(settings)
    service.search(EDIT_QUERY, top_k=10, mode="lexical")
    target = sorted(corpus_copy.rglob("*.md"))[0]
    first, second = [], []
    for n in range(edits):
        with target.open("a", encoding="utf-8") as handle:
            handle.write(f"\nEdit {n}: the rollout notes grew a line.\n")
        Indexer(settings).run([corpus_copy])
        first.append(timed_ms(lambda: service.search(EDIT_QUERY, top_k=10, mode="lexical")))
        second.append(timed_ms(lambda: service.search(EDIT_QUERY, top_k=10, mode="lexical")))
    service.close()
    row["after_edit_first_ms"] = p50(first)
    row["after_edit_second_ms"] = p50(second)
    return row


def compare_joins(db: Path, queries: list[str], repeats: int = 4) -> None:
    """The path bonus's SQL with each way of finding a matching chunk's file, run directly
    (FTS5 MATCH of every query, limit 60, ``chunks_fts``), interleaved per query: the
    shipped ``INDEXED BY chunks_file_of``; the ``chunks`` rowid (the wide row); and
    ``by_file``, which lists the chunks of the matching files instead (``file_id`` index),
    then looks each match up among them. Results must be identical; per variant the p50
    and the largest per-query p50 increase over the SQL without the bonus."""
    shipped = fts._TOP_WITH_PATH_SQL
    by_file = shipped.replace(
        "top AS (SELECT m.id AS id, m.score + {w} * coalesce(p.score, 0.0) AS score FROM m "
        "JOIN chunks k INDEXED BY chunks_file_of ON k.id = m.id "
        "LEFT JOIN p ON p.file_id = k.file_id ",
        "b AS MATERIALIZED (SELECT k.id AS id, p.score AS score FROM p "
        "JOIN chunks k ON k.file_id = p.file_id), "
        "top AS (SELECT m.id AS id, m.score + {w} * coalesce(b.score, 0.0) AS score FROM m "
        "LEFT JOIN b ON b.id = m.id ",
    )
    variants = {
        "no bonus": fts._TOP_SQL,
        "chunks_file_of": shipped,
        "chunks rowid": shipped.replace("INDEXED BY chunks_file_of ", ""),
        "by_file": by_file,
    }
    assert len(set(variants.values())) == len(variants), "a variant did not apply"
    conn = open_index_readonly(db)
    weights = {"t": "chunks_fts", "h": lexical.HEADING_WEIGHT, "c": lexical.CONTENT_WEIGHT}
    sql = {
        name: text.format(w=lexical.PATH_WEIGHT, where="", **weights)
        for name, text in variants.items()
    }
    times: dict[tuple[str, str], list[float]] = {}
    for repeat in range(repeats):
        for n, text in enumerate(queries):
            match = build_match_query(text)
            assert match is not None
            names = list(sql)[(n + repeat) % len(sql) :] + list(sql)[: (n + repeat) % len(sql)]
            rows = {}
            for name in names:
                bound = (match, 60) if name == "no bonus" else (match, match, 60)
                started = time.perf_counter()
                rows[name] = conn.execute(sql[name], bound).fetchall()
                times.setdefault((name, text), []).append((time.perf_counter() - started) * 1000)
            assert rows["chunks_file_of"] == rows["chunks rowid"] == rows["by_file"], text
    conn.close()
    for name in sql:
        all_ms = [ms for text in queries for ms in times[(name, text)]]
        worst = max(
            statistics.median(times[(name, t)]) - statistics.median(times[("no bonus", t)])
            for t in queries
        )
        emit("path_join", join=name, p50_ms=p50(all_ms), largest_increase_ms=round(worst, 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--queries", type=Path, default=DEFAULT_QUERIES)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--edits", type=int, default=10)
    parser.add_argument("--workdir", type=Path, help="default: a temporary directory")
    parser.add_argument(
        "--joins", action="store_true", help="also compare the path join's SQL variants"
    )
    args = parser.parse_args()
    queries = [q.text for q in load_queries(args.queries)]
    files = sorted(p.relative_to(args.corpus).as_posix() for p in args.corpus.rglob("*.md"))
    emit_machine(
        rifflux=str(Path(rifflux.__file__).parent),
        corpus=str(args.corpus),
        files=len(files),
        queries=len(queries),
    )
    with tempfile.TemporaryDirectory(prefix="rifflux-pathcost-") as scratch:
        work = args.workdir or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        corpus_copy = work / "corpus"
        shutil.rmtree(corpus_copy, ignore_errors=True)
        sync_copy(args.corpus, files, corpus_copy)
        for n in range(args.rounds):
            row = one_round(corpus_copy, work, queries, args.edits)
            emit("path_field", round=n + 1, load_avg=os.getloadavg(), **row)
        if args.joins:
            compare_joins(work / "index.db", queries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
