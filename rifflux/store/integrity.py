"""``PRAGMA quick_check`` of an index database, read-only, as one-line problems.

quick_check verifies the b-tree structure of every table and index page (out-of-order
keys, bad page references, malformed records, free-list damage) in O(N), without the
index-content cross-check of ``integrity_check`` (O(N log N)). Garbage written over a
page that a search never reads goes unnoticed by searches but not by quick_check.

The database is opened read-only (``mode=ro``): checking never writes, and a file that is
not a database at all is reported, not converted.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

# quick_check stops after this many problems. SQLite's default (100) made it fail with
# "database disk image is malformed" instead of listing 30 garbage pages here.
MAX_PROBLEMS = 20


def quick_check(db_path: Path | str, max_problems: int = MAX_PROBLEMS) -> list[str]:
    """quick_check's complaints, one line each; [] when the database is sound."""
    path = Path(db_path)
    if not path.is_file():
        return [f"no index database at {path}"]
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return [f"cannot be opened: {exc}"]
    try:
        rows = conn.execute(f"PRAGMA quick_check({int(max_problems)})").fetchall()
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    finally:
        conn.close()
    # One row may hold several newline-separated complaints under a "*** in database
    # main ***" header: each complaint becomes one line.
    problems = [
        " ".join(line.split())
        for row in rows
        for line in str(row[0]).splitlines()
        if line.strip() and not line.startswith("***")
    ]
    return [] if problems == ["ok"] else problems
