"""Write faults that no retry fixes: named in one line, and found from outside.

A write to the index (or to the SQLite queue beside it) can fail for good: the disk is
full, the process's file size limit (``ulimit -f``) is reached, the file or its
filesystem is read-only, or the disk answers with I/O errors. In WAL mode the last
includes the ``-wal`` file deleted under open connections: every new connection then
reads a wal-index (``-shm``) that names frames the new, empty ``-wal`` lacks, and
fails with SQLite's ``disk I/O error`` (``SQLITE_IOERR_SHORT_READ``) until every
connection is closed. Retrying such a write (Dramatiq's retries, the busy backoff) only
repeats it; the measured symptom was 300 ``disk I/O error`` failures and a client that
waited forever.

- :func:`fault_kind` classifies an exception (``sqlite_errorname`` where SQLite gives
  one, the message text otherwise, ``errno`` for an ``OSError``; its causes too).
  SQLite reports an ``EFBIG`` write (file size limit) as ``SQLITE_IOERR_WRITE`` and an
  ``ENOSPC`` one as ``SQLITE_FULL``, so :func:`write_fault_reason` refines an I/O error
  from what it can see: a wal-index ahead of its WAL, a full disk, a reached limit.
- :func:`write_fault_reason` is the one line a user sees, always starting with
  :data:`WRITE_FAULT_PREFIX`: ``index write failed: database or disk is full
  (/x/index.db); free space and run rifflux index again``.
- :func:`probe` finds a fault from outside, reading only (``statvfs``, the wal-index
  header, the WAL's size): a waiting client uses it when a job has not moved, because
  when the disk is full the workers may be unable to record anything at all.

How the reason reaches a waiting client, the disk full for the job record and the log
alike (``rifflux.reindex.runner`` follows all four; the first to answer ends the wait):

1. the worker that meets the fault marks the job ``failed`` with the reason, retried a
   few times (a small write often still fits: WAL space is reused after a checkpoint);
2. it writes one ``job.write_failed`` JSON line to stderr and puts the fault in its
   presence heartbeat (which lives in Redis, or in the queue database);
3. a local pool's output is a pipe read by the process that started it
   (``rifflux.queue.pool_output``), so that line arrives even when ``workers.log``
   cannot be written;
4. the client :func:`probe`\\ s the index and queue databases.

A database path travels with the exception (:func:`tag_database`), so the reason names
the file whose write failed: the index, or the SQLite queue whose messages carry the
file texts (on a full disk it is often the first to fail).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import struct
from collections.abc import Iterator
from pathlib import Path

from rifflux.store.peek import peek

WRITE_FAULT_PREFIX = "index write failed: "
"""Every reason of :func:`write_fault_reason` starts with this."""

FULL = "full"
TOO_LARGE = "too_large"
READONLY = "readonly"
IO = "io"
WAL_LOST = "wal_lost"

FULL_BYTES = 1 << 20
"""A filesystem with less free space than this counts as full (a batch of text needs
more than that in the WAL and the queue)."""
FSIZE_SLACK_BYTES = 1 << 17
"""A file within this of the ``RLIMIT_FSIZE`` limit has reached it (a write stops at the
limit, or short of it by less than one WAL frame)."""

# SQLite primary result codes (sqlite_errorname, extended names start with them).
_SQLITE_KINDS = (("SQLITE_FULL", FULL), ("SQLITE_READONLY", READONLY), ("SQLITE_IOERR", IO))
# Extended codes that a retry can fix (out of memory is no fault of the disk).
_TRANSIENT_NAMES = frozenset({"SQLITE_IOERR_NOMEM"})
# The message text, where an error carries no code (another driver, an old Python).
_SQLITE_TEXTS = (
    ("database or disk is full", FULL),
    ("readonly database", READONLY),
    ("disk i/o error", IO),
)
_ERRNO_KINDS = {
    errno.ENOSPC: FULL,
    errno.EDQUOT: FULL,
    errno.EFBIG: TOO_LARGE,
    errno.EROFS: READONLY,
    errno.EIO: IO,
}
_DATABASE_ATTRIBUTE = "rifflux_database"

# The wal-index header (the first bytes of ``-shm``, host byte order): two copies of a
# 48-byte WalIndexHdr, then WalCkptInfo whose first field is nBackfill.
_SHM_HEADER_BYTES = 100
_HDR_BYTES = 48
_WAL_HEADER_BYTES = 32
_WAL_FRAME_HEADER_BYTES = 24


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its causes, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _sqlite_kind(exc: sqlite3.Error) -> str | None:
    name = getattr(exc, "sqlite_errorname", None) or ""
    if name in _TRANSIENT_NAMES:
        return None
    for primary, kind in _SQLITE_KINDS:
        if name == primary or name.startswith(primary + "_"):
            return kind
    text = str(exc).lower()
    return next((kind for marker, kind in _SQLITE_TEXTS if marker in text), None)


def fault_kind(exc: BaseException) -> str | None:
    """The kind of permanent write fault ``exc`` (or one of its causes) is, else None.

    ``full`` (SQLITE_FULL, ENOSPC, EDQUOT), ``too_large`` (EFBIG), ``readonly``
    (SQLITE_READONLY*, EROFS), ``io`` (SQLITE_IOERR* but out of memory, EIO). Locks and
    busy databases are not faults: :func:`rifflux.store.connection.retry_on_busy` waits.
    """
    for error in _chain(exc):
        if isinstance(error, sqlite3.Error):
            kind = _sqlite_kind(error)
        elif isinstance(error, OSError):
            kind = _ERRNO_KINDS.get(error.errno or 0)
        else:
            continue
        if kind is not None:
            return kind
    return None


def tag_database(exc: BaseException, database: Path | str) -> None:
    """Record on ``exc`` the database whose operation raised it (the innermost tag wins)."""
    if getattr(exc, _DATABASE_ATTRIBUTE, None) is None:
        # An exception type with __slots__ takes no tag: the caller's guess stands.
        with contextlib.suppress(AttributeError):
            setattr(exc, _DATABASE_ATTRIBUTE, str(database))


def tagged_database(exc: BaseException) -> str | None:
    """The database :func:`tag_database` recorded on ``exc`` or one of its causes."""
    for error in _chain(exc):
        database = getattr(error, _DATABASE_ATTRIBUTE, None)
        if database is not None:
            return str(database)
    return None


# -- what can be seen from outside ----------------------------------------------------


def wal_lost(database: Path | str) -> bool:
    """True when the wal-index says committed frames wait in the WAL that the ``-wal``
    file does not hold (it was deleted or truncated while connections were open).

    Reads the ``-shm`` header only when both copies agree (a writer is not halfway
    through it) and counts only frames not yet checkpointed: a WAL whose frames are all
    in the database is not needed, even when the last connection has just deleted it.
    """
    db = Path(database)
    header = peek(f"{db}-shm", _SHM_HEADER_BYTES)
    if header is None:
        return False
    copies_agree = header[:_HDR_BYTES] == header[_HDR_BYTES : 2 * _HDR_BYTES]
    if len(header) < _SHM_HEADER_BYTES or not copies_agree:
        return False
    is_init = header[12]
    (page_size,) = struct.unpack_from("=H", header, 14)
    (max_frame,) = struct.unpack_from("=I", header, 16)
    (backfilled,) = struct.unpack_from("=I", header, 2 * _HDR_BYTES)
    if not is_init or max_frame <= backfilled:
        return False
    page_size = 65536 if page_size == 1 else int(page_size)
    try:
        wal_bytes = os.stat(f"{db}-wal").st_size
    except FileNotFoundError:
        wal_bytes = 0
    except OSError:
        return False
    needed = _WAL_HEADER_BYTES + int(max_frame) * (_WAL_FRAME_HEADER_BYTES + page_size)
    return wal_bytes < needed


def _existing_folder(path: Path) -> Path:
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def free_bytes(database: Path | str) -> int | None:
    """Bytes this user may still write on the database's filesystem (None: unknown)."""
    try:
        stats = os.statvfs(_existing_folder(Path(database).absolute()))
    except (OSError, AttributeError):
        return None
    # Root may also write into the blocks reserved for it.
    blocks = stats.f_bfree if os.geteuid() == 0 else stats.f_bavail
    return blocks * stats.f_frsize


