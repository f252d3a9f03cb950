"""The one way to open an SQLite database and the one way to retry when it is busy.

Invariants:

* Connections run in autocommit mode; index code opens every transaction with
  :func:`transaction`: a write takes the lock up front with ``BEGIN IMMEDIATE`` (two
  writers never deadlock upgrading a read lock), retried with backoff while another
  writer holds it, and a nested call becomes a ``SAVEPOINT``. Once ``BEGIN IMMEDIATE``
  holds the lock in WAL mode no statement of the body can meet a busy lock, so retrying
  the ``BEGIN`` is retrying the whole transaction. :func:`write_transaction` (no retry)
  is what the queue databases' modules wrap in :func:`retry_on_busy` themselves.
* Reads never write: :func:`open_index_readonly` opens with ``mode=ro``, so a search
  creates no file, directory or schema, and refuses a file that is not a Rifflux index
  with one line, leaving it unchanged. :func:`open_index`, the writers' way in, creates
  the schema only in a database that has no tables yet.
* SQLite failures reach a user as one line (:func:`database_failure`): a damaged index
  (:class:`~rifflux.errors.IndexDamagedError`), a file that is not SQLite at all
  (:class:`~rifflux.errors.NotAnIndexError`), a folder where SQLite cannot create the
  ``-wal``/``-shm`` files (:class:`~rifflux.errors.IndexFolderNotWritableError`), a full
  disk (:class:`~rifflux.errors.DiskFullError`).
* On a full disk a read opens without the ``-shm`` (:class:`LocklessReader`), reading
  only, creating nothing; its owner replaces it once it is outdated. Why that is safe:
  docs/architecture.md, "Storage".
"""

from __future__ import annotations

import os
import random
import secrets
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import structlog

from rifflux.errors import (
    DiskFullError,
    IndexDamagedError,
    IndexFolderNotWritableError,
    IndexMissingError,
    NotAnIndexError,
    RiffluxError,
    SchemaVersionError,
)
from rifflux.store import cjk, faults, grep_text, paths
from rifflux.store.peek import peek
from rifflux.store.schema import (
    ADDED_COLUMNS,
    ADDED_TABLES,
    BACKFILL_SQL,
    GREP_TABLE,
    SCHEMA_SQL,
    SCHEMA_VERSION,
    has_schema_object,
)

log = structlog.get_logger(__name__)

T = TypeVar("T")

# How long SQLite itself waits on a lock before raising "database is locked" (ms).
BUSY_TIMEOUT_MS = 5_000
# Retry policy on top of the busy timeout: capped exponential backoff with full jitter.
RETRY_ATTEMPTS = 8
RETRY_BASE_SECONDS = 0.05
RETRY_CAP_SECONDS = 2.0

# A connection that writes a job's batch (``tune_for_batch_writes``): its page cache, in
# KiB. A batch's transaction dirties every leaf page its rows' random keys land on
# (chunk ids, text hashes, the embeddings' keys) besides the rows' and FTS5's own pages;
# past SQLite's default 2 MiB cache it spilled dirty pages into the WAL before the
# commit wrote them again, and read evicted ones back.
BATCH_CACHE_KIB = 32 * 1024
# The page size of a new index. A batch write is mostly FTS5 segment blobs and rows of
# ~1 KB text; on awesome-copilot 16 KiB pages cut a hash job's CPU by 4-6 % (fewer
# b-tree pages to balance and log) and the file by 6 % against SQLite's 4 KiB, with the
# same search latency. An index created with other pages keeps them.
PAGE_SIZE = 16_384

