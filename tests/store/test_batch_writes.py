"""A job step's connection keeps SQLite's statement journal in memory
(``tune_for_batch_writes``): a batch's inserts write no temporary files."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from rifflux.store.connection import (
    BATCH_CACHE_KIB,
    open_index,
    transaction,
    tune_for_batch_writes,
)

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")


def open_temp_files() -> list[str]:
    """SQLite's temporary files this process holds open (created, then unlinked at once:
    ``/proc/self/fd`` still names them)."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "etilqs_" in target:
            names.append(target)
    return names


def batch_of_chunks(conn: sqlite3.Connection, file_id: int, count: int) -> None:
    """One multi-row insert of ``count`` chunks (their FTS5 rows through the trigger)."""
    rows = [
        (f"{file_id}:{i}", file_id, i, "h", f"text {i} " + "word " * 200, f"{file_id}-{i}")
        for i in range(count)
    ]
    conn.execute(
        "INSERT INTO chunks(chunk_id, file_id, chunk_index, heading_path, content, "
        "embed_sha256) VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?)"] * count),
        [value for row in rows for value in row],
    )


def temp_files_during_a_batch(conn: sqlite3.Connection) -> list[str]:
    """Two statements in one transaction, the second changing pages the first changed
    (SQLite journals their originals while the second runs, ~1,000 chunks' worth: past
    its 64 KiB threshold); the temporary files open before the commit."""
    with transaction(conn):
        for file_id in (1, 2):
            conn.execute(
                "INSERT INTO files(id, path, mtime_ns, size_bytes, sha256, indexed_at) "
                "VALUES (?, ?, 0, 0, '', 0)",
                (file_id, f"f{file_id}.md"),
            )
        batch_of_chunks(conn, 1, 1000)
        batch_of_chunks(conn, 2, 1000)
        return open_temp_files()


def test_a_plain_connection_spills_the_statement_journal_to_a_temp_file(tmp_path: Path) -> None:
    conn = open_index(tmp_path / "index.db")
    try:
        assert temp_files_during_a_batch(conn)
    finally:
        conn.close()


def test_a_batch_writers_connection_keeps_it_in_memory(tmp_path: Path) -> None:
    conn = tune_for_batch_writes(open_index(tmp_path / "index.db"))
    try:
        assert temp_files_during_a_batch(conn) == []
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -BATCH_CACHE_KIB
    finally:
        conn.close()
