"""FTS5 segment merging after large jobs: a query reads one b-tree per term, not dozens.

Every write transaction adds a segment to each FTS5 table it touched; FTS5's automerge
folds them level by level, but a large job still leaves many segments, and a query walks
every segment for each of its terms (and skips the postings deleted since). After a job
that rewrote a large share of the index, :func:`merge_after_job` runs FTS5's
``'optimize'`` (every segment into one; deleted postings dropped) on each FTS5 table,
then gives the pages that freed (and those of the rows the job replaced) back to the file
system (:func:`release_free_pages`): they are ~17 % of a fresh index's file.

Invariants:

* Only the writer merges (the finalize step of a job, or the in-process indexer after its
  run); readers never write. The merge is one transaction of its own: readers keep
  their snapshot (WAL) and see the merged index when it commits; a failed merge changes
  nothing and the job still completes.
* Merging never changes what a query returns or its bm25() value: it rewrites how the
  same postings are stored (tests/store/test_segments.py proves identical rankings).
* Bounded: the cost of ``'optimize'`` grows with the whole table, so it runs only when
  the job wrote at least :attr:`MergePolicy.min_fraction` of the index's chunks or
  :attr:`MergePolicy.min_rows` chunks (a job that paid that much writing pays a bounded
  multiple of it more) and the table has more than one segment. A small edit job never
  pays it; automerge keeps its segments in check.
* The segment count comes from FTS5's own structure record (one row of ``<table>_data``),
  so deciding costs one row read per table.
* A transaction of a job that will be optimized anyway may write with automerge off
  (:func:`merges_deferred`), changed and restored inside that transaction, which leaves
  :data:`MERGE_PENDING_KEY` in ``index_metadata``; the next :func:`merge_after_job`
  optimizes and clears it, so a job that never finalized is merged by the next one
  (why: docs/architecture.md, "Storage").
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

from rifflux.store.cjk import CJK_TABLE
from rifflux.store.connection import retry_on_busy, transaction
from rifflux.store.fts import FTS_TABLE
from rifflux.store.paths import PATH_TABLE
from rifflux.store.schema import ABOUT_TABLE, TRIGRAM_TABLE

log = structlog.get_logger(__name__)

# Every FTS5 table of the index (names are constants: formatted into SQL, never user text).
FTS5_TABLES = (FTS_TABLE, PATH_TABLE, ABOUT_TABLE, CJK_TABLE, TRIGRAM_TABLE)
# The structure record's rowid in ``<table>_data`` (FTS5_STRUCTURE_ROWID in fts5_index.c).
_STRUCTURE_ROWID = 10
# ``PRAGMA auto_vacuum`` of an index whose free pages can be released (2: incremental).
AUTO_VACUUM_INCREMENTAL = 2
# Written after the 4-byte cookie by SQLite ≥ 3.43's structure format (FTS5_STRUCTURE_V2).
_STRUCTURE_V2 = b"\xff\x00\x00\x01"
# index_metadata key: segments written with automerge off wait for an ``'optimize'``.
MERGE_PENDING_KEY = "fts_merge_pending"
# FTS5's ``automerge`` when its table has no setting (FTS5_DEFAULT_AUTOMERGE).
FTS5_DEFAULT_AUTOMERGE = 4


@dataclass(frozen=True, slots=True)
class MergePolicy:
    """When a job's writes earn an ``'optimize'``: at least ``min_fraction`` of the index's
    chunks, or at least ``min_rows`` chunks, written by the job."""

    min_fraction: float = 0.25
    min_rows: int = 100_000

    def due(self, rows_written: int, rows_total: int) -> bool:
        if rows_written <= 0:
            return False
        return rows_written >= self.min_rows or rows_written >= self.min_fraction * rows_total

    def defers_merges(self, files_planned: int, files_stored: int) -> bool:
        """Whether the writes of a job planned to write ``files_planned`` files, into an
        index of at most ``files_stored``, skip FTS5's automerge (:func:`merges_deferred`):
        the job rewrites ``min_fraction`` of the files, so the ``'optimize'`` it then gets
        costs a bounded multiple of what it wrote, as :meth:`due` bounds it by chunks."""
        return files_planned > 0 and files_planned >= self.min_fraction * files_stored


DEFAULT_POLICY = MergePolicy()


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's varint at ``at``: (value, next offset)."""
    value = 0
    for i in range(8):
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at + i + 1
    return (value << 8) | data[at + 8], at + 9


def segment_count(conn: sqlite3.Connection, table: str = FTS_TABLE) -> int:
    """How many segments the FTS5 ``table`` has (0: empty, or no such table)."""
    try:
        row = conn.execute(
            f"SELECT block FROM {table}_data WHERE id = ?", (_STRUCTURE_ROWID,)
        ).fetchone()
    except sqlite3.OperationalError:
        return 0
    if row is None or row[0] is None:
        return 0
    data = bytes(row[0])
    at = 8 if data[4:8] == _STRUCTURE_V2 else 4
    _levels, at = _varint(data, at)
    segments, _ = _varint(data, at)
    return segments


