"""The chunk change log: every change that can stale a cached vector row is logged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from rifflux.store import changes
from rifflux.store.connection import open_index


def logged_since(conn: sqlite3.Connection, since: int) -> set[int]:
    return set(changes.changed_rowids(conn, since))


def last(conn: sqlite3.Connection) -> int:
    head = changes.head(conn)
    assert head is not None
    return head.last


def add_chunk(conn: sqlite3.Connection, path: str, index: int, vector: bool) -> int:
    conn.execute(
        "INSERT OR IGNORE INTO files(path, mtime_ns, size_bytes, sha256, indexed_at) "
        "VALUES (?, 0, 0, '', 0)",
        (path,),
    )
    file_id = conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()[0]
    rowid = conn.execute(
        "INSERT INTO chunks(chunk_id, file_id, chunk_index, heading_path, content, "
        "embed_sha256) VALUES (?, ?, ?, '', 'text', 'h') RETURNING id",
        (f"{path}#{index}", file_id, index),
    ).fetchone()[0]
    if vector:
        conn.execute(
            "INSERT INTO embeddings(chunk_id, model, dim, vec) VALUES (?, 'm', 1, x'00000000')",
            (f"{path}#{index}",),
        )
    return int(rowid)


def test_every_change_that_can_stale_a_cached_row_is_logged(tmp_path: Path) -> None:
    conn = open_index(tmp_path / "index.db")
    with conn:
        a0 = add_chunk(conn, "a.md", 0, vector=True)
        b0 = add_chunk(conn, "b.md", 0, vector=False)
        b1 = add_chunk(conn, "b.md", 1, vector=True)
    # A vector attached is logged; a chunk inserted without one needs no entry.
    assert logged_since(conn, 0) == {a0, b1}

    def after(statement: str, *params: object) -> set[int]:
        mark = last(conn)
        with conn:
            conn.execute(statement, params)
        return logged_since(conn, mark)

    assert after("INSERT INTO embeddings VALUES ('b.md#0', 'm', 1, x'00000000')") == {b0}
    assert after("UPDATE embeddings SET vec = x'01000000' WHERE chunk_id = 'a.md#0'") == {a0}
    assert after("DELETE FROM embeddings WHERE chunk_id = 'b.md#1'") == {b1}
    assert after("UPDATE chunks SET embed_sha256 = 'g' WHERE id = ?", a0) == {a0}
    assert after("UPDATE chunks SET content = 'only text' WHERE id = ?", a0) == set()
    assert after("UPDATE files SET path = 'c.md' WHERE path = 'b.md'") == {b0, b1}
    assert after("UPDATE files SET mtime_ns = 5 WHERE path = 'a.md'") == set()
    # A file deleted deletes its chunks (and their vectors) by cascade: each is logged.
    assert after("DELETE FROM files WHERE path = 'c.md'") == {b0, b1}
    conn.close()


def test_prune_deletes_what_a_manifest_includes_and_records_the_mark(tmp_path: Path) -> None:
    conn = open_index(tmp_path / "index.db")
    with conn:
        for i in range(3):
            add_chunk(conn, "a.md", i, vector=True)
    mark = last(conn)
    with conn:
        extra = add_chunk(conn, "b.md", 0, vector=True)

    assert changes.prune(conn, mark) == 3
    assert changes.prune(conn, mark) == 0

    head = changes.head(conn)
    assert head is not None and head.pruned == mark and head.last == mark + 1
    assert head.covers(mark) and not head.covers(mark - 1)
    assert logged_since(conn, mark) == {extra}
    conn.close()
