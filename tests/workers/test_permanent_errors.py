"""The actors' permanent errors come from rifflux.errors' ``retryable`` attribute."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rifflux_testing import queue_settings, worker_env

from rifflux import errors

# Importing the actors configures a broker, so they are imported in a worker's process.
LIST_PERMANENT = "from workers import actors; print(*(e.__name__ for e in actors.PERMANENT_ERRORS))"


def test_actors_fail_at_once_on_errors_no_retry_fixes(tmp_path: Path) -> None:
    settings = queue_settings(tmp_path)
    settings.db_path.parent.mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-c", LIST_PERMANENT],
        env=worker_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    permanent = set(done.stdout.split())
    classified_by_cause = {"DiskFullError", "IndexFolderNotWritableError", "IndexDamagedError"}
    assert permanent == {e.__name__ for e in errors.permanent_errors()} - classified_by_cause
    # Another model, a message or index of another version, a write fault.
    assert {
        "EmbeddingModelMismatch",
        "MessageVersionError",
        "SchemaVersionError",
        "NotAnIndexError",
        "IndexWriteError",
    } <= permanent
    # Retried: a busy lock or broker may pass; the store's translations of an SQLite
    # failure are classified by their cause (failing_job_on_write_fault).
    assert not permanent & {
        "IndexLockedError",
        "BrokerUnavailableError",
        "DiskFullError",
        "IndexFolderNotWritableError",
        "IndexDamagedError",
    }
