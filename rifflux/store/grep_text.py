"""Each file's whole text as indexed, and the trigram index that finds it: what exact and
regex search (rifflux.search.grep) answers from.

Tables (schema.py's ``GREP_SQL``, added to older indexes through ``ADDED_TABLES``):

* ``grep_text``: one row per file written since the table exists: the file's text as the
  indexer read it (newlines as ``\\n``, no byte order mark; front matter included, which
  chunks leave out), UTF-8 and Zstandard-compressed; the ``sha256`` of the file it was read
  from; ``chunk_lines``, the 1-based line where each chunk starts (JSON list, by
  ``chunk_index``), which tells a line of the file its chunk; ``block_starts``, where each
  of its trigram blocks starts (:func:`block_starts`), and their number.
* ``grep_trigrams``: FTS5's ``trigram`` tokenizer over the blocks, one row per block,
  contentless and ``detail=none``: it answers "which blocks hold every one of these
  trigrams", case-insensitively, and nothing more; the caller verifies. A block is whole
  lines, so every match (which never spans a line break) lies in one block: a block
  row is far more selective than a file row, since the trigrams of a literal must then
  occur within a few lines of each other, not anywhere in the file.

Invariants:

* A file's blocks have the consecutive rowids ``id`` .. ``id + blocks - 1`` of its
  ``grep_text`` row. The writer gives every row it writes a new range above every range
  given before (reserved in ``sqlite_sequence``), so a block rowid belongs to the row with
  the greatest ``id`` not above it, when it lies within that row's range.
* The writer replaces a file's row and its trigram rows in the transaction that replaces
  its chunks (:func:`write_files`), and removes them before it deletes the file
  (:func:`forget_files`): a contentless table can only unlearn a row given the very text
  it was told, which the stored text and block starts give back. A file is grep-able
  exactly when its chunks are keyword-searchable.
* A delete that bypasses the writer (a cascade from ``files``) leaves the trigram rows
  behind; ids are never reused, so such rows only ever name a range no row owns, which
  :func:`candidates` drops.
* A file whose row is missing, or whose ``sha256`` is not the file's (written by a
  Rifflux without the table), is stale: :func:`stale_paths` lists it, and the next job
  re-chunks it as it does a file without knowledge rows.
* A reader of an index without the tables (:func:`has_grep`) is told to reindex.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import zstandard

from rifflux.store.schema import (
    GREP_INDEX,
    GREP_TABLE,
    OLD_GREP_TABLES,
    TRIGRAM_TABLE,
    has_schema_object,
)

COMPRESSION_LEVEL = 3
"""Zstandard level of the stored text: 0.38x the text's bytes on awesome-copilot, as
zlib's level 6 (0.36x), and a search inflates a candidate ~3x faster (12 against 40 us
for a file of 9 kB), which is most of what verifying a candidate costs."""
BLOCK_CHARS = 2048
"""A trigram block closes at the first line end once it holds this many characters.
Smaller blocks select fewer candidate files and cost more index bytes (measured in
BENCHMARKS.md, "Grep")."""
SEEK_LIMIT = 4096
"""Matching blocks up to which :func:`candidates` finds their rows one index seek each
(skipping the rest of a found row's blocks); above it, one ordered pass over every row."""


def has_grep(conn: sqlite3.Connection) -> bool:
    """Whether the index has ``grep_text`` and ``grep_trigrams`` (created together)."""
    return has_schema_object(conn, "table", GREP_TABLE)


def drop_old_tables(conn: sqlite3.Connection) -> int:
    """Drop the per-file trigram tables an older index has (schema.py's
    ``OLD_GREP_TABLES``), when the block tables are added; the next job rewrites every
    file's rows, as none is current. Returns the rows filled: none."""
    for table in OLD_GREP_TABLES:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    return 0


def block_starts(text: str) -> list[int]:
    """The character offset where each trigram block of ``text`` starts: the first at 0,
    each next one after the first line end at or past ``BLOCK_CHARS`` characters."""
    starts = [0]
    while True:
        end = text.find("\n", starts[-1] + BLOCK_CHARS - 1)
        if end < 0 or end + 1 >= len(text):
            return starts
        starts.append(end + 1)


def blocks_of(text: str, starts: Sequence[int]) -> list[str]:
    """The blocks of ``text`` that start at ``starts``."""
    ends = [*starts[1:], len(text)]
    return [text[a:b] for a, b in zip(starts, ends, strict=True)]


_codecs = threading.local()


def compress(text: str) -> bytes:
    return _codec()[0].compress(text.encode("utf-8"))


def decompress(blob: bytes) -> bytes:
    """The stored text as UTF-8 bytes."""
    return bytes(_codec()[1].decompress(blob))


def _codec() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    """This thread's Zstandard compressor and decompressor (an instance is not safe to
    share between threads)."""
    codec = getattr(_codecs, "pair", None)
    if codec is None:
        codec = (zstandard.ZstdCompressor(level=COMPRESSION_LEVEL), zstandard.ZstdDecompressor())
        _codecs.pair = codec
    return codec


def _forget(conn: sqlite3.Connection, rows: Iterable[tuple[int, bytes, str]]) -> None:
    """Unlearn the trigram rows of ``(grep_text.id, compressed text, block_starts)``."""
    deletes = []
    for row_id, blob, starts in rows:
        text = decompress(blob).decode("utf-8")
        blocks = blocks_of(text, [int(n) for n in json.loads(starts)])
        deletes += [(row_id + k, block) for k, block in enumerate(blocks)]
    conn.executemany(
        f"INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, rowid, text) VALUES ('delete', ?, ?)",
        deletes,
    )


def _next_id(conn: sqlite3.Connection) -> int:
    """The first ``grep_text.id`` no row has ever had."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (GREP_TABLE,)).fetchone()
    return 1 if row is None else int(row[0]) + 1


class TextRow(NamedTuple):
    """One file's grep rows to write: its text, that text compressed (:func:`compress`)
    and its blocks' starts (:func:`block_starts`), both made ahead by the caller outside
    the write lock, and its chunks' first lines."""

    file_id: int
    sha256: str
    text: str
    blob: bytes
    chunk_lines: Sequence[int]
    block_starts: Sequence[int] = ()


def write_files(conn: sqlite3.Connection, files: Sequence[TextRow]) -> None:
    """Replace the text and trigram rows of ``files`` (inside the transaction writing
    their chunks, after every other statement of it).

    Every trigram change goes in last and together, the old rows' ``'delete'`` commands
    then the new rows by ascending rowid: SQLite's FTS5 writes its pending postings as a
    new segment whenever another statement opens a savepoint (a multi-row DELETE does)
    and whenever a rowid is not above the last one written, so trigram rows written per
    file between the other rows of a batch became a segment per file, which automerge
    then merged over and over (most of the index time the table cost). A rewritten file
    gets a new row and a new range of block rowids, above every earlier one."""
    if not files:
        return
    file_ids = json.dumps([f.file_id for f in files])
    old = conn.execute(
        f"SELECT id, text, block_starts FROM {GREP_TABLE} "
        "WHERE file_id IN (SELECT value FROM json_each(?)) ORDER BY id",
        (file_ids,),
    ).fetchall()
    _forget(conn, old)
    conn.execute(
        f"DELETE FROM {GREP_TABLE} WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps([int(row[0]) for row in old]),),
    )
    next_id = _next_id(conn)
    text_rows = []
    trigram_rows: list[tuple[int, str]] = []
    for f in files:
        starts = list(f.block_starts) or block_starts(f.text)
        text_rows.append(
            (
                next_id,
                f.file_id,
                f.sha256,
                f.blob or compress(f.text),
                json.dumps(list(f.chunk_lines), separators=(",", ":")),
                json.dumps(starts, separators=(",", ":")),
                len(starts),
            )
        )
        trigram_rows += [(next_id + k, b) for k, b in enumerate(blocks_of(f.text, starts))]
        next_id += len(starts)
    conn.executemany(
        f"INSERT INTO {GREP_TABLE}(id, file_id, sha256, text, chunk_lines, block_starts, "
        "blocks) VALUES (?, ?, ?, ?, ?, ?, ?)",
        text_rows,
    )
    # Reserve every block rowid given, not only the rows' ids (module docstring).
    conn.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = ?", (next_id - 1, GREP_TABLE))
    conn.executemany(f"INSERT INTO {TRIGRAM_TABLE}(rowid, text) VALUES (?, ?)", trigram_rows)


def forget_files(conn: sqlite3.Connection, paths: Sequence[str]) -> None:
    """Remove the text and trigram rows of the files at ``paths`` (before deleting them)."""
    if not paths or not has_grep(conn):
        return
    rows = conn.execute(
        f"SELECT t.id, t.text, t.block_starts FROM {GREP_TABLE} t "
        "JOIN files f ON f.id = t.file_id WHERE f.path IN (SELECT value FROM json_each(?)) "
        "ORDER BY t.id",
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


def candidates(
    conn: sqlite3.Connection, match: str | None, seek_limit: int = SEEK_LIMIT
) -> list[tuple[int, int, str, str]]:
    """``(grep_text.id, file_id, path, sha256)`` of the files with a block whose trigrams
    satisfy ``match`` (an FTS5 query over ``grep_trigrams``), or of every file when
    ``match`` is None; by path."""
    if match is None:
        sql = (
            f"SELECT t.id, t.file_id, f.path, t.sha256 FROM {GREP_TABLE} t "
            "JOIN files f ON f.id = t.file_id ORDER BY f.path"
        )
        rows = conn.execute(sql).fetchall()
    else:
        blocks = [
            int(row[0])
            for row in conn.execute(
                f"SELECT rowid FROM {TRIGRAM_TABLE} WHERE {TRIGRAM_TABLE} MATCH ? ORDER BY rowid",
                (match,),
            )
        ]
        owners = (
            _owners_by_seek(conn, blocks)
            if len(blocks) <= seek_limit
            else _owners_by_pass(conn, blocks)
        )
        sql = (
            f"SELECT t.id, t.file_id, f.path, t.sha256 FROM {GREP_TABLE} t "
            f"INDEXED BY {GREP_INDEX} JOIN files f ON f.id = t.file_id "
            "WHERE t.id IN (SELECT value FROM json_each(?)) ORDER BY f.path"
        )
        rows = conn.execute(sql, (json.dumps(owners),)).fetchall()
    return [(int(r[0]), int(r[1]), str(r[2]), str(r[3])) for r in rows]


def _owners_by_seek(conn: sqlite3.Connection, blocks: Sequence[int]) -> list[int]:
    """The rows owning the ascending block rowids ``blocks``: one seek per row found."""
    owners: list[int] = []
    at = 0
    while at < len(blocks):
        row = conn.execute(
            f"SELECT id, blocks FROM {GREP_TABLE} WHERE id <= ? ORDER BY id DESC LIMIT 1",
            (blocks[at],),
        ).fetchone()
        if row is not None and blocks[at] < row[0] + row[1]:
            owners.append(int(row[0]))
            at = bisect_left(blocks, row[0] + row[1], at)
        else:
            at += 1  # a block no row owns any more
    return owners


def _owners_by_pass(conn: sqlite3.Connection, blocks: Sequence[int]) -> list[int]:
    """The rows owning the ascending block rowids ``blocks``: one pass over every row."""
    owners: list[int] = []
    at = 0
    for row_id, count in conn.execute(f"SELECT id, blocks FROM {GREP_TABLE} ORDER BY id"):
        at = bisect_left(blocks, row_id, at)
        if at == len(blocks):
            break
        if blocks[at] < row_id + count:
            owners.append(int(row_id))
    return owners


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
