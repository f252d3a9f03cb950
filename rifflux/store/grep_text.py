"""Each file's whole text as indexed, in blocks of whole lines, and the trigram index that
finds the blocks: what exact and regex search (rifflux.search.grep) answers from.

Tables (schema.py's ``GREP_SQL``, added to older indexes through ``ADDED_TABLES``):

* ``grep_files``: one row per file written since the tables exist: the ``sha256`` of the
  file its text was read from; ``chunk_lines``, the 1-based line where each chunk starts
  (JSON list, by ``chunk_index``), which tells a line of the file its chunk; its blocks'
  ids ``first_block`` .. ``first_block + blocks - 1`` and ``block_lines``, the 1-based
  line where each starts (JSON list).
* ``grep_blocks``: one row per block of a file's text as the indexer read it (newlines as
  ``\\n``, no byte order mark, front matter included, which chunks leave out): whole lines
  closed at the first line end past ``BLOCK_CHARS`` characters (:func:`block_starts`),
  UTF-8 and Zstandard-compressed, with the ``grep_dictionaries`` row it was compressed
  with (NULL: none).
* ``grep_dictionaries``: Zstandard dictionaries trained on the blocks of the first batch
  written with enough text (:func:`codec_for`). Blocks of ~2 KB compress poorly on their
  own; with a dictionary of the corpus's common strings they take 0.39x / 0.42x of their
  text (awesome-copilot / generated text) against 0.48x / 0.56x without (BENCHMARKS.md,
  "Grep").
* ``grep_block_trigrams``: FTS5's ``trigram`` tokenizer over the blocks, rowid the
  block's id, contentless and ``detail=none``: it answers "which blocks hold every one of
  these trigrams", case-insensitively, and nothing more; the caller verifies each block.
  A match never spans a line break and a block is whole lines, so every match lies in
  one block: the trigrams of a literal must occur within a few lines of each other, and
  a candidate costs the verification of ~2 KB, not of its whole file.

Invariants:

* A file's blocks have the consecutive ids ``first_block`` .. ``first_block + blocks - 1``;
  ids are never reused (AUTOINCREMENT), so a trigram row or block row left by a delete
  that bypassed the writer names a block outside every file's range, which
  :func:`candidates` drops.
* The writer replaces a file's rows and its trigram rows in the transaction that replaces
  its chunks (:func:`write_files`), and removes them before it deletes the file
  (:func:`forget_files`): a contentless table can only unlearn a row given the very text
  it was told, which the stored blocks give back. A file is grep-able exactly when its
  chunks are keyword-searchable.
* A file whose ``grep_files`` row is missing, or whose ``sha256`` is not the file's
  (written by a Rifflux without the tables), is stale: :func:`stale_paths` lists it, and
  the next job re-chunks it as it does a file without knowledge rows.
* A dictionary row never changes once written; a block names the one it needs.
* A reader of an index without the tables (:func:`has_grep`) is told to reindex.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import zstandard

from rifflux.store.rows import PreparedFile
from rifflux.store.schema import (
    DICTIONARY_TABLE,
    GREP_BLOCKS,
    GREP_TABLE,
    OLD_GREP_TABLES,
    TRIGRAM_TABLE,
    has_schema_object,
)

COMPRESSION_LEVEL = 3
"""Zstandard level of the stored blocks: levels 6 and 9 store 0.02x / 0.03x less of the
text at 3x / 6x the compression CPU."""
BLOCK_CHARS = 2048
"""A trigram block closes at the first line end once it holds this many characters.
Smaller blocks make fewer and cheaper candidates and cost more index bytes (measured in
BENCHMARKS.md, "Grep")."""
DICTIONARY_BYTES = 112 * 1024
"""The size of a trained dictionary (Zstandard's default)."""
MIN_TRAINING_BYTES = 256 * 1024
"""Text a batch needs to train a dictionary on; a smaller one compresses without."""
MIN_TRAINING_BLOCKS = 64


GREP_OFF_KEY = "grep_index_off"
"""``index_metadata`` key present when the index keeps no grep rows (:func:`set_grep`)."""


def has_grep(conn: sqlite3.Connection) -> bool:
    """Whether the index keeps grep rows: it has the tables (created together) and they
    are not switched off."""
    return has_schema_object(conn, "table", GREP_TABLE) and not grep_off(conn)


def grep_off(conn: sqlite3.Connection) -> bool:
    """Whether the index's grep rows are switched off (``RIFFLUX_GREP_INDEX=0``)."""
    row = conn.execute("SELECT 1 FROM index_metadata WHERE key = ?", (GREP_OFF_KEY,)).fetchone()
    return row is not None


def set_grep(conn: sqlite3.Connection, on: bool) -> bool:
    """Switch the index's grep rows on or off (inside a transaction); whether that changed
    anything. Off removes every grep row; on again leaves every file without rows, so
    the job that switches it on (its plan runs next) re-chunks them all (:func:`stale_paths`)."""
    if not has_schema_object(conn, "table", GREP_TABLE) or grep_off(conn) != on:
        return False
    if on:
        conn.execute("DELETE FROM index_metadata WHERE key = ?", (GREP_OFF_KEY,))
        return True
    conn.execute("INSERT INTO index_metadata(key, value) VALUES (?, '1')", (GREP_OFF_KEY,))
    for table in (GREP_TABLE, GREP_BLOCKS, DICTIONARY_TABLE):
        conn.execute(f"DELETE FROM {table}")
    conn.execute(f"INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}) VALUES ('delete-all')")
    return True


def drop_old_tables(conn: sqlite3.Connection) -> int:
    """Drop the tables of the same role an older index has (schema.py's
    ``OLD_GREP_TABLES``), when these are added; the next job rewrites every file's rows,
    as none is current. Returns the rows filled: none."""
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


def lines_at(text: str, offsets: Sequence[int]) -> list[int]:
    """The 1-based line of ``text`` at each of the ascending ``offsets``."""
    lines = []
    line, at = 1, 0
    for offset in offsets:
        line += text.count("\n", at, offset)
        at = offset
        lines.append(line)
    return lines


# -- compression ------------------------------------------------------------------------

_local = threading.local()  # a Zstandard (de)compressor is not safe to share between threads


def _compressor(dictionary: bytes) -> zstandard.ZstdCompressor:
    """This thread's compressor for ``dictionary`` (empty: none), kept for the last one."""
    cached = getattr(_local, "compressor", None)
    if cached is None or (cached[0] is not dictionary and cached[0] != dictionary):
        compressor = zstandard.ZstdCompressor(
            level=COMPRESSION_LEVEL,
            dict_data=zstandard.ZstdCompressionDict(dictionary) if dictionary else None,
            write_checksum=False,
            write_dict_id=False,
        )
        cached = (dictionary, compressor)
        _local.compressor = cached
    return cached[1]


class Dictionary(NamedTuple):
    """A stored dictionary: its row id, its bytes, and the digest that per-process caches
    know it by (a row never changes, but ids repeat from index to index)."""

    id: int
    data: bytes
    digest: bytes


def _stored_dictionary(dictionary_id: int, data: bytes) -> Dictionary:
    return Dictionary(dictionary_id, data, hashlib.blake2b(data, digest_size=16).digest())


def _decompressor(dictionary: Dictionary | None) -> zstandard.ZstdDecompressor:
    """This thread's decompressor for ``dictionary`` (None: none), by its digest."""
    cache: dict[bytes, zstandard.ZstdDecompressor] | None = getattr(_local, "decompressors", None)
    if cache is None:
        cache = {}
        _local.decompressors = cache
    key = b"" if dictionary is None else dictionary.digest
    found = cache.get(key)
    if found is None:
        if len(cache) >= 8:
            cache.clear()
        found = (
            zstandard.ZstdDecompressor()
            if dictionary is None
            else zstandard.ZstdDecompressor(
                dict_data=zstandard.ZstdCompressionDict(dictionary.data)
            )
        )
        cache[key] = found
    return found


def compress(block: str, dictionary: bytes = b"") -> bytes:
    return _compressor(dictionary).compress(block.encode("utf-8"))


def first_dictionary(conn: sqlite3.Connection) -> Dictionary | None:
    """The index's first dictionary (None: none): what new blocks are compressed with."""
    row = conn.execute(f"SELECT id, data FROM {DICTIONARY_TABLE} ORDER BY id LIMIT 1").fetchone()
    return None if row is None else _stored_dictionary(int(row[0]), bytes(row[1]))


def codec_for(conn: sqlite3.Connection, samples: Sequence[str]) -> bytes:
    """The dictionary to compress a batch's blocks with (empty: none): the index's first,
    else one trained on ``samples`` (the batch's blocks) when they hold enough text. The
    writer stores a trained one with the rows that use it (:func:`write_files`); workers
    that train before the first is stored each store their own."""
    stored = first_dictionary(conn)
    if stored is not None:
        return stored.data
    if len(samples) < MIN_TRAINING_BLOCKS or sum(map(len, samples)) < MIN_TRAINING_BYTES:
        return b""
    try:
        trained = zstandard.train_dictionary(
            DICTIONARY_BYTES, [s.encode("utf-8") for s in samples], level=COMPRESSION_LEVEL
        )
    except zstandard.ZstdError:
        return b""  # samples Zstandard cannot train on (too alike, too few)
    return trained.as_bytes()


def compressed(conn: sqlite3.Connection, files: Sequence[PreparedFile]) -> list[PreparedFile]:
    """``files`` with their blocks compressed (``block_blobs``, ``dictionary``): done by
    the worker that chunks a batch, before the write lock is taken."""
    if not has_grep(conn):
        return list(files)
    blocks = [
        blocks_of(f.text, f.block_starts or block_starts(f.text))
        for f in files
        if f.text is not None
    ]
    dictionary = codec_for(conn, [b for file_blocks in blocks for b in file_blocks])
    made = iter(blocks)
    return [
        f
        if f.text is None
        else dataclasses.replace(
            f,
            block_blobs=tuple(compress(b, dictionary) for b in next(made)),
            dictionary=dictionary,
        )
        for f in files
    ]


class BlockReader:
    """Reads blocks' text as UTF-8 bytes, loading the dictionaries it needs once (``known``:
    one its caller has read already); for use by one thread."""

    def __init__(self, conn: sqlite3.Connection, known: Dictionary | None = None) -> None:
        self.conn = conn
        self._known = {} if known is None else {known.id: known}
        self._decompressors: dict[int | None, zstandard.ZstdDecompressor] = {}

    def _decompressor(self, dictionary_id: int | None) -> zstandard.ZstdDecompressor:
        found = self._decompressors.get(dictionary_id)
        if found is None:
            dictionary = None
            if dictionary_id is not None:
                dictionary = self._known.get(dictionary_id) or self._load(dictionary_id)
            found = _decompressor(dictionary)
            self._decompressors[dictionary_id] = found
        return found

    def _load(self, dictionary_id: int) -> Dictionary | None:
        row = self.conn.execute(
            f"SELECT data FROM {DICTIONARY_TABLE} WHERE id = ?", (dictionary_id,)
        ).fetchone()
        return None if row is None else _stored_dictionary(dictionary_id, bytes(row[0]))

    def inflate(self, dictionary_id: int | None, blob: bytes) -> bytes:
        return bytes(self._decompressor(dictionary_id).decompress(blob))

    def block(self, block_id: int) -> bytes:
        """One block's text (empty when the row is gone)."""
        row = self.conn.execute(
            f"SELECT dictionary, text FROM {GREP_BLOCKS} WHERE id = ?", (block_id,)
        ).fetchone()
        return b"" if row is None else self.inflate(row[0], row[1])

    def blocks(self, first: int, count: int) -> dict[int, bytes]:
        """The texts of the blocks ``first`` .. ``first + count - 1`` there are, by
        ascending id."""
        rows = self.conn.execute(
            f"SELECT id, dictionary, text FROM {GREP_BLOCKS} WHERE id BETWEEN ? AND ? ORDER BY id",
            (first, first + count - 1),
        )
        return {int(block_id): self.inflate(d, blob) for block_id, d, blob in rows}

    def whole(self, first: int, count: int) -> tuple[bytes, list[int]]:
        """A file's text from its blocks ``first`` .. ``first + count - 1``, and where
        each block starts in it (bytes; one more offset: the end)."""
        read = self.blocks(first, count)
        texts = [read.get(block_id, b"") for block_id in range(first, first + count)]
        offsets = [0]
        for text in texts:
            offsets.append(offsets[-1] + len(text))
        return b"".join(texts), offsets


# -- writing ----------------------------------------------------------------------------


class TextRow(NamedTuple):
    """One file's grep rows to write: its text, its blocks' starts and compressed texts
    with the dictionary they used (:func:`compressed`: made by the caller outside the
    write lock; compressed here when empty), and its chunks' first lines."""

    file_id: int
    sha256: str
    text: str
    chunk_lines: Sequence[int]
    block_starts: Sequence[int] = ()
    block_blobs: Sequence[bytes] = ()
    dictionary: bytes = b""


def _forget(conn: sqlite3.Connection, ranges: Iterable[tuple[int, int]]) -> None:
    """Unlearn the trigram rows of the blocks in ``(first_block, blocks)`` ranges and
    delete the blocks."""
    reader = BlockReader(conn)
    deletes: list[tuple[int, str]] = []
    spans = [(first, count) for first, count in ranges if count]
    for first, count in spans:
        deletes += [(i, text.decode("utf-8")) for i, text in reader.blocks(first, count).items()]
    conn.executemany(
        f"INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, rowid, text) VALUES ('delete', ?, ?)",
        deletes,
    )
    conn.executemany(
        f"DELETE FROM {GREP_BLOCKS} WHERE id BETWEEN ? AND ?",
        [(first, first + count - 1) for first, count in spans],
    )


def _dictionary_id(conn: sqlite3.Connection, data: bytes, known: dict[bytes, int]) -> int | None:
    """The ``grep_dictionaries`` id of ``data`` (stored now if new); None for none."""
    if not data:
        return None
    if data not in known:
        row = conn.execute(f"SELECT id FROM {DICTIONARY_TABLE} WHERE data = ?", (data,)).fetchone()
        if row is None:
            row = conn.execute(
                f"INSERT INTO {DICTIONARY_TABLE}(data) VALUES (?) RETURNING id", (data,)
            ).fetchone()
        known[data] = int(row[0])
    return known[data]


def _next_block_id(conn: sqlite3.Connection) -> int:
    """The first ``grep_blocks.id`` no row has ever had."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (GREP_BLOCKS,)).fetchone()
    return 1 if row is None else int(row[0]) + 1


def write_files(conn: sqlite3.Connection, files: Sequence[TextRow]) -> None:
    """Replace the grep rows of ``files`` (inside the transaction writing their chunks,
    after every other statement of it).

    Every trigram change goes in last and together, the old rows' ``'delete'`` commands
    then the new rows by ascending rowid: SQLite's FTS5 writes its pending postings as a
    new segment whenever another statement opens a savepoint (a multi-row DELETE does)
    and whenever a rowid is not above the last one written, so trigram rows written per
    file between the other rows of a batch became a segment per file, which automerge
    then merged over and over (most of the index time the table cost). A rewritten file
    gets new blocks, with ids above every earlier one."""
    if not files:
        return
    file_ids = json.dumps([f.file_id for f in files])
    old = conn.execute(
        f"SELECT first_block, blocks FROM {GREP_TABLE} "
        "WHERE file_id IN (SELECT value FROM json_each(?)) ORDER BY first_block",
        (file_ids,),
    ).fetchall()
    _forget(conn, [(int(first), int(count)) for first, count in old])
    conn.execute(
        f"DELETE FROM {GREP_TABLE} WHERE file_id IN (SELECT value FROM json_each(?))", (file_ids,)
    )
    next_id = _next_block_id(conn)
    dictionaries: dict[bytes, int] = {}
    file_rows = []
    block_rows = []
    trigram_rows: list[tuple[int, str]] = []
    for f in files:
        starts = list(f.block_starts) or block_starts(f.text)
        blocks = blocks_of(f.text, starts)
        blobs, dictionary = f.block_blobs, f.dictionary
        if len(blobs) != len(blocks):
            blobs, dictionary = [compress(b) for b in blocks], b""
        dictionary_id = _dictionary_id(conn, dictionary, dictionaries)
        file_rows.append(
            (
                f.file_id,
                f.sha256,
                json.dumps(list(f.chunk_lines), separators=(",", ":")),
                next_id,
                len(blocks),
                json.dumps(lines_at(f.text, starts), separators=(",", ":")),
            )
        )
        for k, (block, blob) in enumerate(zip(blocks, blobs, strict=True)):
            block_rows.append((next_id + k, f.file_id, dictionary_id, blob))
            trigram_rows.append((next_id + k, block))
        next_id += len(blocks)
    conn.executemany(
        f"INSERT INTO {GREP_TABLE}(file_id, sha256, chunk_lines, first_block, blocks, "
        "block_lines) VALUES (?, ?, ?, ?, ?, ?)",
        file_rows,
    )
    conn.executemany(
        f"INSERT INTO {GREP_BLOCKS}(id, file_id, dictionary, text) VALUES (?, ?, ?, ?)",
        block_rows,
    )
    conn.executemany(f"INSERT INTO {TRIGRAM_TABLE}(rowid, text) VALUES (?, ?)", trigram_rows)


def forget_files(conn: sqlite3.Connection, paths: Sequence[str]) -> None:
    """Remove the grep rows of the files at ``paths`` (before deleting them)."""
    if not paths or not has_grep(conn):
        return
    rows = conn.execute(
        f"SELECT g.file_id, g.first_block, g.blocks FROM {GREP_TABLE} g "
        "JOIN files f ON f.id = g.file_id WHERE f.path IN (SELECT value FROM json_each(?)) "
        "ORDER BY g.first_block",
        (json.dumps(list(paths)),),
    ).fetchall()
    _forget(conn, [(int(first), int(count)) for _id, first, count in rows])
    conn.execute(
        f"DELETE FROM {GREP_TABLE} WHERE file_id IN (SELECT value FROM json_each(?))",
        (json.dumps([int(row[0]) for row in rows]),),
    )


def stale_paths(conn: sqlite3.Connection) -> set[str]:
    """Stored files without grep rows of their current content (module docstring)."""
    if not has_grep(conn):
        return set()
    rows = conn.execute(
        f"SELECT f.path FROM files f LEFT JOIN {GREP_TABLE} g ON g.file_id = f.id "
        "WHERE g.sha256 IS NOT f.sha256"
    )
    return {str(row[0]) for row in rows}


# -- reading ----------------------------------------------------------------------------


class FileBlocks(NamedTuple):
    """A candidate file: its blocks to verify, ascending ids within ``first_block`` ..
    ``first_block + block_count - 1``."""

    file_id: int
    path: str
    sha256: str
    first_block: int
    block_count: int
    blocks: Sequence[int]


def candidates(conn: sqlite3.Connection, match: str | None) -> list[FileBlocks]:
    """The files with a block whose trigrams satisfy ``match`` (an FTS5 query over
    ``grep_block_trigrams``), with those blocks; or every file with all of its blocks
    when ``match`` is None; by path."""
    if match is None:
        rows = conn.execute(
            f"SELECT g.file_id, f.path, g.sha256, g.first_block, g.blocks FROM {GREP_TABLE} g "
            "JOIN files f ON f.id = g.file_id ORDER BY f.path"
        )
        return [
            FileBlocks(file_id, path, sha256, first, count, range(first, first + count))
            for file_id, path, sha256, first, count in rows
        ]
    ids = [
        row[0]
        for row in conn.execute(
            f"SELECT rowid FROM {TRIGRAM_TABLE} WHERE {TRIGRAM_TABLE} MATCH ?", (match,)
        )
    ]
    # A block outside its file's range is left by a delete that bypassed the writer
    # (module docstring): skipped.
    rows = conn.execute(
        "SELECT g.file_id, f.path, g.sha256, g.first_block, g.blocks, b.id FROM json_each(?) j "
        f"JOIN {GREP_BLOCKS} b ON b.id = j.value JOIN {GREP_TABLE} g ON g.file_id = b.file_id "
        "JOIN files f ON f.id = g.file_id "
        "WHERE b.id >= g.first_block AND b.id < g.first_block + g.blocks "
        "ORDER BY f.path, b.id",
        (json.dumps(ids),),
    )
    found: list[FileBlocks] = []
    blocks: list[int] = []
    for file_id, path, sha256, first, count, block_id in rows:
        if not found or found[-1].file_id != file_id:
            blocks = []
            found.append(FileBlocks(file_id, path, sha256, first, count, blocks))
        blocks.append(block_id)
    return found


def placing_lines(conn: sqlite3.Connection, file_id: int) -> tuple[list[int], list[int]]:
    """The 1-based lines where a file's blocks start and where its chunks start."""
    row = conn.execute(
        f"SELECT block_lines, chunk_lines FROM {GREP_TABLE} WHERE file_id = ?", (file_id,)
    ).fetchone()
    if row is None:
        return [1], []
    return [int(n) for n in json.loads(row[0])], [int(n) for n in json.loads(row[1])]


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
