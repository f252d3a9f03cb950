import sqlite3

import pytest

from rifflux.store import connection
from rifflux.store.connection import backoff_delay, retry_on_busy


def test_backoff_is_capped_and_jittered() -> None:
    delays = [backoff_delay(attempt, base=0.1, cap=1.0) for attempt in range(20)]
    assert all(0.0 <= d <= 1.0 for d in delays)
    assert len(set(delays)) > 1


def test_retries_locked_then_succeeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection.time, "sleep", lambda _s: None)
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise sqlite3.OperationalError("database is locked")
        return "ok"

    retried = []
    assert retry_on_busy(flaky, on_retry=lambda n, _e: retried.append(n)) == "ok"
    assert len(calls) == 3 and retried == [1, 2]


def test_gives_up_after_attempts_and_never_retries_other_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection.time, "sleep", lambda _s: None)
    calls = []

    def always_locked() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError):
        retry_on_busy(always_locked, attempts=4)
    assert len(calls) == 4

    def broken() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("no such table: nope")

    calls.clear()
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        retry_on_busy(broken)
    assert len(calls) == 1


def test_real_lock_contention_is_retried(tmp_path) -> None:
    db = tmp_path / "x.db"
    holder = connection.connect(db)
    holder.execute("CREATE TABLE t(x)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(db, isolation_level=None, timeout=0)
    attempts = []

    def write() -> None:
        attempts.append(1)
        if len(attempts) == 2:
            holder.execute("COMMIT")
        other.execute("INSERT INTO t VALUES (1)")

    retry_on_busy(write)
    assert len(attempts) == 2
    assert other.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 1
