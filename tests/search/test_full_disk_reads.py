"""Reads on a full disk, on a real tmpfs filled to its last byte (root only; skipped where
mounting is refused): no process holds the index and its ``-shm`` is missing or
truncated, so a WAL-mode reader cannot create its wal-index there. Searches and
``rifflux status`` answer as on a disk with room, from the database and the frames of its
WAL, and write nothing; where the SQLite queue beside the index cannot be read either,
the error says the disk is full. Once space is freed, the next search reads through a
normal connection again."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from rifflux_testing import fill_disk, make_settings, mounted_tmpfs, worker_env

from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.queue.client import IndexQueue
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService
from rifflux.status import index_counts
from rifflux.store.connection import LocklessReader

DOCS = {
    "a.md": "# A\n\nThe walrus sleeps on the ice floe.\n",
    "b.md": "# B\n\nPenguins swim under the ice.\n",
}


def build(tmp_path: Path, disk: Path) -> tuple[Settings, Path]:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    settings = make_settings(tmp_path, db_path=disk / "index.db", min_chunk_chars=0)
    Indexer(settings).run([docs])
    return settings, docs


def answer(settings: Settings, request: SearchRequest) -> dict[str, object]:
    service = SearchService(settings)
    try:
        return service.search_response(request)
    finally:
        service.close()


def wal_header(db: Path) -> bytes:
    """The 32-byte header of a real WAL (of another database)."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x)")
    header = Path(f"{db}-wal").read_bytes()[:32]
    conn.close()
    return header


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_searches_answer_on_a_full_disk_and_a_normal_connection_returns_with_space(
    tmp_path: Path,
) -> None:
    with mounted_tmpfs(tmp_path / "disk", "4m") as disk:
        settings, _docs = build(tmp_path, disk)
        db = settings.db_path
        request = SearchRequest("walrus ice")
        reference = answer(settings, request)
        Path(f"{db}-shm").write_bytes(b"\0\0\0")  # As the sweep found it: 3 bytes.
        # A WAL of a header and no frame (a writer stopped right after restarting it).
        header = wal_header(tmp_path / "other.db")
        Path(f"{db}-wal").write_bytes(header)
        before = digest(db)
        filler = fill_disk(disk / "filler")

        service = SearchService(settings)
        assert service.search_response(request) == reference
        assert isinstance(service.connection(), LocklessReader)
        assert index_counts(service)["files"] == len(DOCS)
        once = SearchService(settings)
        assert once.search_response(request) == reference
        once.close()
        assert digest(db) == before and Path(f"{db}-wal").read_bytes() == header

        filler.unlink()
        assert service.search_response(request) == reference
        assert not isinstance(service.connection(), LocklessReader)
        service.close()


# Indexes one more file and dies without closing its connections, so the new rows stay
# in the WAL (the last connection to close would have checkpointed them).
KILLED_WRITER = """
import os, sys
from pathlib import Path
from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.store.connection import open_index
db, base, docs = (Path(arg) for arg in sys.argv[1:])
settings = Settings(db_path=db, base_dir=base, embedding_backend="hash", min_chunk_chars=0)
keep = open_index(db)
Indexer(settings).run([docs])
os._exit(0)
"""


def test_a_full_disk_search_reads_the_frames_its_wal_holds_and_keeps_them(
    tmp_path: Path,
) -> None:
    with mounted_tmpfs(tmp_path / "disk", "4m") as disk:
        settings, docs = build(tmp_path, disk)
        db = settings.db_path
        (docs / "c.md").write_text("# C\n\nA walrus colony on the ice, walrus after walrus.\n")
        subprocess.run(
            [sys.executable, "-c", KILLED_WRITER, str(db), str(tmp_path), str(docs)],
            check=True,
            capture_output=True,
        )
        wal = Path(f"{db}-wal")
        wal_bytes = wal.stat().st_size
        assert wal_bytes > 0
        request = SearchRequest("walrus colony")
        reference = answer(settings, request)
        assert "docs/c.md" in [r["path"] for r in reference["results"]]
        os.unlink(f"{db}-shm")
        fill_disk(disk / "filler")

        service = SearchService(settings)
        assert service.search_response(request) == reference
        assert isinstance(service.connection(), LocklessReader)
        service.close()
        assert wal.stat().st_size == wal_bytes
        assert not Path(f"{db}-shm").exists() or Path(f"{db}-shm").stat().st_size < 32768


def rifflux(tmp_path: Path, settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rifflux.cli", *args],
        env=worker_env(settings, RIFFLUX_LOG_LEVEL="ERROR"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_rifflux_search_and_status_work_on_a_full_disk_or_say_it_is_full(
    tmp_path: Path,
) -> None:
    with mounted_tmpfs(tmp_path / "disk", "4m") as disk:
        settings, _docs = build(tmp_path, disk)
        expected = rifflux(tmp_path, settings, "search", "walrus", "--json")
        assert expected.returncode == 0, expected.stderr
        os.unlink(f"{settings.db_path}-shm")  # Left by that search; no process holds it.
        filler = fill_disk(disk / "filler")

        searched = rifflux(tmp_path, settings, "search", "walrus", "--json")
        assert (searched.returncode, searched.stdout) == (0, expected.stdout), searched.stderr
        status = rifflux(tmp_path, settings, "status", "--json")
        assert status.returncode == 0, status.stderr
        assert f'"files": {len(DOCS)}' in status.stdout

        # With the SQLite queue beside the index, which cannot be read without room for
        # its own -shm: one line that says so.
        filler.unlink()
        queue = IndexQueue(settings)
        queue.queue_depths()
        queue.close()
        fill_disk(disk / "filler")
        status = rifflux(tmp_path, settings, "status")
        assert status.returncode == 1
        assert status.stderr.strip().splitlines()[-1] == (
            f"rifflux: error: no space left on the device holding {disk}/queue.db "
            "(disk I/O error); free space and retry"
        )
        searched = rifflux(tmp_path, settings, "search", "walrus", "--json")
        assert (searched.returncode, searched.stdout) == (0, expected.stdout), searched.stderr
