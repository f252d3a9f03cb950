"""Write faults are classified from the real errors SQLite and the OS raise, named in one
line, and found from outside by a probe that only reads."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from rifflux_testing import REPO_ROOT

from rifflux.store import faults
from rifflux.store.connection import connect, open_index, transaction


def test_a_database_past_its_size_is_full(tmp_path: Path) -> None:
    conn = connect(tmp_path / "index.db")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("PRAGMA max_page_count = 3")
    with pytest.raises(sqlite3.OperationalError) as raised:
        conn.execute("INSERT INTO t VALUES (?)", ("x" * 50_000,))
    assert raised.value.sqlite_errorname == "SQLITE_FULL"
    assert faults.fault_kind(raised.value) == faults.FULL
    reason = faults.exception_reason(raised.value, tmp_path / "index.db")
    assert reason == (
        f"index write failed: database or disk is full ({tmp_path / 'index.db'}); "
        "free space and run rifflux index again"
    )


def test_a_read_only_database_is_a_fault_and_a_locked_one_is_not(tmp_path: Path) -> None:
    open_index(tmp_path / "index.db").close()
    readonly = connect(tmp_path / "index.db", readonly=True)
    with pytest.raises(sqlite3.OperationalError) as raised:
        readonly.execute("UPDATE index_metadata SET value = 'x' WHERE key = 'generation'")
    assert raised.value.sqlite_errorname.startswith("SQLITE_READONLY")
    reason = faults.exception_reason(raised.value, tmp_path / "index.db")
    assert reason is not None and reason.startswith(
        "index write failed: attempt to write a readonly database ("
    )

    holder, waiter = connect(tmp_path / "index.db"), connect(tmp_path / "index.db")
    waiter.execute("PRAGMA busy_timeout = 0")
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError) as locked:
        waiter.execute("BEGIN IMMEDIATE")
    holder.execute("ROLLBACK")
    assert faults.fault_kind(locked.value) is None  # Busy: retried, not a fault.


def test_os_errors_by_errno_and_causes_are_followed() -> None:
    with pytest.raises(OSError) as full, open("/dev/full", "wb", buffering=0) as device:
        device.write(b"x")
    assert faults.fault_kind(full.value) == faults.FULL
    assert faults.fault_kind(OSError(errno.EROFS, "Read-only file system")) == faults.READONLY
    assert faults.fault_kind(OSError(errno.EIO, "Input/output error")) == faults.IO
    assert faults.fault_kind(OSError(errno.EFBIG, "File too large")) == faults.TOO_LARGE
    assert faults.fault_kind(OSError(errno.ENOENT, "No such file")) is None
    assert faults.fault_kind(ValueError("database or disk is full")) is None
    try:
        try:
            raise sqlite3.OperationalError("disk I/O error")
        except sqlite3.OperationalError as inner:
            raise RuntimeError("the step failed") from inner
    except RuntimeError as outer:
        assert faults.fault_kind(outer) == faults.IO


def test_the_database_tag_names_the_file_whose_write_failed(tmp_path: Path) -> None:
    exc = sqlite3.OperationalError("database or disk is full")
    faults.tag_database(exc, tmp_path / "queue.db")
    faults.tag_database(exc, tmp_path / "index.db")  # The innermost tag wins.
    wrapped = RuntimeError("send failed")
    wrapped.__cause__ = exc
    reason = faults.exception_reason(wrapped, tmp_path / "index.db")
    assert reason is not None and f"({tmp_path / 'queue.db'})" in reason


def test_a_deleted_wal_is_a_lost_wal_for_new_connections_and_the_probe(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    keeper = open_index(db)  # A client's long-lived connection holds the old WAL open.
    with transaction(keeper):
        keeper.execute("INSERT INTO index_metadata(key, value) VALUES ('k', 'v')")
    assert faults.probe(db) is None
    os.remove(f"{db}-wal")
    with pytest.raises(sqlite3.OperationalError) as raised:
        open_index(db)
    assert raised.value.sqlite_errorname.startswith("SQLITE_IOERR")
    assert faults.wal_lost(db)
    expected = (
        "index write failed: disk I/O error: the write-ahead log index.db-wal was deleted "
        f"or truncated while the index was open ({db}); stop every process using the index "
        "(workers, servers), then run rifflux index again"
    )
    assert faults.exception_reason(raised.value, db) == expected
    assert faults.probe(db) == expected
    # The last connection still holds the old WAL: closing it checkpoints its frames.
    keeper.close()
    assert not faults.wal_lost(db)
    reopened = open_index(db)
    row = reopened.execute("SELECT value FROM index_metadata WHERE key = 'k'").fetchone()
    reopened.close()
    assert row["value"] == "v"


def test_a_file_size_limit_is_named_as_such(tmp_path: Path) -> None:
    """SQLite reports an EFBIG write as a plain ``disk I/O error``: the reason says why."""
    script = f"""
import resource, signal, sqlite3
from rifflux.store import faults
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
conn = sqlite3.connect({str(tmp_path / "index.db")!r}, isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("CREATE TABLE t (x)")
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
try:
    for _ in range(10):
        conn.execute("INSERT INTO t VALUES (?)", ("x" * 50_000,))
except sqlite3.OperationalError as exc:
    print(exc.sqlite_errorname)
    print(faults.exception_reason(exc, {str(tmp_path / "index.db")!r}))
"""
    shown = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        check=True,
    )
    name, reason = shown.stdout.splitlines()
    assert name == "SQLITE_IOERR_WRITE"
    assert reason == (
        "index write failed: file too large for the file size limit of 200000 bytes "
        f"({tmp_path / 'index.db'}); raise the limit (ulimit -f) or free space and run "
        "rifflux index again"
    )


def test_the_probe_reads_only_and_finds_nothing_on_a_healthy_index(tmp_path: Path) -> None:
    db = tmp_path / "index" / "index.db"
    assert faults.probe(db) is None
    assert not db.parent.exists()  # Probing created nothing.
    open_index(db).close()
    before = sorted(p.name for p in db.parent.iterdir())
    assert faults.probe(db) is None
    assert sorted(p.name for p in db.parent.iterdir()) == before


# Every connection holds a shared lock on this byte of the -shm file (SQLite's
# "dead man switch", UNIX_SHM_DMS = 120 + SQLITE_SHM_NLOCK); another process that can
# take it exclusively believes no connection is open and reinitialises the wal-index.
SHM_DMS_BYTE = 128
TRY_DMS_LOCK = """
import fcntl, sys
with open(sys.argv[1], "r+b") as shm:
    try:
        fcntl.lockf(shm, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, int(sys.argv[2]))
    except OSError:
        print("held")
    else:
        print("free")
"""


def test_probing_the_wal_index_keeps_this_processs_sqlite_locks(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    conn = open_index(db)
    try:
        conn.execute("SELECT count(*) FROM files").fetchone()

        def dms_lock() -> str:
            return subprocess.run(
                [sys.executable, "-c", TRY_DMS_LOCK, f"{db}-shm", str(SHM_DMS_BYTE)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()

        assert dms_lock() == "held"
        assert not faults.wal_lost(db)
        assert faults.probe(db) is None
        # Closing a descriptor of the -shm would have dropped the connection's lock.
        assert dms_lock() == "held"
        conn.execute("SELECT count(*) FROM files").fetchone()
    finally:
        conn.close()
