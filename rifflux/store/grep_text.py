"""Each file's whole text as indexed, and the trigram index that finds it: what exact and
regex search (rifflux.search.grep) answers from.

Tables (schema.py's ``GREP_SQL``, added to older indexes through ``ADDED_TABLES``):

* ``file_text``: one row per file written since the table exists: the file's text as the
  indexer read it (newlines as ``\\n``, no byte order mark; front matter included, which
  chunks leave out), UTF-8 and zlib-compressed; the ``sha256`` of the file it was read
  from; ``chunk_lines``, the 1-based line where each chunk starts (JSON list, by
  ``chunk_index``), which tells a line of the file its chunk.
* ``file_trigrams``: FTS5's ``trigram`` tokenizer over that text, one row per file (rowid
  = ``file_text.id``), contentless and ``detail=none``: it answers "which files hold every
  one of these trigrams", case-insensitively, and nothing more; the caller verifies.

Invariants:

* The writer replaces a file's row and its trigram row in the transaction that replaces
  its chunks (:func:`write_files`), and removes both before it deletes the file
  (:func:`forget_files`): a contentless table can only unlearn a row given the very text
  it was told, which is the stored text. A file is grep-able exactly when its chunks are
  keyword-searchable.
* A delete that bypasses the writer (a cascade from ``files``) leaves the trigram row
  behind; ``file_text.id`` is never reused, so such a row only ever names a missing row,
  which :func:`candidates` drops by its join.
* A file whose row is missing, or whose ``sha256`` is not the file's (written by a
  Rifflux without the table), is stale: :func:`stale_paths` lists it, and the next job
  re-chunks it as it does a file without knowledge rows.
* A reader of an index without the tables (:func:`has_grep`) is told to reindex.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from rifflux.store.schema import GREP_TABLE, TRIGRAM_TABLE, has_schema_object

COMPRESSION_LEVEL = 6
"""zlib level of the stored text: 0.36x the text's bytes on awesome-copilot."""


def has_grep(conn: sqlite3.Connection) -> bool:
    """Whether the index has ``file_text`` and ``file_trigrams`` (created together)."""
    return has_schema_object(conn, "table", GREP_TABLE)


