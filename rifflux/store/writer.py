"""Write-in-one-place stage: apply prepared batches to the index, one transaction each.

Every write bumps the index generation in the same transaction, so readers can tell
cheaply whether anything changed. Each method runs in :func:`~rifflux.store.connection.
transaction`: alone it retries on ``database is locked``/``busy`` and lands completely or
not at all; inside a caller's transaction it nests and lands with it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np

from rifflux.store.connection import transaction
from rifflux.store.reader import IndexReader
from rifflux.store.rows import PreparedBatch

InTransaction = Callable[[sqlite3.Connection], None]


@dataclass(slots=True)
class WriteStats:
    files_written: int = 0
    chunks_written: int = 0
    vectors_new: int = 0
    vectors_reused: int = 0
    # Files whose vectors could not all be found; they are marked stale for the next run.
    stale_paths: list[str] = field(default_factory=list)


def _vector_bytes(vec: np.ndarray) -> bytes:
    return np.ascontiguousarray(vec, dtype="<f4").tobytes()


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

    def apply_batch(
        self,
        batch: PreparedBatch,
        *,
        also: InTransaction | None = None,
        on_retry: Callable[[int, BaseException], None] | None = None,
    ) -> WriteStats:
        """Replace the chunks and vectors of every file in ``batch``, atomically.

        ``also`` runs inside the same transaction (job bookkeeping, idempotency marks);
        ``on_retry`` hears about every busy retry.
        """
        with self.transaction(on_retry=on_retry):
            stats = self._apply_batch_rows(batch)
            self.bump_generation()
            if also is not None:
                also(self.conn)
        return stats

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
            deleted = 0
            for path in paths:
                deleted += self.conn.execute("DELETE FROM files WHERE path = ?", (path,)).rowcount
            if deleted:
                self.bump_generation()
        return deleted

    def _apply_batch_rows(self, batch: PreparedBatch) -> WriteStats:
        conn = self.conn
        stats = WriteStats()
        needed = sorted(
            {
                chunk.embed_sha256
                for prepared in batch.files
                for chunk in prepared.chunks
                if chunk.embed_sha256 not in batch.vectors
            }
        )
        # Read reusable vectors before the old chunks (and their vectors) are deleted.
        reusable = self.vectors_by_hash(needed, batch.model, batch.dim) if needed else {}
        now = time.time()
        for prepared in batch.files:
            conn.execute(
                "INSERT INTO files(path, mtime_ns, size_bytes, sha256, indexed_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET "
                "mtime_ns = excluded.mtime_ns, size_bytes = excluded.size_bytes, "
                "sha256 = excluded.sha256, indexed_at = excluded.indexed_at",
                (prepared.rel_path, prepared.mtime_ns, prepared.size_bytes, prepared.sha256, now),
            )
            file_id = conn.execute(
                "SELECT id FROM files WHERE path = ?", (prepared.rel_path,)
            ).fetchone()[0]
            conn.execute("DELETE FROM chunks WHERE file_id = ?", (file_id,))
            missing = False
            for chunk in prepared.chunks:
                conn.execute(
                    "INSERT INTO chunks(chunk_id, file_id, chunk_index, heading_path, content, "
                    "embed_sha256) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        chunk.chunk_id,
                        file_id,
                        chunk.chunk_index,
                        chunk.heading_path,
                        chunk.content,
                        chunk.embed_sha256,
                    ),
                )
                fresh = batch.vectors.get(chunk.embed_sha256)
                if fresh is not None:
                    blob = _vector_bytes(fresh)
                    stats.vectors_new += 1
                elif chunk.embed_sha256 in reusable:
                    blob = reusable[chunk.embed_sha256]
                    stats.vectors_reused += 1
                else:
                    missing = True
                    continue
                conn.execute(
                    "INSERT INTO embeddings(chunk_id, model, dim, vec) VALUES (?, ?, ?, ?)",
                    (chunk.chunk_id, batch.model, batch.dim, blob),
                )
            if missing:
                # Forget the stored hash so the next run re-chunks and re-embeds this file.
                conn.execute("UPDATE files SET sha256 = '', mtime_ns = -1 WHERE id = ?", (file_id,))
                stats.stale_paths.append(prepared.rel_path)
            stats.files_written += 1
            stats.chunks_written += len(prepared.chunks)
        if batch.files:
            self.set_metadata("embedding_model", batch.model)
            self.set_metadata("embedding_dim", str(batch.dim))
        return stats
