"""Compare two index databases table by table: the proof that a change indexes the same.

Reads every table of ``A`` and ``B`` (``sqlite_sequence`` and the FTS5 shadow tables
included) in rowid order and prints, per table, the row count and whether the rows are
equal; exits 1 on any difference. Each FTS5 table's postings are also compared term by
term (an ``fts5vocab`` ``instance`` table: term, row, column, offset: what a query can
match and what bm25() counts). Left out, because they record when or under which id a
job ran, not what was indexed:

- ``jobs`` and ``job_batches``: job bookkeeping (random job ids, timestamps);
- ``files.indexed_at``: the write's wall-clock time;
- ``index_metadata`` key ``vectors_index_uid``: random per database (the vector cache's
  id); the table is compared by key, not rowid (a key written and deleted during a job
  moves the rowids of the keys after it).

``--layout-may-differ`` reports the FTS5 segment pages (``<table>_data``, ``_idx``) as
layout only, not as a difference: a change to when segments are merged stores the same
postings in other pages (the postings comparison still has to pass).

Two runs compare only if they wrote in the same order (rowids and FTS5 segments follow
it): the in-process indexer, or ``queue_profile.py --keep-db`` (every job step in one
process), not a pool of workers.

    .venv/bin/python benchmarks/index_tables_diff.py A.db B.db [--layout-may-differ]
"""

from __future__ import annotations

import argparse
import hashlib
import sqlite3
import sys
from pathlib import Path

SKIP_TABLES = frozenset({"jobs", "job_batches"})
SKIP_COLUMNS = {"files": frozenset({"indexed_at"})}
SKIP_METADATA_KEYS = frozenset({"vectors_index_uid"})
KEYED_TABLES = frozenset({"index_metadata"})
FTS5_TABLES = ("chunks_fts", "files_fts", "chunks_about", "chunks_cjk")
LAYOUT_SUFFIXES = ("_data", "_idx")


def tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%' "
        "ORDER BY name"
    )
    return [name for (name,) in rows if name not in SKIP_TABLES]


def digest(conn: sqlite3.Connection, table: str) -> tuple[int, str]:
    """(rows, sha256 of every kept column of every row, in rowid or key order)."""
    info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
    skip = SKIP_COLUMNS.get(table, frozenset())
    columns = [row[1] for row in info if row[1] not in skip]
    keys = [row[1] for row in sorted(info, key=lambda r: r[5]) if row[5]]
    without_rowid = conn.execute(
        "SELECT sql LIKE '%WITHOUT ROWID%' FROM sqlite_master WHERE name = ?", (table,)
    ).fetchone()[0]
    by_key = without_rowid or table in KEYED_TABLES
    order = ", ".join(f'"{k}"' for k in keys) if by_key else "rowid"
    select = ", ".join(f'"{c}"' for c in columns)
    if not by_key:
        select = "rowid, " + select
    sha = hashlib.sha256()
    count = 0
    for row in conn.execute(f'SELECT {select} FROM "{table}" ORDER BY {order}'):
        if table == "index_metadata" and row[0] in SKIP_METADATA_KEYS:
            continue
        sha.update(repr(tuple(row)).encode())
        count += 1
    return count, sha.hexdigest()


def postings(conn: sqlite3.Connection, table: str) -> tuple[int, str]:
    """(instances, sha256 of every (term, row, column, offset)) of an FTS5 table."""
    vocab = f"temp.v_{table}"
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {vocab} USING fts5vocab(main, {table}, instance)"
    )
    sha = hashlib.sha256()
    count = 0
    for row in conn.execute(
        f"SELECT term, doc, col, offset FROM {vocab} ORDER BY term, doc, col, offset"
    ):
        sha.update(repr(tuple(row)).encode())
        count += 1
    return count, sha.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--layout-may-differ", action="store_true")
    args = parser.parse_args()
    # Read-only files; the fts5vocab tables live in each connection's temp schema.
    a = sqlite3.connect(f"file:{args.a}?mode=ro", uri=True)
    b = sqlite3.connect(f"file:{args.b}?mode=ro", uri=True)
    names_a, names_b = tables(a), tables(b)
    differ = names_a != names_b
    if differ:
        print(f"tables differ: {sorted(set(names_a) ^ set(names_b))}")
    for table in sorted(set(names_a) & set(names_b)):
        da, db = digest(a, table), digest(b, table)
        same = da == db
        layout = args.layout_may_differ and table.endswith(LAYOUT_SUFFIXES)
        layout &= table.startswith(FTS5_TABLES)
        differ |= not same and not layout
        verdict = "same" if same else f"DIFFERENT (B: {db[0]} rows)"
        if layout and not same:
            verdict = "other pages (segment layout)"
        print(f"{table:24} {da[0]:>8} rows  {verdict}")
    for table in FTS5_TABLES:
        pa, pb = postings(a, table), postings(b, table)
        differ |= pa != pb
        verdict = "same" if pa == pb else f"DIFFERENT (B: {pb[0]})"
        print(f"{table + ' postings':24} {pa[0]:>8} terms at offsets  {verdict}")
    print("identical" if not differ else "DIFFERENT")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
