"""Where a lexical search's time goes at ~200k chunks: CPU time and SQLite VM steps of
each statement kind a search runs, per query class (``benchmarks.scale_queries``'s labels).

Runs ``lexical_search`` (default options) over the queries on one read-only connection
whose statements are timed one by one (CPU time of this process, each statement run to
its last row) and counted in VM steps (``set_progress_handler``, every
``STEP_GRAIN`` steps). Statement kinds: the clause counts, the ranked SQL restricted to
the rarer clauses' rows or over every match, the path and about probes, the rest.
``--kept-counts`` keeps the clause counts across the searches (a SearchService's
reader does), else each search counts afresh; ``--pragma`` runs a PRAGMA on the
connection first (e.g. ``mmap_size=1073741824``).

    nice -n 10 .venv/bin/python -m benchmarks.lexical_profile --db /work/wt/lexical-data/index.db
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness import emit, machine
from benchmarks.scale_queries import make_queries
from rifflux.search.lexical import DEFAULT_OPTIONS, lexical_search
from rifflux.store import fts
from rifflux.store.fts import ClauseCounts

STEP_GRAIN = 100
# Marks the ranked SQL restricted by the bounds (fts._Bounded._restrict's condition).
BOUND_MARK = "/* bounded */"


def marked(restrict: Callable[..., tuple[str, tuple[object, ...]]]) -> Callable[..., Any]:
    def with_mark(*args: Any) -> tuple[str, tuple[object, ...]]:
        cond, params = restrict(*args)
        return f" {BOUND_MARK}{cond}", params

    return with_mark


def kind(sql: str) -> str:
    text = " ".join(sql.split())
    if text.startswith("SELECT count(*)"):
        return "clause count"
    if text.startswith("SELECT 1 FROM files_fts"):
        return "path probe"
    if text.startswith("SELECT 1 FROM chunks_about"):
        return "about probe"
    if text.startswith("SELECT bm25(files_fts"):
        return "path best"
    if "bm25(" in text and "ORDER BY" in text:
        return "ranked restricted" if BOUND_MARK in text else "ranked full"
    return "other"


class Fetched:
    """A statement's rows, fetched to the last one while timed."""

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class Timed(sqlite3.Connection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cpu: dict[str, float] = {}
        self.steps: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self._ticks = 0

    def _tick(self) -> int:
        self._ticks += 1
        return 0

    def execute(self, sql: str, params: Any = (), /) -> Any:  # type: ignore[override]
        k = kind(sql)
        self._ticks = 0
        self.set_progress_handler(self._tick, STEP_GRAIN)
        c0 = time.process_time()
        rows = super().execute(sql, params).fetchall()
        elapsed = time.process_time() - c0
        self.set_progress_handler(None, 0)
        self.cpu[k] = self.cpu.get(k, 0.0) + elapsed * 1000
        self.steps[k] = self.steps.get(k, 0) + self._ticks * STEP_GRAIN
        self.calls[k] = self.calls.get(k, 0) + 1
        return Fetched(rows)

    def reset(self) -> None:
        self.cpu, self.steps, self.calls = {}, {}, {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=Path("/work/wt/lexical-data/index.db"))
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--kept-counts", action="store_true")
    parser.add_argument("--pragma", action="append", default=[])
    args = parser.parse_args()
    fts._Bounded._restrict = marked(fts._Bounded._restrict)  # type: ignore[method-assign]
    setup = sqlite3.connect(args.db)
    try:
        queries = make_queries(setup, args.queries, args.seed)
        chunks = setup.execute("SELECT count(*) FROM chunks").fetchone()[0]
    finally:
        setup.close()
    uri = f"file:{args.db.absolute()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, factory=Timed)
    assert isinstance(conn, Timed)
    for pragma in args.pragma:
        conn.execute(f"PRAGMA {pragma}")
    counts = ClauseCounts()
    per_label: dict[str, list[dict[str, float]]] = {}
    lexical_search(conn, queries[0][1], 10, DEFAULT_OPTIONS)  # warm-up
    for label, query in queries:
        conn.reset()
        c0 = time.process_time()
        kept = counts if args.kept_counts else ClauseCounts()
        lexical_search(conn, query, 10, DEFAULT_OPTIONS, counts=kept)
        total = (time.process_time() - c0) * 1000
        row = {"total": total, **{f"{k} ms": v for k, v in conn.cpu.items()}}
        row.update({f"{k} steps": float(v) for k, v in conn.steps.items()})
        row.update({f"{k} calls": float(v) for k, v in conn.calls.items()})
        per_label.setdefault(label, []).append(row)
    conn.close()
    report: dict[str, Any] = {
        "machine": machine(),
        "db": str(args.db),
        "chunks": chunks,
        "kept_counts": args.kept_counts,
        "pragmas": args.pragma,
    }
    for label, rows in sorted(per_label.items()):
        keys = sorted({k for r in rows for k in r})
        report[label] = {
            "n": len(rows),
            # Mean per query (a kind's share of the total), and the total's p50.
            "p50 total ms": round(statistics.median(r["total"] for r in rows), 2),
            **{f"mean {k}": round(sum(r.get(k, 0.0) for r in rows) / len(rows), 2) for k in keys},
        }
    emit("lexical_profile", **report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
