"""Shared fixtures: real corpora on disk, settings for a tmp index, real worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rifflux_testing import copy_corpus, make_settings, worker_env

from rifflux.config import Settings


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No RIFFLUX_* variable of the developer's shell leaks into a test."""
    for key in list(os.environ):
        if key.startswith(("RIFFLUX_", "RIFLUX_")):
            monkeypatch.delenv(key)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return copy_corpus(tmp_path / "docs", limit=60)


StartWorkers = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def start_workers(tmp_path: Path) -> Iterator[StartWorkers]:
    """Start ``dramatiq`` worker processes (own process group); all are killed at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start(
        settings: Settings,
        *,
        processes: int = 1,
        module: str = "workers.actors",
        queues: tuple[str, ...] = (),
        **env: str,
    ) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"workers-{len(started)}.log").open("ab")
        command = [sys.executable, "-m", "dramatiq", module, "--processes", str(processes)]
        command += ["--threads", "1"]
        if queues:
            command += ["--queues", *queues]
        proc = subprocess.Popen(
            command,
            env=worker_env(settings, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=tmp_path,
        )
        started.append(proc)
        return proc

    yield start
    # SIGKILL, not SIGTERM: a test's assertions are done, its files are thrown away, and
    # dramatiq's graceful stop waits ~3 s per test for its consumers' poll to end (the
    # graceful path has its own tests in tests/workers).
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
