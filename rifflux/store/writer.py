"""Write-in-one-place stage: the rows of chunked files, then their vectors.

A batch lands in two phases, each in its own transaction: ``write_rows`` (files, chunks and
so their FTS rows, plus vectors reused by text hash) makes it keyword-searchable at once;
``write_vectors`` attaches new vectors later, by text hash, to chunks that still lack one.

Every write bumps the index generation in the same transaction, so readers can tell
cheaply whether anything changed. Each method runs in :func:`~rifflux.store.connection.
transaction`: alone it retries on ``database is locked``/``busy`` and lands completely or
not at all; inside a caller's transaction it nests and lands with it.

A batch's rows reach each FTS5 table in few statements and in rowid order. FTS5 writes
its pending postings as a new segment at the start of every statement of a transaction
that opens a savepoint (a multi-row write, or a write through a trigger that may fail
halfway: the files upsert, the chunk inserts and deletes) and whenever a write's rowid
is not above the last one: one statement per chunk or per file would leave a segment
per chunk or per file for automerge to merge again. So one statement deletes every old
chunk of the batch's files (ascending rowids), multi-row inserts of up to
``CHUNKS_PER_STATEMENT`` chunks add the new ones, multi-row upserts of up to
``FILES_PER_STATEMENT`` files add their paths (``files_fts``), and the batch's about and
CJK rows go in by ascending rowid (rifflux.store.knowledge, rifflux.store.cjk): a batch
leaves one or two segments per table.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np

from rifflux.store import cjk, grep_text, knowledge
from rifflux.store.connection import transaction
from rifflux.store.reader import INDEXED_ROOTS_KEY, IndexReader
from rifflux.store.rows import PreparedFile
from rifflux.store.vector_blobs import compact, encode_vectors


@dataclass(slots=True)
class RowsStats:
    files_written: int = 0
    chunks_written: int = 0
    vectors_reused: int = 0


# The chunks of the listed files (a JSON list of file ids), deleted in rowid order.
_DELETE_CHUNKS_OF_FILES = (
    "DELETE FROM chunks WHERE id IN (SELECT id FROM chunks WHERE file_id IN "
    "(SELECT value FROM json_each(?)) ORDER BY id)"
)


# Files upserted per statement (5 bound values each, well under SQLite's 32,766). RETURNING
# names each row's path: SQLite does not promise the order of the rows it returns.
FILES_PER_STATEMENT = 1_000
_UPSERT_FILES = (
    "INSERT INTO files(path, mtime_ns, size_bytes, sha256, indexed_at) VALUES {values} "
    "ON CONFLICT(path) DO UPDATE SET mtime_ns = excluded.mtime_ns, "
    "size_bytes = excluded.size_bytes, sha256 = excluded.sha256, "
    "indexed_at = excluded.indexed_at RETURNING path, id"
)


# Chunks inserted per statement (7 bound values each, well under SQLite's 32,766).
CHUNKS_PER_STATEMENT = 1_000
_INSERT_CHUNKS = (
    "INSERT INTO chunks(chunk_id, file_id, chunk_index, heading_path, content, "
    "embed_sha256, headings) VALUES "
)
_CHUNK_VALUES = "(?, ?, ?, ?, ?, ?, ?)"


# Vectors attached per statement (2 bound values each). One statement per vector made
# SQLite journal, for each, the pages it changed that the batch's transaction had changed
# already (a statement that may fail halfway is undone from that journal): ~6 pages a
# vector, 15k vectors a full awesome-copilot job; one statement journals a page once.
VECTORS_PER_STATEMENT = 500
# The (hash, vector) rows in their given order, each attached to the chunks of that text
# hash without a vector, in rowid order: the rows one statement per vector inserted, in
# the same order (CROSS JOIN keeps the VALUES outermost). No two hashes share a chunk.
_INSERT_VECTORS = (
    "INSERT INTO embeddings(chunk_id, model, dim, vec) "
    "SELECT c.chunk_id, ?1, ?2, v.column2 FROM (VALUES {values}) AS v "
    "CROSS JOIN chunks c ON c.embed_sha256 = v.column1 "
    "WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.chunk_id = c.chunk_id)"
)


class IndexWriter(IndexReader):
    """The writes to the index tables, over a writable connection."""

    def transaction(
        self, *, on_retry: Callable[[int, BaseException], None] | None = None
    ) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self.conn, on_retry=on_retry)

    def bump_generation(self) -> int:
        self.conn.execute(
            "UPDATE index_metadata SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'"
        )
        return self.generation()

    def set_metadata(self, key: str, value: str) -> None:
        with self.transaction():
            self.conn.execute(
                "INSERT INTO index_metadata(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def set_metadata_if_absent(self, key: str, value: str) -> str:
        """The stored value of ``key``, set to ``value`` first if it has none."""
        with self.transaction():
            existing = self.metadata(key)
            if existing:
                return existing
            self.set_metadata(key, value)
            return value

    def write_rows(self, files: Sequence[PreparedFile], model: str) -> RowsStats:
        """Replace the chunks (and so the FTS rows) of every file in ``files``, its
        knowledge rows (front matter fields, kind, tags, error pairs) and its grep rows
        (whole text and trigrams, rifflux.store.grep_text).

        The lexical phase: call inside a transaction. A chunk whose embedded text already
        has a ``model`` vector anywhere in the index gets a copy of it here; every other
        chunk is left without a vector (deleting the old chunk took its old vector), so
        no chunk ever carries a vector of other text. The vector phase fills them in.
        """
        conn = self.conn
        stats = RowsStats()
        hashes = sorted({chunk.embed_sha256 for f in files for chunk in f.chunks})
        # Read reusable vectors before the old chunks (and their vectors) are deleted.
        # A float32 row of an older index is copied as its int8 row (vector_blobs).
        reusable = {
            key: (dim, compact(blob, dim))
            for key, (dim, blob) in (self.reusable_vectors(hashes, model) if hashes else {}).items()
        }
        file_ids = self._upsert_files(files, time.time())
        # Every old chunk first, by rowid, then every new one, in few statements: FTS5
        # writes its pending postings as a new segment at each statement of a transaction
        # and whenever a rowid is not above the last one written (module docstring).
        conn.execute(_DELETE_CHUNKS_OF_FILES, (json.dumps(file_ids),))
        rows = [
            (
                c.chunk_id,
                file_id,
                c.chunk_index,
                c.heading_path,
                c.content,
                c.embed_sha256,
                c.headings,
            )
            for file_id, prepared in zip(file_ids, files, strict=True)
            for c in prepared.chunks
        ]
        for start in range(0, len(rows), CHUNKS_PER_STATEMENT):
            part = rows[start : start + CHUNKS_PER_STATEMENT]
            conn.execute(
                _INSERT_CHUNKS + ", ".join([_CHUNK_VALUES] * len(part)),
                [value for row in part for value in row],
            )
        written = list(zip(file_ids, files, strict=True))
        knowledge.write_files(
            conn, [(file_id, f.knowledge) for file_id, f in written if f.knowledge is not None]
        )
        # Most files have no CJK text: one regex scan per chunk, and no read back.
        with_cjk = [
            file_id
            for file_id, f in written
            if any(cjk.chunk_has_cjk(c.heading_path, c.content) for c in f.chunks)
        ]
        if with_cjk:
            cjk.write_side_rows(conn, with_cjk)
        reused = [
            (c.chunk_id, model, *reusable[c.embed_sha256])
            for f in files
            for c in f.chunks
            if c.embed_sha256 in reusable
        ]
        if reused:
            conn.executemany(
                "INSERT INTO embeddings(chunk_id, model, dim, vec) VALUES (?, ?, ?, ?)", reused
            )
        stats.vectors_reused = len(reused)
        stats.files_written = len(files)
        stats.chunks_written = len(rows)
        with_text = grep_text.has_grep(conn)
        text_rows = [
            grep_text.TextRow(
                file_id,
                f.sha256,
                f.text,
                f.chunk_lines,
                f.block_starts,
                f.block_blobs,
                f.dictionary,
            )
            for file_id, f in written
            if with_text and f.text is not None
        ]
        if reusable:
            self._record_model(model, next(iter(reusable.values()))[0])
        self.bump_generation()
        grep_text.write_files(conn, text_rows)  # last: its FTS5 rows in one segment
        return stats

    def _upsert_files(self, files: Sequence[PreparedFile], now: float) -> list[int]:
        """Insert or update the ``files`` rows of ``files``, in order; their ids."""
        ids: dict[str, int] = {}
        for start in range(0, len(files), FILES_PER_STATEMENT):
            part = files[start : start + FILES_PER_STATEMENT]
            returned = self.conn.execute(
                _UPSERT_FILES.format(values=", ".join(["(?, ?, ?, ?, ?)"] * len(part))),
                [
                    value
                    for f in part
                    for value in (f.rel_path, f.mtime_ns, f.size_bytes, f.sha256, now)
                ],
            ).fetchall()
            ids.update((str(path), int(file_id)) for path, file_id in returned)
        return [ids[f.rel_path] for f in files]

    def write_vectors(self, model: str, dim: int, vectors: Mapping[str, np.ndarray]) -> int:
        """Attach each vector to the chunks whose embedded text has its hash and that have
        no vector yet; the number of chunks that got one. Call inside a transaction.

        Keyed by the text's sha256, a vector can only land on a chunk of exactly the text
        it was computed from: a chunk rewritten since (another job) no longer matches and
        keeps waiting for its own vector. Each is stored as its int8 row
        (rifflux.store.vector_blobs), what the vector cache scores.
        """
        return self.write_blobs(model, dim, encode_vectors(vectors))

    def write_blobs(self, model: str, dim: int, blobs: Mapping[str, bytes]) -> int:
        """:meth:`write_vectors` with the vectors already in their stored form
        (:func:`~rifflux.store.vector_blobs.encode_rows`): a caller that holds the write
        lock only for the insert encodes them before taking it."""
        if not blobs:
            return 0
        items = list(blobs.items())
        limit = self.conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) - 2
        size = max(1, min(VECTORS_PER_STATEMENT, limit // 2))
        added = 0
        for start in range(0, len(items), size):
            part = items[start : start + size]
            cursor = self.conn.execute(
                _INSERT_VECTORS.format(values=", ".join(["(?, ?)"] * len(part))),
                [model, dim, *(value for key, blob in part for value in (key, blob))],
            )
            added += max(cursor.rowcount, 0)
        if added:
            self._record_model(model, dim)
            self.bump_generation()
        return added

    def add_indexed_roots(self, roots: Sequence[str]) -> None:
        """Remember the stored-path prefixes jobs have indexed (``index_status`` counts
        files, chunks and vectors per root)."""
        known = json.loads(self.metadata(INDEXED_ROOTS_KEY) or "[]")
        merged = sorted(set(known) | set(roots))
        if merged != known:
            self.set_metadata(INDEXED_ROOTS_KEY, json.dumps(merged))

    def _record_model(self, model: str, dim: int) -> None:
        if self.metadata("embedding_model") != model:
            self.set_metadata("embedding_model", model)
        if self.metadata("embedding_dim") != str(dim):
            self.set_metadata("embedding_dim", str(dim))

    def update_file_stats(self, updates: Sequence[tuple[int, int, str]]) -> int:
        """Refresh (mtime_ns, size_bytes) of files, by path, whose content did not change."""
        if not updates:
            return 0
        with self.transaction():
            self.conn.executemany(
                "UPDATE files SET mtime_ns = ?, size_bytes = ? WHERE path = ?", updates
            )
        return len(updates)

    def delete_files(self, paths: Sequence[str]) -> int:
        """Delete files with their chunks, FTS entries and vectors, in one transaction."""
        with self.transaction():
            grep_text.forget_files(self.conn, paths)
            deleted = 0
            for path in paths:
                deleted += self.conn.execute("DELETE FROM files WHERE path = ?", (path,)).rowcount
            if deleted:
                self.bump_generation()
        return deleted
