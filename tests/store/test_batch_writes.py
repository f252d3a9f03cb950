"""How a job step writes a batch: its connection keeps SQLite's statement journal in
memory (``tune_for_batch_writes``), its vectors land in few statements, and its paths,
about and CJK rows land in one FTS5 segment per table, as the rows its files written one
by one would be."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest
from cjk_docs import CJK_DOCS
from knowledge_corpus import CORPUS

from rifflux.index.changes import FileWork
from rifflux.index.prepare import chunk_file
from rifflux.store.connection import (
    BATCH_CACHE_KIB,
    open_index,
    transaction,
    tune_for_batch_writes,
)
from rifflux.store.rows import PreparedFile
from rifflux.store.segments import merges_deferred, segment_count
from rifflux.store.writer import IndexWriter

needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")


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


@needs_proc
def test_a_plain_connection_spills_the_statement_journal_to_a_temp_file(tmp_path: Path) -> None:
    conn = open_index(tmp_path / "index.db")
    try:
        assert temp_files_during_a_batch(conn)
    finally:
        conn.close()


@needs_proc
def test_a_batch_writers_connection_keeps_it_in_memory(tmp_path: Path) -> None:
    conn = tune_for_batch_writes(open_index(tmp_path / "index.db"))
    try:
        assert temp_files_during_a_batch(conn) == []
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -BATCH_CACHE_KIB
    finally:
        conn.close()


def vector_fixture(db: Path) -> sqlite3.Connection:
    """Six chunks over four text hashes (one hash shared by two chunks, one chunk with a
    vector already), inserted out of hash order."""
    conn = open_index(db)
    conn.execute(
        "INSERT INTO files(id, path, mtime_ns, size_bytes, sha256, indexed_at) "
        "VALUES (1, 'a.md', 0, 0, '', 0)"
    )
    for index, key in enumerate(["h3", "h1", "h2", "h1", "h4", "h2"]):
        conn.execute(
            "INSERT INTO chunks(chunk_id, file_id, chunk_index, heading_path, content, "
            "embed_sha256) VALUES (?, 1, ?, '', 'text', ?)",
            (f"c{index}", index, key),
        )
    conn.execute("INSERT INTO embeddings(chunk_id, model, dim, vec) VALUES ('c5', 'm', 2, x'0101')")
    return conn


def test_vectors_land_as_one_statement_per_vector_put_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference: the statement the writer ran once per vector before, in order."""
    blobs = {"h2": b"\x02\x02", "h1": b"\x01\x01", "h9": b"\x09\x09", "h3": b"\x03\x03"}
    reference = vector_fixture(tmp_path / "ref.db")
    reference.executemany(
        "INSERT INTO embeddings(chunk_id, model, dim, vec) "
        "SELECT c.chunk_id, 'm', 2, ? FROM chunks c WHERE c.embed_sha256 = ? "
        "AND NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.chunk_id = c.chunk_id)",
        [(blob, key) for key, blob in blobs.items()],
    )
    monkeypatch.setattr("rifflux.store.writer.VECTORS_PER_STATEMENT", 2)  # two statements
    conn = vector_fixture(tmp_path / "new.db")
    assert IndexWriter(conn).write_blobs("m", 2, blobs) == 4  # c0, c1, c2, c3; not c5
    rows = "SELECT rowid, chunk_id, model, dim, vec FROM embeddings ORDER BY rowid"
    assert conn.execute(rows).fetchall() == reference.execute(rows).fetchall()
    changes = "SELECT * FROM chunk_changes ORDER BY seq"
    assert conn.execute(changes).fetchall() == reference.execute(changes).fetchall()
    conn.close()
    reference.close()


# FTS5 tables a batch writes besides chunks_fts (grep rows: tests/store/test_grep_text.py).
FILE_FTS_TABLES = ("files_fts", "chunks_about", "chunks_cjk")


def prepared(rel_path: str, text: str) -> PreparedFile:
    data = text.encode("utf-8")
    work = FileWork(rel_path, 0, len(data), hashlib.sha256(data).hexdigest(), text)
    return chunk_file(work, max_chars=1200, min_chars=200)


def knowledge_and_cjk_files() -> list[PreparedFile]:
    """The knowledge corpus (front matter about fields, tags, error pairs) and the CJK
    documents, in path order."""
    files = [
        prepared(str(path.relative_to(CORPUS)), path.read_text(encoding="utf-8"))
        for path in sorted(CORPUS.rglob("*.md"))
    ]
    return files + [prepared(path, text) for path, text in sorted(CJK_DOCS.items())]


def stored_rows(conn: sqlite3.Connection) -> dict[str, list[tuple[object, ...]]]:
    """The batch's rows, FTS5 tables by their every token instance (fts5vocab)."""
    for table in FILE_FTS_TABLES:
        conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_terms "
            f"USING fts5vocab(main, {table}, instance)"
        )
    queries = {
        "files": "SELECT id, path, mtime_ns, size_bytes, sha256 FROM files ORDER BY id",
        "chunks": "SELECT * FROM chunks ORDER BY id",
        "file_knowledge": "SELECT * FROM file_knowledge ORDER BY file_id",
        "file_tags": "SELECT * FROM file_tags ORDER BY tag, file_id",
        "error_pairs": "SELECT * FROM error_pairs ORDER BY id",
        **{
            t: f"SELECT * FROM temp.{t}_terms ORDER BY term, doc, col, offset"
            for t in FILE_FTS_TABLES
        },
    }
    return {name: conn.execute(sql).fetchall() for name, sql in queries.items()}


def test_a_batch_lands_as_its_files_one_by_one_in_one_segment_per_table(tmp_path: Path) -> None:
    """The reference: every file written as a batch of its own (automerge off, so each
    segment stays as written)."""
    files = knowledge_and_cjk_files()
    reference = open_index(tmp_path / "ref.db")
    for single in files:
        with transaction(reference), merges_deferred(reference):
            IndexWriter(reference).write_rows([single], "hash")
    conn = open_index(tmp_path / "batch.db")
    try:
        with transaction(conn), merges_deferred(conn):
            IndexWriter(conn).write_rows(files, "hash")
        expected = stored_rows(reference)
        assert all(expected[t] for t in (*FILE_FTS_TABLES, "file_tags", "error_pairs"))
        assert stored_rows(conn) == expected
        assert {t: segment_count(conn, t) for t in FILE_FTS_TABLES} == dict.fromkeys(
            FILE_FTS_TABLES, 1
        )
        # A rewrite of the batch: its old rows' deletes, then its new rows.
        with transaction(conn), merges_deferred(conn):
            IndexWriter(conn).write_rows(files, "hash")
        assert all(segment_count(conn, t) <= 3 for t in FILE_FTS_TABLES)
        for table in FILE_FTS_TABLES:
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    finally:
        conn.close()
        reference.close()
