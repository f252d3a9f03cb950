"""A write no retry fixes reaches the waiting client within seconds, in one line, with real
worker processes: a file size limit on the workers (RLIMIT_FSIZE), a full disk (a small
tmpfs, where mounting is allowed), the index's WAL deleted mid-job. After the fault is
removed, the next job stores exactly what a clean in-process run stores. Failing workers
are reported as such, and their log carries no file text and rotates at its cap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rifflux_testing import (
    copy_corpus,
    index_rows,
    make_settings,
    mounted_tmpfs,
    queue_settings,
    reference_rows,
    wait_until,
    worker_env,
)

from rifflux.config import Settings
from rifflux.errors import IndexWriteError
from rifflux.reindex.runner import JobRunner as IndexQueue
from rifflux.store.jobs import JobRecord
from workers.launcher import launch_local_pool

pytestmark = pytest.mark.slow

TEST_ACTORS = "rifflux_test_actors"
# Generous: the code before this fix waited here until killed.
INDEX_TIMEOUT_SECONDS = 60


def rifflux_index(
    tmp_path: Path, settings: Settings, corpus: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """``rifflux index`` as a user runs it: it starts its own local pool. One that hangs
    fails the test with what it printed, the workers' log and ``rifflux status``."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "rifflux.cli", "index", str(corpus)],
            env=worker_env(settings, RIFFLUX_WORKERS="1", RIFFLUX_LOG_LEVEL="WARNING", **env),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=INDEX_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired as exc:
        report = hang_report(tmp_path, settings, exc)
        raise AssertionError(f"rifflux index hung:\n{report}") from exc