def _read_only(database: Path) -> bool:
    try:
        stats = os.statvfs(_existing_folder(database.absolute()))
    except (OSError, AttributeError):
        return False
    if stats.f_flag & os.ST_RDONLY:
        return True
    return database.exists() and not os.access(database, os.W_OK)


def file_size_limit() -> int | None:
    """This process's ``RLIMIT_FSIZE`` in bytes, or None when unlimited or unknown."""
    try:
        import resource
    except ImportError:
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _limit_reached(database: Path, limit: int) -> bool:
    for suffix in ("", "-wal", "-journal"):
        try:
            if os.stat(f"{database}{suffix}").st_size + FSIZE_SLACK_BYTES >= limit:
                return True
        except OSError:
            continue
    return False


def _refine(kind: str, database: Path) -> str:
    """An I/O error (or a full database) named by what caused it, where that shows."""
    if kind not in (IO, FULL):
        return kind
    if kind == IO and wal_lost(database):
        return WAL_LOST
    free = free_bytes(database)
    if free is not None and free < FULL_BYTES:
        return FULL
    limit = file_size_limit()
    if limit is not None and _limit_reached(database, limit):
        return TOO_LARGE
    return kind


def write_fault_reason(kind: str, database: Path | str, *, refine: bool = True) -> str:
    """The one line for a write fault of ``kind`` on ``database``: what failed, which
    file, and what to do. ``refine`` looks at the disk to name an I/O error's cause."""
    db = Path(database)
    if refine:
        kind = _refine(kind, db)
    if kind == FULL:
        text = f"database or disk is full ({db}); free space and run rifflux index again"
    elif kind == TOO_LARGE:
        limit = file_size_limit()
        allowed = f" of {limit} bytes" if limit is not None else ""
        text = (
            f"file too large for the file size limit{allowed} ({db}); raise the limit "
            "(ulimit -f) or free space and run rifflux index again"
        )
    elif kind == READONLY:
        text = (
            f"attempt to write a readonly database ({db}); make the file and its folder "
            "writable and run rifflux index again"
        )
    elif kind == WAL_LOST:
        text = (
            f"disk I/O error: the write-ahead log {db.name}-wal was deleted or truncated "
            f"while the index was open ({db}); stop every process using the index "
            "(workers, servers), then run rifflux index again"
        )
    else:
        text = f"disk I/O error ({db}); check the disk and run rifflux index again"
    return WRITE_FAULT_PREFIX + text


def exception_reason(exc: BaseException, database: Path | str) -> str | None:
    """The one line for ``exc`` if it is a permanent write fault, else None; names the
    database tagged on it, else ``database``."""
    kind = fault_kind(exc)
    if kind is None:
        return None
    return write_fault_reason(kind, tagged_database(exc) or database)


def probe(database: Path | str) -> str | None:
    """The fault that keeps every write of ``database`` from succeeding, as far as it
    shows from outside, or None: a lost WAL, a read-only file or filesystem, a full
    disk. Reads only; creates nothing."""
    db = Path(database)
    if wal_lost(db):
        return write_fault_reason(WAL_LOST, db, refine=False)
    if _read_only(db):
        return write_fault_reason(READONLY, db, refine=False)
    free = free_bytes(db)
    if free is not None and free < FULL_BYTES:
        return write_fault_reason(FULL, db, refine=False)
    return None


def is_write_fault_reason(text: str) -> bool:
    return text.startswith(WRITE_FAULT_PREFIX)