# index_metadata key of the random id that ties a vector cache to one database file
# (rifflux.vectors.publish reads it under this name).
INDEX_UID_KEY = "vectors_index_uid"
REBUILD_HINT = "rebuild it with `rifflux index --rebuild PATH...`"
# SQLite's primary result codes that mean the file itself is damaged or foreign.
DAMAGE_CODES = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def is_damage_error(exc: BaseException) -> bool:
    """True for "database disk image is malformed" and "file is not a database"."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(DAMAGE_CODES):
        return True
    message = str(exc).lower()
    return "malformed" in message or "not a database" in message


def damaged_index(db_path: Path | str | None, exc: BaseException) -> IndexDamagedError:
    """The one-line error for a damaged database, naming the file when known."""
    where = f": {db_path}" if db_path is not None else ""
    return IndexDamagedError(
        f"index database is damaged ({exc}{where}); rebuild with `rifflux index --rebuild DIR`"
    )


SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""


def is_foreign_file(db_path: Path | str) -> bool:
    """A non-empty file without SQLite's header and without a ``-wal`` beside it: a
    text file or another format, not a damaged index (whose header survives damage to
    its pages, and whose WAL would be there if its first page had been lost)."""
    head = peek(db_path, len(SQLITE_HEADER))
    if head is None:
        return False
    return bool(head) and head != SQLITE_HEADER and not Path(f"{db_path}-wal").exists()


def database_failure(db_path: Path | str | None, exc: BaseException) -> RiffluxError | None:
    """The one-line error for an SQLite error about the index at ``db_path``, or None
    when it is none of: a foreign file, a damaged index, a folder SQLite cannot write, a
    full disk."""
    if db_path is not None:
        unwritable = folder_not_writable(db_path, exc)
        if unwritable is not None:
            return unwritable
        # The file whose operation failed (the SQLite queue beside the index, say).
        failed = Path(faults.tagged_database(exc) or db_path)
        if _no_room(failed, exc):
            return disk_full_error(failed, exc)
    if not is_damage_error(exc):
        return None
    if db_path is not None and is_foreign_file(db_path):
        return NotAnIndexError(
            f"{db_path} is not a Rifflux index: it is not an SQLite database at all; "
            "name an index database (such as .rifflux/index.db) with --db, "
            "RIFFLUX_DB_PATH or db_path"
        )
    return damaged_index(db_path, exc)


def folder_not_writable(
    db_path: Path | str, exc: BaseException
) -> IndexFolderNotWritableError | None:
    """The error for SQLite failing to create the index's side files in a read-only folder."""
    message = str(exc).lower()
    if "unable to open database file" not in message and "readonly database" not in message:
        return None
    path = Path(db_path)
    folder = path.parent
    if os.access(folder, os.W_OK):
        return None
    return IndexFolderNotWritableError(
        f"cannot open the index at {path}: its folder is not writable, and SQLite must "
        f"create {path.name}-wal and {path.name}-shm there, even to read an index in WAL "
        f"mode ({exc}); make {folder} writable, or copy the index to a writable folder"
    )


def missing_index(db_path: Path | str) -> IndexMissingError:
    return IndexMissingError(f"no index at {db_path}; create it with `rifflux index DIR`")


def is_busy_error(exc: BaseException) -> bool:
    """True for the transient lock errors that a retry can fix."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    message = str(exc).lower()
    return "database is locked" in message or "database is busy" in message or "busy" in message


def backoff_delay(
    attempt: int, *, base: float = RETRY_BASE_SECONDS, cap: float = RETRY_CAP_SECONDS
) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)]."""
    return random.uniform(0.0, min(cap, base * (2**attempt)))


def retry_on_busy(
    operation: Callable[[], T],
    *,
    attempts: int = RETRY_ATTEMPTS,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    """Run ``operation``; on ``database is locked``/``busy`` retry with backoff."""
    for attempt in range(attempts):
        try:
            return operation()
        except sqlite3.OperationalError as exc:
            if not is_busy_error(exc) or attempt == attempts - 1:
                raise
            delay = backoff_delay(attempt)
            log.warning("sqlite.busy_retry", attempt=attempt + 1, delay_s=round(delay, 3))
            if on_retry is not None:
                on_retry(attempt + 1, exc)
            time.sleep(delay)
    raise AssertionError("unreachable")


def connect(path: Path | str, *, readonly: bool = False, wal: bool = True) -> sqlite3.Connection:
    """Open an SQLite file in WAL mode with foreign keys on and a busy timeout.

    ``wal=False`` leaves the journal mode alone (switching it writes the file header):
    :func:`open_index` switches only once it knows the file is, or will be, an index.
    """
    db_path = Path(path)
    if readonly:
        # Quoted: a "?" or "#" in the path must not end the file name of the URI.
        uri = f"file:{quote(str(db_path.absolute()))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    else:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(db_path), isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys=ON")
    if not readonly and wal:
        _use_wal(conn)
    return conn