def hang_report(tmp_path: Path, settings: Settings, exc: subprocess.TimeoutExpired) -> str:
    """What a hung ``rifflux index`` left to read: its stderr, the tail of the workers'
    log, the live workers and ``rifflux status``."""
    stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else str(exc.stderr or "")
    log_path = settings.db_path.parent / "workers.log"
    log_tail = log_path.read_text()[-4_000:] if log_path.exists() else "(no workers.log)"
    status = subprocess.run(
        [sys.executable, "-m", "rifflux.cli", "status"],
        env=worker_env(settings),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    workers = IndexQueue(settings).live_workers()
    return (
        f"stderr:\n{stderr[-4_000:]}\nworkers.log:\n{log_tail}\nlive workers: {workers}\n"
        f"status:\n{status.stdout}{status.stderr}"
    )


def last_line(output: str) -> str:
    return output.strip().splitlines()[-1]


def test_a_file_size_limit_fails_rifflux_index_in_one_line_and_loses_nothing(
    tmp_path: Path,
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=60)
    settings = make_settings(tmp_path)
    limited = rifflux_index(
        tmp_path,
        settings,
        corpus,
        RIFFLUX_WORKER_ACTORS=TEST_ACTORS,
        RIFFLUX_TEST_FSIZE_LIMIT="300000",
    )
    assert limited.returncode == 1, limited.stderr
    line = last_line(limited.stderr)
    assert line.startswith(
        "rifflux: error: index write failed: file too large for the file size limit of "
        f"300000 bytes ({settings.db_path.parent}/"
    ), limited.stderr
    assert line.endswith("raise the limit (ulimit -f) or free space and run rifflux index again")
    status = subprocess.run(
        [sys.executable, "-m", "rifflux.cli", "status"],
        env=worker_env(settings),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"failed: {line.removeprefix('rifflux: error: ')}" in status.stdout, status.stdout

    again = rifflux_index(tmp_path, settings, corpus)
    assert again.returncode == 0, again.stderr
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """The index folder on a 1 MB tmpfs (root only; skipped where mounting is refused)."""
    with mounted_tmpfs(tmp_path / "index") as folder:
        yield folder


def test_a_full_disk_fails_rifflux_index_in_one_line_and_loses_nothing(
    tmp_path: Path, small_disk: Path
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=60)
    settings = make_settings(tmp_path, db_path=small_disk / "index.db")
    full = rifflux_index(tmp_path, settings, corpus)
    assert full.returncode == 1, full.stderr
    line = last_line(full.stderr)
    assert line.startswith(
        f"rifflux: error: index write failed: database or disk is full ({small_disk}/"
    ), full.stderr
    assert line.endswith("; free space and run rifflux index again")

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    again = rifflux_index(tmp_path, settings, corpus)
    assert again.returncode == 0, again.stderr
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_a_wal_deleted_mid_job_fails_the_waiting_client_and_loses_nothing(
    tmp_path: Path, start_workers
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=40)
    settings = queue_settings(tmp_path, lease_seconds=3)
    gate = tmp_path / "embed-gate"
    workers = start_workers(settings, module=TEST_ACTORS, RIFFLUX_TEST_EMBED_GATE=str(gate))
    queue = IndexQueue(settings)
    outcome: list[BaseException] = []

    def follow(job_id: str) -> None:
        try:
            queue.wait(job_id, timeout=INDEX_TIMEOUT_SECONDS)
        except BaseException as exc:
            outcome.append(exc)

    try:
        job_id = queue.submit([corpus])
        waiter = threading.Thread(target=follow, args=(job_id,))
        waiter.start()  # The client waits from before the fault, as a user's would.
        empty = JobRecord("", [], {}, "")
        wait_until(lambda: (queue.job(job_id) or empty).batches_written >= 2)
        os.remove(f"{settings.db_path}-wal")
        gate.touch()  # The vector phase goes on, on an index whose WAL is gone.
        waiter.join(timeout=INDEX_TIMEOUT_SECONDS)
    finally:
        os.killpg(workers.pid, signal.SIGTERM)
        workers.wait(timeout=30)
        queue.close()
    [error] = outcome
    assert isinstance(error, IndexWriteError), repr(error)
    assert str(error) == (
        "index write failed: disk I/O error: the write-ahead log index.db-wal was deleted or "
        f"truncated while the index was open ({settings.db_path}); stop every process using "
        "the index (workers, servers), then run rifflux index again"
    )

    start_workers(settings)
    queue = IndexQueue(settings)
    try:
        record = queue.wait(queue.submit([corpus]), timeout=INDEX_TIMEOUT_SECONDS)
    finally:
        queue.close()
    assert record.state == "completed", record.errors
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_failing_workers_are_named_and_their_rotated_log_holds_no_file_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=10)
    secret = "The saffron ledger of the north tower"
    (corpus / "zz-poison.md").write_text(f"# Ledger\n\n{secret}. " * 8_000)
    settings = queue_settings(tmp_path, stall_seconds=1.5, workers=1, log_max_bytes=6_000)
    # The local pool inherits this process's environment.
    monkeypatch.setenv("PYTHONPATH", worker_env(settings)["PYTHONPATH"])
    monkeypatch.setenv("RIFFLUX_WORKER_ACTORS", TEST_ACTORS)
    monkeypatch.setenv("RIFFLUX_TEST_POISON", "zz-poison")
    monkeypatch.setenv("RIFFLUX_TEST_MAX_RETRIES", "1000")
    queue = IndexQueue(settings, launcher=launch_local_pool)
    try:
        queue.start_pool()
        # The stall clock starts once the worker is up: a slow boot is not what this tests.
        wait_until(queue.index_host_workers, timeout=60)
        job_id = queue.submit([corpus])

        def reason() -> str | None:
            record = queue.job(job_id)
            return queue.stall_reason(record) if record is not None else None

        found = str(wait_until(reason, timeout=45))
    finally:
        queue.close()
    assert found.startswith("workers are alive but failing: the job has not moved for "), found
    assert "1 live worker fails every message" in found
    assert "(last error: RuntimeError: poisoned batch containing zz-poison)" in found

    logs = sorted(settings.db_path.parent.glob("workers.log*"))
    assert [p.name for p in logs][:2] == ["workers.log", "workers.log.1"]  # Rotated.
    lines = [line for path in logs for line in path.read_text().splitlines()]
    assert any("poisoned batch containing zz-poison" in line for line in lines)
    assert max(len(line) for line in lines) < 2_000
    assert not [line for line in lines if "saffron" in line]
    assert all(path.stat().st_size <= 6_000 + 2_000 for path in logs)
