"""Shared fixtures: real corpora on disk, settings for a tmp index, real worker processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rifflux.config import Settings

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
AWESOME_COPILOT = SHARED / "corpora" / "awesome-copilot"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No RIFFLUX_* variable of the developer's shell leaks into a test."""
    for key in list(os.environ):
        if key.startswith(("RIFFLUX_", "RIFLUX_")):
            monkeypatch.delenv(key)


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    base = {
        "db_path": tmp_path / "index" / "index.db",
        "base_dir": tmp_path,
        "embedding_backend": "hash",
    }
    base.update(overrides)
    return Settings(**base)  # type: ignore[arg-type]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


def copy_corpus(dest: Path, subdir: str = "agents", limit: int | None = None) -> Path:
    """A real markdown corpus: files of awesome-copilot/<subdir>, sorted, first ``limit``."""
    source = AWESOME_COPILOT / subdir
    dest.mkdir(parents=True, exist_ok=True)
    files = sorted(p for p in source.rglob("*.md") if p.is_file())
    for path in files[:limit]:
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return dest


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return copy_corpus(tmp_path / "docs", limit=60)


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RIFFLUX_", "RIFLUX_"))}
    env.update(
        RIFFLUX_DB_PATH=str(settings.db_path),
        RIFFLUX_BROKER_URL=settings.resolved_broker_url,
        RIFFLUX_EMBEDDING_BACKEND=settings.embedding_backend,
        RIFFLUX_LOG_LEVEL="INFO",
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests" / "queue")]),
    )
    env.update(extra)
    return env


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
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for proc in started:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_until(
    predicate: Callable[[], object], timeout: float = 60.0, interval: float = 0.1
) -> object:
    """Poll ``predicate`` until truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")