def compress(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8"), COMPRESSION_LEVEL)


def decompress(blob: bytes) -> bytes:
    """The stored text as UTF-8 bytes."""
    return zlib.decompress(blob)


def _forget(conn: sqlite3.Connection, rows: Iterable[tuple[int, bytes]]) -> None:
    """Unlearn the trigram rows of ``(file_text.id, compressed text)`` rows."""
    conn.executemany(
        f"INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, rowid, text) VALUES ('delete', ?, ?)",
        [(row_id, decompress(blob).decode("utf-8")) for row_id, blob in rows],
    )


class TextRow(NamedTuple):
    """One file's grep rows to write: its text, that text compressed (:func:`compress`,
    made ahead by the caller, outside the write lock) and its chunks' first lines."""

    file_id: int
    sha256: str
    text: str
    blob: bytes
    chunk_lines: Sequence[int]


def write_files(conn: sqlite3.Connection, files: Sequence[TextRow]) -> None:
    """Replace the text and trigram rows of ``files`` (inside the transaction writing
    their chunks, after every other statement of it).

    Every trigram change goes in last and together, the old rows' ``'delete'`` commands
    then the new rows by ascending rowid: SQLite's FTS5 writes its pending postings as a
    new segment whenever another statement opens a savepoint (a multi-row DELETE does)
    and whenever a rowid is not above the last one written, so a trigram row written per
    file between the other rows of a batch became a segment per file, which automerge
    then merged over and over (most of the index time the table cost)."""
    if not files:
        return
    file_ids = json.dumps([f.file_id for f in files])
    old = {
        int(file_id): (int(row_id), blob)
        for file_id, row_id, blob in conn.execute(
            f"SELECT file_id, id, text FROM {GREP_TABLE} "
            "WHERE file_id IN (SELECT value FROM json_each(?))",
            (file_ids,),
        )
    }
    trigram_rows: list[tuple[int, str]] = []
    for f in files:
        lines = json.dumps(list(f.chunk_lines), separators=(",", ":"))
        blob = f.blob or compress(f.text)
        if f.file_id in old:
            row_id = old[f.file_id][0]
            conn.execute(
                f"UPDATE {GREP_TABLE} SET sha256 = ?, text = ?, chunk_lines = ? WHERE id = ?",
                (f.sha256, blob, lines, row_id),
            )
        else:
            row_id = conn.execute(
                f"INSERT INTO {GREP_TABLE}(file_id, sha256, text, chunk_lines) "
                "VALUES (?, ?, ?, ?) RETURNING id",
                (f.file_id, f.sha256, blob, lines),
            ).fetchone()[0]
        trigram_rows.append((int(row_id), f.text))
    _forget(conn, sorted(old.values()))
    conn.executemany(
        f"INSERT INTO {TRIGRAM_TABLE}(rowid, text) VALUES (?, ?)", sorted(trigram_rows)
    )


def forget_files(conn: sqlite3.Connection, paths: Sequence[str]) -> None:
    """Remove the text and trigram rows of the files at ``paths`` (before deleting them)."""
    if not paths or not has_grep(conn):
        return
    rows = conn.execute(
        f"SELECT t.id, t.text FROM {GREP_TABLE} t JOIN files f ON f.id = t.file_id "
        "WHERE f.path IN (SELECT value FROM json_each(?))",
        (json.dumps(list(paths)),),
    ).fetchall()
    _forget(conn, rows)
    conn.execute(
        f"DELETE FROM {GREP_TABLE} WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps([int(row[0]) for row in rows]),),
    )


def stale_paths(conn: sqlite3.Connection) -> set[str]:
    """Stored files without a text row of their current content (module docstring)."""
    if not has_grep(conn):
        return set()
    rows = conn.execute(
        f"SELECT f.path FROM files f LEFT JOIN {GREP_TABLE} t ON t.file_id = f.id "
        "WHERE t.sha256 IS NOT f.sha256"
    )
    return {str(row[0]) for row in rows}


def candidates(conn: sqlite3.Connection, match: str | None) -> list[tuple[int, int, str, str]]:
    """``(file_text.id, file_id, path, sha256)`` of the files whose trigrams satisfy
    ``match`` (an FTS5 query over ``file_trigrams``), or of every file when ``match`` is
    None; by path."""
    if match is None:
        sql = (
            f"SELECT t.id, t.file_id, f.path, t.sha256 FROM {GREP_TABLE} t "
            "JOIN files f ON f.id = t.file_id ORDER BY f.path"
        )
        rows = conn.execute(sql).fetchall()
    else:
        sql = (
            f"SELECT t.id, t.file_id, f.path, t.sha256 FROM {TRIGRAM_TABLE} g "
            f"JOIN {GREP_TABLE} t ON t.id = g.rowid JOIN files f ON f.id = t.file_id "
            f"WHERE {TRIGRAM_TABLE} MATCH ? ORDER BY f.path"
        )
        rows = conn.execute(sql, (match,)).fetchall()
    return [(int(r[0]), int(r[1]), str(r[2]), str(r[3])) for r in rows]


def read_text(conn: sqlite3.Connection, row_id: int) -> bytes:
    """A file's stored text, as UTF-8 bytes (empty when the row is gone)."""
    row = conn.execute(f"SELECT text FROM {GREP_TABLE} WHERE id = ?", (row_id,)).fetchone()
    return b"" if row is None else decompress(row[0])


def chunk_lines(conn: sqlite3.Connection, row_id: int) -> list[int]:
    """The 1-based line where each of a file's chunks starts, by ``chunk_index``."""
    row = conn.execute(f"SELECT chunk_lines FROM {GREP_TABLE} WHERE id = ?", (row_id,)).fetchone()
    return [] if row is None else [int(n) for n in json.loads(row[0])]


def chunk_at(
    conn: sqlite3.Connection, file_id: int, chunk_index: int
) -> tuple[str, str, str, str] | None:
    """``(chunk_id, heading_path, headings JSON or "", content)`` of one chunk of a file."""
    row = conn.execute(
        "SELECT chunk_id, heading_path, headings, content FROM chunks "
        "WHERE file_id = ? AND chunk_index = ?",
        (file_id, chunk_index),
    ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]), str(row[2] or ""), str(row[3]))