def tune_for_batch_writes(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Set up ``conn`` (from :func:`open_index`) for a transaction that writes a whole batch
    of files; a job step's connection, closed when the step ends.

    - ``temp_store=MEMORY``: a statement that may fail halfway inside a transaction (an
      insert with constraints and triggers) keeps the original of every page it changes
      that the transaction had already changed (a statement journal); past 64 KiB SQLite
      spills that journal to a temporary file, so a batch's multi-row chunk insert and
      its vector inserts wrote ~220k pages to deleted files in ``/var/tmp`` during an
      awesome-copilot job (two thirds of its ``pwrite`` calls). In memory it is bounded
      by one statement's pages: one batch's.
    - ``cache_size``: :data:`BATCH_CACHE_KIB`, so the batch's dirty pages stay in the
      cache until the commit writes each once.

    Neither changes what is written, only where SQLite keeps its scratch copies.
    """
    conn.execute("PRAGMA temp_store=MEMORY")
    conn.execute(f"PRAGMA cache_size=-{BATCH_CACHE_KIB}")
    return conn


def _use_wal(conn: sqlite3.Connection) -> None:
    retry_on_busy(lambda: conn.execute("PRAGMA journal_mode=WAL"))
    conn.execute("PRAGMA synchronous=NORMAL")


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextmanager
def transaction(
    conn: sqlite3.Connection,
    *,
    write: bool = True,
    on_retry: Callable[[int, BaseException], None] | None = None,
    attempts: int = RETRY_ATTEMPTS,
) -> Iterator[sqlite3.Connection]:
    """The one transaction of index code: commit on success, roll back on any exception.

    ``write``: ``BEGIN IMMEDIATE``, retried on ``database is locked``/``busy`` with
    capped exponential backoff (``on_retry`` hears about every retry; ``attempts``
    ``BEGIN``s at most, each waiting up to the connection's busy timeout). Inside an open
    transaction it nests as a ``SAVEPOINT``: an exception rolls back only the nested part
    and propagates. ``write=False``: one consistent read snapshot (deferred ``BEGIN``)
    for several reads; inside an open transaction it simply joins it.
    """
    if conn.in_transaction:
        if not write:
            yield conn
            return
        name = f"rifflux_sp_{secrets.token_hex(4)}"
        conn.execute(f"SAVEPOINT {name}")
        try:
            yield conn
        except BaseException:
            conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
            raise
        conn.execute(f"RELEASE {name}")
        return
    if write:
        retry_on_busy(lambda: conn.execute("BEGIN IMMEDIATE"), on_retry=on_retry, attempts=attempts)
    else:
        conn.execute("BEGIN")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _stored_version(conn: sqlite3.Connection) -> int | None:
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='index_metadata'"
    ).fetchone()
    if not has_meta:
        return None
    row = conn.execute("SELECT value FROM index_metadata WHERE key='schema_version'").fetchone()
    return int(row["value"]) if row else None


def open_index(path: Path | str) -> sqlite3.Connection:
    """Open (creating if needed) the index database and check its schema version."""
    db_path = Path(path)
    try:
        conn = connect(db_path, wal=False)
    except sqlite3.DatabaseError as exc:
        _raise_known(db_path, exc)
        raise
    try:
        # One snapshot for the checks: another process may be creating the schema right
        # now, and reads in separate statements could see before and after its commit.
        with transaction(conn, write=False):
            version = _stored_version(conn)
            if version is None:
                _refuse_foreign(conn, db_path)
        if version is None:
            # Before the first page is written (a no-op on a file a racing opener
            # created): pages freed later go back to the file system (free_pages), and
            # pages of PAGE_SIZE bytes.
            conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            _use_wal(conn)
            with transaction(conn):
                # Re-read under the write lock: a racing opener may have created it.
                version = _stored_version(conn)
                if version is None:
                    _refuse_foreign(conn, db_path)
                    for statement in _split_sql(SCHEMA_SQL):
                        conn.execute(statement)
                    # The vector cache's uid is born with the schema, so a search (which
                    # opens the index read-only) can always publish the cache files.
                    conn.execute(
                        "INSERT OR IGNORE INTO index_metadata(key, value) VALUES "
                        "('schema_version', ?), ('generation', '0'), (?, ?)",
                        (str(SCHEMA_VERSION), INDEX_UID_KEY, secrets.token_hex(8)),
                    )
        if version is not None:
            _check_version(db_path, version)
            _use_wal(conn)
            _add_missing_columns(conn)
            _add_missing_tables(conn)
    except sqlite3.DatabaseError as exc:
        conn.close()
        _raise_known(db_path, exc)
        raise
    except BaseException:
        conn.close()
        raise
    return conn


def _raise_known(db_path: Path, exc: sqlite3.DatabaseError) -> None:
    """Raise the one-line error for ``exc`` when :func:`database_failure` knows it."""
    known = database_failure(db_path, exc)
    if known is not None:
        raise known from exc


def _refuse_foreign(conn: sqlite3.Connection, db_path: Path) -> None:
    """Raise unless a database without a schema version is empty (ours to create)."""
    has_tables = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='files'"
    ).fetchone()
    if has_tables:
        raise SchemaVersionError(
            f"{db_path} has no schema version (an old Rifflux index); {REBUILD_HINT}"
        )
    if conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone():
        raise NotAnIndexError(
            f"{db_path} is an SQLite database but not a Rifflux index; "
            "pass another --db (or RIFFLUX_DB_PATH)"
        )


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """Additive migrations within one schema version: add the columns an older index lacks.

    Idempotent, and a no-op (one ``PRAGMA table_info`` per table) when nothing is missing.
    """
    for table, columns in ADDED_COLUMNS.items():
        have = {row["name"] for row in conn.execute(f"PRAGMA table_info({table})")}
        missing = [(name, decl) for name, decl in columns if name not in have]
        if not missing:
            continue
        with transaction(conn):
            have = {row["name"] for row in conn.execute(f"PRAGMA table_info({table})")}
            for name, decl in missing:
                if name not in have:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
            for statement in BACKFILL_SQL.get(table, ()):
                conn.execute(statement)


# How a table of ADDED_TABLES is filled from what older indexes stored.
_TABLE_BACKFILL: dict[str, Callable[[sqlite3.Connection], int]] = {
    "chunks_cjk": cjk.backfill,
    GREP_TABLE: grep_text.drop_old_tables,
    "files_fts": paths.backfill,
}


def _add_missing_tables(conn: sqlite3.Connection) -> None:
    """Additive migrations within one schema version: create (and fill) the tables an older
    index lacks. Idempotent; a no-op (one ``sqlite_master`` read) when none is missing."""
    for table, sql in ADDED_TABLES.items():
        if has_schema_object(conn, "table", table):
            continue
        with transaction(conn):
            if has_schema_object(conn, "table", table):  # A racing writer made it first.
                continue
            for statement in _split_sql(sql):
                conn.execute(statement)
            filled = _TABLE_BACKFILL[table](conn) if table in _TABLE_BACKFILL else 0
        log.info("index.table_added", table=table, rows=filled)


def _check_version(db_path: Path, version: int) -> None:
    if version != SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{db_path} has schema version {version}, this Rifflux needs "
            f"{SCHEMA_VERSION}; {REBUILD_HINT}"
        )


def open_index_readonly(path: Path | str) -> sqlite3.Connection:
    """Open an existing index for reading only; never creates or changes a file.

    Raises:
      IndexMissingError: No file at ``path``.
      NotAnIndexError: ``path`` is a directory, or a database without Rifflux's schema.
      SchemaVersionError: An index of another schema version.
      IndexDamagedError: SQLite finds the file malformed or not a database.
    """
    db_path = Path(path)
    try:
        mode = db_path.stat().st_mode
    except FileNotFoundError:
        raise missing_index(db_path) from None
    if stat.S_ISDIR(mode):
        raise NotAnIndexError(
            f"{db_path} is a directory, not an index database (e.g. {db_path / 'index.db'})"
        )
    if not stat.S_ISREG(mode):
        # A FIFO would block the open forever; a device is no index either.
        raise NotAnIndexError(f"{db_path} is not a regular file, so not an index database")
    try:
        conn = connect(db_path, readonly=True)
    except sqlite3.DatabaseError as exc:
        raise _read_failure(db_path, exc) from exc
    try:
        _check_is_index(conn, db_path)
    except sqlite3.DatabaseError as exc:
        conn.close()
        if _no_room(db_path, exc):
            return _open_lockless(db_path, exc)
        raise _read_failure(db_path, exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _check_is_index(conn: sqlite3.Connection, db_path: Path) -> None:
    """Raise unless ``conn`` reads a Rifflux index of this schema version (the first
    read, so the one that needs the ``-shm``)."""
    version = _stored_version(conn)
    if version is None:
        raise NotAnIndexError(
            f"{db_path} is not a Rifflux index; create one with `rifflux index DIR`"
        )
    _check_version(db_path, version)


class LocklessReader(sqlite3.Connection):
    """A read-only connection that takes no lock and maps no ``-shm``: how
    :func:`open_index_readonly` reads an index whose disk is full (see the module's
    docstring). Valid for the files as they were when it opened."""

    db_path: Path
    files: tuple[tuple[int, int, int] | None, ...]

    def outdated(self) -> bool:
        """True once the disk has room again (a normal connection opens now) or the
        database or its WAL changed (this one's view may be stale)."""
        return not _disk_full(self.db_path) or _files_key(self.db_path) != self.files


def _files_key(db_path: Path) -> tuple[tuple[int, int, int] | None, ...]:
    """(inode, size, mtime) of the database and its WAL; None for a missing file."""
    keys: list[tuple[int, int, int] | None] = []
    for path in (db_path, Path(f"{db_path}-wal")):
        try:
            st = path.stat()
        except OSError:
            keys.append(None)
            continue
        keys.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(keys)


def _disk_full(db_path: Path) -> bool:
    free = faults.free_bytes(db_path)
    return free is not None and free < faults.FULL_BYTES


def _no_room(db_path: Path, exc: BaseException) -> bool:
    """True when ``exc`` failed for want of space on the disk holding ``db_path``: an
    I/O error (SQLite could not create or extend a ``-shm``) or "database or disk is
    full" (any other write), while less than ``faults.FULL_BYTES`` is free there."""
    return faults.fault_kind(exc) in (faults.IO, faults.FULL) and _disk_full(db_path)


# The WAL file's layout (https://sqlite.org/fileformat2.html#walformat): a 32-byte
# header (page size at 8, salts at 16), then frames of a 24-byte header (the same salts
# at 8) and one page.
_WAL_HEADER_BYTES = 32
_WAL_FRAME_HEADER_BYTES = 24


def _wal_has_frames(db_path: Path) -> bool:
    """True when the index's ``-wal`` holds at least one whole frame of its current
    header (its salts): frames a reader must see. False for a missing or empty WAL, a
    header alone, or frames left from before the WAL was last restarted."""
    wal = Path(f"{db_path}-wal")
    head = peek(wal, _WAL_HEADER_BYTES + _WAL_FRAME_HEADER_BYTES)
    if head is None or len(head) < _WAL_HEADER_BYTES + _WAL_FRAME_HEADER_BYTES:
        return False
    page_size = int.from_bytes(head[8:12], "big")
    try:
        size = wal.stat().st_size
    except OSError:
        return False
    frame = _WAL_HEADER_BYTES
    whole = size >= frame + _WAL_FRAME_HEADER_BYTES + page_size
    return whole and head[16:24] == head[frame + 8 : frame + 16]


def _open_lockless(db_path: Path, cause: sqlite3.DatabaseError) -> LocklessReader:
    """A :class:`LocklessReader` of the index at ``db_path``, or DiskFullError."""
    files = _files_key(db_path)
    uri = f"file:{quote(str(db_path.absolute()))}?mode=ro"
    # A WAL without frames holds nothing: every committed page is in the database file,
    # which nothing can change while no connection can open the index. Else the WAL's
    # frames are read into a private wal-index (exclusive mode) under a VFS without
    # locks. (That one would delete a WAL without a valid frame when it closes.)
    uri += "&vfs=unix-none" if _wal_has_frames(db_path) else "&immutable=1"
    conn: LocklessReader | None = None
    try:
        conn = sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, factory=LocklessReader
        )
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        _check_is_index(conn, db_path)
    except sqlite3.DatabaseError as exc:
        if conn is not None:
            conn.close()
        raise disk_full_error(db_path, cause) from exc
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    conn.db_path = db_path
    conn.files = files
    log.warning("index.read_without_shm", db=str(db_path), reason="disk full")
    return conn


def disk_full_error(db_path: Path | str, exc: BaseException) -> DiskFullError:
    """The one line for an operation on ``db_path`` that failed because its disk is full
    (SQLite needs room there for the ``-shm`` and ``-wal`` files even to read)."""
    return DiskFullError(
        f"no space left on the device holding {db_path} ({exc}); free space and retry"
    )


def _read_failure(db_path: Path, exc: sqlite3.DatabaseError) -> Exception:
    known = database_failure(db_path, exc)
    if known is not None:
        return known
    return NotAnIndexError(f"cannot read {db_path} as a Rifflux index: {exc}")


def _split_sql(script: str) -> list[str]:
    """Split a schema script into statements, keeping trigger bodies whole."""
    statements: list[str] = []
    current: list[str] = []
    for line in script.splitlines():
        if line.strip().startswith("--") or not line.strip():
            continue
        current.append(line)
        candidate = "\n".join(current)
        if sqlite3.complete_statement(candidate):
            statements.append(candidate)
            current = []
    return statements