def optimize(conn: sqlite3.Connection) -> dict[str, int]:
    """Merge every FTS5 table with more than one segment into one, in one transaction
    that also clears :data:`MERGE_PENDING_KEY`; each merged table's segment count before."""
    merged: dict[str, int] = {}
    with transaction(conn):
        for table in FTS5_TABLES:
            before = segment_count(conn, table)
            if before > 1:
                conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
                merged[table] = before
        if merge_pending(conn):
            conn.execute("DELETE FROM index_metadata WHERE key = ?", (MERGE_PENDING_KEY,))
    return merged


@contextmanager
def merges_deferred(conn: sqlite3.Connection) -> Iterator[None]:
    """Inside a write transaction: the FTS5 writes of the body merge no segments, and the
    index records that an ``'optimize'`` is pending (module docstring). For the writes of
    a job that :func:`merge_after_job` will optimize: each FTS5 table's ``automerge`` is 0
    for the body, then its previous value again (its ``<table>_config`` row restored:
    none by default). An exception propagates and the caller's rollback undoes it all."""
    if not conn.in_transaction:
        raise RuntimeError("merges_deferred belongs inside a write transaction")
    before = {table: _automerge_row(conn, table) for table in FTS5_TABLES}
    for table in FTS5_TABLES:
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('automerge', 0)")
    yield
    # FTS5 writes its pending postings as a segment when a savepoint opens: here, while
    # automerge is still off (at the commit it would be back on).
    conn.execute("SAVEPOINT rifflux_fts_flush")
    conn.execute("RELEASE rifflux_fts_flush")
    for table, value in before.items():
        restored = FTS5_DEFAULT_AUTOMERGE if value is None else value
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('automerge', ?)", (restored,))
        if value is None:
            conn.execute(f"DELETE FROM {table}_config WHERE k = 'automerge'")
    conn.execute(
        "INSERT INTO index_metadata(key, value) VALUES (?, '1') "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (MERGE_PENDING_KEY,),
    )


def _automerge_row(conn: sqlite3.Connection, table: str) -> int | None:
    row = conn.execute(f"SELECT v FROM {table}_config WHERE k = 'automerge'").fetchone()
    return None if row is None else int(row[0])


def files_stored_bound(conn: sqlite3.Connection) -> int:
    """At least the number of stored files, in one b-tree probe (the largest file id;
    ``count(*)`` reads every row)."""
    return int(conn.execute("SELECT coalesce(max(id), 0) FROM files").fetchone()[0])


def merge_pending(conn: sqlite3.Connection) -> bool:
    """Whether writes with automerge off (:func:`merges_deferred`) wait for an optimize."""
    try:
        row = conn.execute(
            "SELECT 1 FROM index_metadata WHERE key = ?", (MERGE_PENDING_KEY,)
        ).fetchone()
    except sqlite3.OperationalError:  # not an index (a bare FTS5 table in a test)
        return False
    return row is not None


def merge_after_job(
    conn: sqlite3.Connection,
    rows_written: int,
    *,
    policy: MergePolicy = DEFAULT_POLICY,
    job_id: str = "",
) -> dict[str, int]:
    """After a job that wrote ``rows_written`` chunks: :func:`optimize` when ``policy``
    says it is due, or when writes deferred their merges (:func:`merge_pending`); the
    tables merged with their segment counts before ({}: none). A failure (the database
    busy past the retries, the disk full) is logged, never raised: the index is as it
    was, only less compact."""
    bound = log.bind(job_id=job_id, rows_written=rows_written)
    pending = merge_pending(conn)
    if rows_written <= 0 and not pending:
        return {}
    total = int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
    if not pending and not policy.due(rows_written, total):
        return {}
    merged: dict[str, int] = {}
    started = time.perf_counter()
    try:
        if pending or segment_count(conn) > 1:
            merged = optimize(conn)
            bound.info(
                "fts.optimized",
                rows_total=total,
                segments_before=merged,
                duration_s=round(time.perf_counter() - started, 3),
            )
        started = time.perf_counter()
        released = release_free_pages(conn)
    except sqlite3.Error as exc:
        bound.warning("fts.optimize_failed", error=str(exc))
        return merged
    if released:
        bound.info(
            "db.pages_released",
            pages=released,
            duration_s=round(time.perf_counter() - started, 3),
        )
    return merged


def release_free_pages(conn: sqlite3.Connection) -> int:
    """Give the database's free pages back to the file system; how many there were.

    An index created by this version has ``auto_vacuum=INCREMENTAL``
    (rifflux.store.connection), so ``PRAGMA incremental_vacuum`` moves its last pages into
    the free ones and truncates the file. An older index (``auto_vacuum`` off) keeps its
    free pages for later writes to reuse: 0; so does a caller's open transaction (the
    pragma runs as its own). Moves pages, never rows: no rowid and no result changes."""
    if conn.in_transaction:
        return 0
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != AUTO_VACUUM_INCREMENTAL:
        return 0
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    if free:
        # Its own transaction. The pragma frees one page per step and execute() steps
        # once (then it returns no row to fetch): executescript() steps it to the end.
        retry_on_busy(lambda: conn.executescript("PRAGMA incremental_vacuum"))
    return free
