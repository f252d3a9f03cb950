"""Compare two index databases table by table: the proof that a change indexes the same.

Reads every table of ``A`` and ``B`` (FTS5 shadow tables and ``sqlite_sequence``
included; the FTS5 virtual tables themselves are read through their shadow tables) in
rowid order and prints, per table, the row count and whether the rows are equal; exits
1 on any difference. Left out, because they record when or under which id a job ran, not
what was indexed:

- ``jobs`` and ``job_batches``: job bookkeeping (random job ids, timestamps);
- ``files.indexed_at``: the write's wall-clock time;
- ``index_metadata`` key ``vectors_index_uid``: random per database (the vector cache's id).

Two runs compare only if they wrote in the same order (rowids and FTS5 segments follow
it): the in-process indexer, or ``queue_profile.py --keep-db`` (every job step in one
process), not a pool of workers.

    .venv/bin/python benchmarks/index_tables_diff.py A.db B.db
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
    order = ", ".join(f'"{k}"' for k in keys) if without_rowid else "rowid"
    select = ", ".join(f'"{c}"' for c in columns)
    if not without_rowid:
        select = "rowid, " + select
    sha = hashlib.sha256()
    count = 0
    for row in conn.execute(f'SELECT {select} FROM "{table}" ORDER BY {order}'):
        if table == "index_metadata" and row[1] in SKIP_METADATA_KEYS:
            continue
        sha.update(repr(tuple(row)).encode())
        count += 1
    return count, sha.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args()
    a = sqlite3.connect(f"file:{args.a}?mode=ro", uri=True)
    b = sqlite3.connect(f"file:{args.b}?mode=ro", uri=True)
    names_a, names_b = tables(a), tables(b)
    differ = names_a != names_b
    if differ:
        print(f"tables differ: {sorted(set(names_a) ^ set(names_b))}")
    for table in sorted(set(names_a) & set(names_b)):
        da, db = digest(a, table), digest(b, table)
        same = da == db
        differ |= not same
        print(f"{table:24} {da[0]:>8} rows  {'same' if same else f'DIFFERENT (B: {db[0]} rows)'}")
    print("identical" if not differ else "DIFFERENT")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
