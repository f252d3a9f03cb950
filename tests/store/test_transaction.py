"""One transaction helper: nests as savepoints, retries a busy lock, reads one snapshot."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from rifflux.store import connection
from rifflux.store.connection import open_index, transaction


def rows(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT value FROM index_metadata WHERE key LIKE 't%'")]


def put(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("INSERT INTO index_metadata(key, value) VALUES (?, ?)", (key, key))


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    db = open_index(tmp_path / "index.db")
    yield db
    db.close()


def test_a_failing_nested_transaction_rolls_back_only_its_own_writes(conn) -> None:
    with transaction(conn):
        put(conn, "t1")
        with pytest.raises(RuntimeError), transaction(conn):
            put(conn, "t2")
            raise RuntimeError("inner fails")
        assert conn.in_transaction
        put(conn, "t3")
    assert not conn.in_transaction
    assert rows(conn) == ["t1", "t3"]


def test_a_failing_outer_transaction_rolls_back_its_committed_nested_ones(conn) -> None:
    with pytest.raises(RuntimeError), transaction(conn):
        with transaction(conn):
            put(conn, "t1")
        raise RuntimeError("outer fails")
    assert not conn.in_transaction
    assert rows(conn) == []


def test_a_read_snapshot_does_not_see_a_commit_made_after_it_began(tmp_path, conn) -> None:
    other = open_index(tmp_path / "index.db")
    try:
        with transaction(conn, write=False):
            assert rows(conn) == []
            with transaction(other):
                put(other, "t1")
            assert rows(conn) == []
            with transaction(conn, write=False):  # joins the open snapshot
                assert rows(conn) == []
        assert rows(conn) == ["t1"]
    finally:
        other.close()


def test_a_locked_database_is_retried_until_the_writer_gets_the_lock(
    tmp_path, conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "backoff_delay", lambda attempt: 0.0)
    holder = open_index(tmp_path / "index.db")
    conn.execute("PRAGMA busy_timeout=0")
    holder.execute("BEGIN IMMEDIATE")
    retries: list[int] = []

    def release_on_first_retry(attempt: int, exc: BaseException) -> None:
        assert "locked" in str(exc)
        retries.append(attempt)
        holder.execute("COMMIT")

    with transaction(conn, on_retry=release_on_first_retry):
        put(conn, "t1")
    holder.close()
    assert retries == [1]
    assert rows(conn) == ["t1"]


def test_a_lock_held_past_every_retry_raises_locked(tmp_path, conn, monkeypatch) -> None:
    monkeypatch.setattr(connection, "backoff_delay", lambda attempt: 0.0)
    holder = open_index(tmp_path / "index.db")
    conn.execute("PRAGMA busy_timeout=0")
    holder.execute("BEGIN IMMEDIATE")
    retries: list[int] = []
    try:
        with (
            pytest.raises(sqlite3.OperationalError, match="locked"),
            transaction(conn, on_retry=lambda n, _e: retries.append(n)),
        ):
            put(conn, "t1")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert retries == list(range(1, connection.RETRY_ATTEMPTS))
    assert not conn.in_transaction and rows(conn) == []
