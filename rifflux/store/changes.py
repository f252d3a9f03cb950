"""The chunk change log: which chunk rowids' vector rows changed since a position.

Why a log: SQLite reuses a deleted top row's rowid (``chunks.id`` has no AUTOINCREMENT,
and an existing table cannot be given one without a rebuild), so a rowid alone cannot say
whether its row changed, and listing every chunk row with a vector to diff it against the
vector cache costs 4.7 s of a 7.3 s one-edit publish at 789k rows.

``chunk_changes`` (schema.py) logs the rowid of every chunk whose cached row may have
changed, written by triggers in the writer's own transaction, so no write can skip it
(an older Rifflux's writer included, once a writer of this version has created the
table). Invariants:

* Complete: a chunk's cached row can only go stale through a logged event (the chunk
  deleted, a vector attached, removed or replaced, the chunk or its file's path changed
  in place). A chunk inserted without a vector is not logged: nothing can be cached for
  it, and its rowid's previous chunk was logged when it was deleted.
* Ordered: ``seq`` is AUTOINCREMENT, so positions only grow and are never reused. A
  reader's snapshot holds every entry committed before it, and :func:`head` is the
  highest position ever assigned in that snapshot (``sqlite_sequence``).
* Consumed by one publisher: a manifest records the position its rows include; the next
  publish reads the distinct rowids logged after it (:func:`changed_rowids`) and, once its
  manifest is written, :func:`prune` deletes the entries at or below it and records how
  far it pruned (``chunk_changes_pruned``). A manifest whose position is below that mark
  (another copy of the cache, one restored from a backup) cannot trust the log: its
  publisher lists every row instead, as it does for a manifest without a position (an
  older publisher's) or an index without the table (read-only, never opened by a writer
  of this version).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

from rifflux.store.connection import transaction
from rifflux.store.reader import get_metadata
from rifflux.store.schema import CHANGES_TABLE, has_schema_object

# index_metadata key: the highest position pruned from the log (0: none yet).
PRUNED_KEY = "chunk_changes_pruned"


@dataclass(frozen=True, slots=True)
class LogHead:
    """Where the log stands in one snapshot: the highest position ever assigned, and the
    highest pruned (entries in (pruned, last] are all present)."""

    last: int
    pruned: int

    def covers(self, since: int) -> bool:
        """Are all the entries after position ``since`` still in the log?"""
        return self.pruned <= since <= self.last


def head(conn: sqlite3.Connection) -> LogHead | None:
    """The log's :class:`LogHead` (call inside the read transaction); None when the
    index has no log (an index no writer of this version has opened yet)."""
    if not has_schema_object(conn, "table", CHANGES_TABLE):
        return None
    row = conn.execute(
        "SELECT seq FROM sqlite_sequence WHERE name = ?", (CHANGES_TABLE,)
    ).fetchone()
    return LogHead(int(row[0]) if row else 0, int(get_metadata(conn, PRUNED_KEY) or 0))


def changed_rowids(conn: sqlite3.Connection, since: int) -> Iterator[int]:
    """The distinct chunk rowids logged after position ``since``, unordered."""
    cursor = conn.cursor()
    cursor.row_factory = None
    rows = cursor.execute("SELECT DISTINCT chunk_rowid FROM chunk_changes WHERE seq > ?", (since,))
    return (row[0] for row in rows)


def prune(conn: sqlite3.Connection, through: int) -> int:
    """Delete the entries at or below position ``through`` (a published manifest
    includes them) and record the mark; the entries deleted. One short write
    transaction, skipped when there is nothing to delete."""
    if not conn.execute(
        "SELECT 1 FROM chunk_changes WHERE seq <= ? LIMIT 1", (through,)
    ).fetchone():
        return 0
    with transaction(conn):
        deleted = conn.execute("DELETE FROM chunk_changes WHERE seq <= ?", (through,)).rowcount
        conn.execute(
            "INSERT INTO index_metadata(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
            "SET value = max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
            (PRUNED_KEY, str(through)),
        )
    return int(deleted)
