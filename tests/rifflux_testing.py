"""Helpers shared by tests: real corpora, tmp-index settings, worker environments, polling."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rifflux.config import Settings
from rifflux.store.connection import open_index

REPO_ROOT = Path(__file__).resolve().parents[1]
# The big shared data (full corpora, SciFact) beside the repository; optional for the suite.
SHARED = REPO_ROOT.parent / "shared"
# awesome-copilot's agents/ folder, vendored byte for byte (MIT, see its README.md and LICENSE).
AWESOME_COPILOT = REPO_ROOT / "tests" / "corpus" / "awesome-copilot"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that no one listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    base = {
        "db_path": tmp_path / "index" / "index.db",
        "base_dir": tmp_path,
        "embedding_backend": "hash",
    }
    base.update(overrides)
    return Settings(**base)  # type: ignore[arg-type]


def queue_settings(
    tmp_path: Path, *, lease_seconds: float | None = None, **overrides: object
) -> Settings:
    """Settings for queue tests: small batches, so a job has many messages in flight,
    and an SQLite broker in the index directory (``lease_seconds``: a short lease, so a
    killed worker's message outside a pool comes back within seconds)."""
    url = f"sqlite:///{tmp_path / 'index' / 'queue.db'}"
    if lease_seconds is not None:
        url += f"?lease_seconds={lease_seconds}"
    values: dict[str, object] = {"batch_target_bytes": 20_000, "broker_url": url}
    values.update(overrides)
    return make_settings(tmp_path, **values)


def copy_corpus(dest: Path, subdir: str = "agents", limit: int | None = None) -> Path:
    """A real markdown corpus: vendored awesome-copilot/<subdir> files, sorted, first ``limit``."""
    source = AWESOME_COPILOT / subdir
    dest.mkdir(parents=True, exist_ok=True)
    files = sorted(p for p in source.rglob("*.md") if p.is_file())
    assert files, f"no markdown files under {source}: the vendored test corpus is missing"
    for path in files[:limit]:
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return dest


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


def index_rows(db: Path) -> list[tuple]:
    """Every stored chunk with its file, heading, content and vector, in a stable order."""
    conn = open_index(db)
    try:
        return conn.execute(
            "SELECT f.path, f.sha256, c.chunk_id, c.chunk_index, c.heading_path, c.content, "
            "e.model, e.vec FROM chunks c JOIN files f ON f.id = c.file_id "
            "LEFT JOIN embeddings e ON e.chunk_id = c.chunk_id ORDER BY f.path, c.chunk_index"
        ).fetchall()
    finally:
        conn.close()


def children_of(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux ``/proc``)."""
    try:
        raw = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in raw.split()]


def alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie is dead for our purposes)."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (ProcessLookupError, OSError):
        return False


def reference_rows(tmp_path: Path, corpus: Path, settings: Settings) -> list[tuple]:
    """What a single in-process index of the same corpus stores: the independent
    reference that queue and chaos tests compare their jobs' rows with."""
    from rifflux.index.indexer import Indexer

    reference = settings.with_overrides(db_path=tmp_path / "reference" / "index.db")
    Indexer(reference).run([corpus])
    return index_rows(reference.db_path)


def files_not_found_lexically(service: Any, corpus: Path, prefix: str) -> list[str]:
    """Files of ``corpus`` that a lexical search for their own first text line (as
    keywords) does not return: [] when every file is keyword-searchable."""
    missing = []
    for path in sorted(corpus.rglob("*.md")):
        title = next(line for line in path.read_text().splitlines() if line.strip("# -"))
        stored = f"{prefix}/{path.relative_to(corpus).as_posix()}"
        hits = service.search(title, top_k=50, mode="lexical")
        if stored not in {h["path"] for h in hits}:
            missing.append(stored)
    return missing


@contextlib.contextmanager
def mounted_tmpfs(folder: Path, size: str = "1m") -> Iterator[Path]:
    """``folder`` (created) as a tmpfs of ``size``, unmounted on exit; skips the test where
    mounting is refused (it needs root)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill_disk(path: Path) -> Path:
    """Write ``path`` until its filesystem has no byte left (ENOSPC); the file, which
    frees the space again when deleted."""
    chunk = b"\0" * 65536
    with path.open("wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return path
                chunk = chunk[: len(chunk) // 2]


def sole_embed(outcome: Any) -> Any:
    """A chunk step's one embed request (a pool of one worker sends a batch as one unit),
    or None when its batch needed none."""
    assert len(outcome.embeds) <= 1
    return outcome.embeds[0] if outcome.embeds else None
