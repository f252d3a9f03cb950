"""Write-in-one-place stage: apply prepared batches to the index, one transaction each.

Every write bumps the index generation in the same transaction, so readers can tell
cheaply whether anything changed. Each function is retried as a whole on
``database is locked``/``busy``; a transaction either lands completely or not at all.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from rifflux.index.changes import Decision
from rifflux.index.prepare import PreparedBatch
from rifflux.store.connection import retry_on_busy, write_transaction

InTransaction = Callable[[sqlite3.Connection], None]


@dataclass(slots=True)
class WriteStats:
    files_written: int = 0
    chunks_written: int = 0
    vectors_new: int = 0
    vectors_reused: int = 0
    # Files whose vectors could not all be found; they are marked stale for the next run.
    stale_paths: list[str] = field(default_factory=list)


def bump_generation(conn: sqlite3.Connection) -> int:
    conn.execute(
        "UPDATE index_metadata SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'"
    )
    return current_generation(conn)


def current_generation(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM index_metadata WHERE key = 'generation'").fetchone()
    return int(row["value"]) if row else 0


def set_metadata(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO index_metadata(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def get_metadata(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM index_metadata WHERE key = ?", (key,)).fetchone()
    return str(row["value"]) if row else None


def known_vector_hashes(conn: sqlite3.Connection, paths: Iterable[str], model: str) -> set[str]:
    """Embed hashes of the stored chunks of ``paths`` that have a ``model`` vector."""
    hashes: set[str] = set()
    path_list = list(paths)
    for start in range(0, len(path_list), 500):
        part = path_list[start : start + 500]
        marks = ",".join("?" * len(part))
        rows = conn.execute(
            "SELECT DISTINCT c.embed_sha256 FROM files f "
            "JOIN chunks c ON c.file_id = f.id "
            "JOIN embeddings e ON e.chunk_id = c.chunk_id "
            f"WHERE e.model = ? AND f.path IN ({marks})",
            (model, *part),
        )
        hashes.update(row[0] for row in rows)
    return hashes


def _stored_vectors(
    conn: sqlite3.Connection, hashes: Sequence[str], model: str, dim: int
) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for start in range(0, len(hashes), 500):
        part = hashes[start : start + 500]
        marks = ",".join("?" * len(part))
        rows = conn.execute(
            "SELECT c.embed_sha256, e.vec FROM chunks c "
            "JOIN embeddings e ON e.chunk_id = c.chunk_id "
            f"WHERE e.model = ? AND e.dim = ? AND c.embed_sha256 IN ({marks})",
            (model, dim, *part),
        )
        for key, vec in rows:
            found.setdefault(key, vec)
    return found


def _vector_bytes(vec: np.ndarray) -> bytes:
    return np.ascontiguousarray(vec, dtype="<f4").tobytes()


def _apply_batch_rows(conn: sqlite3.Connection, batch: PreparedBatch) -> WriteStats:
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
    reusable = _stored_vectors(conn, needed, batch.model, batch.dim) if needed else {}
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
        set_metadata(conn, "embedding_model", batch.model)
        set_metadata(conn, "embedding_dim", str(batch.dim))
    return stats


def apply_batch(
    conn: sqlite3.Connection,
    batch: PreparedBatch,
    *,
    also: InTransaction | None = None,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> WriteStats:
    """Replace the chunks and vectors of every file in ``batch``, atomically.

    ``also`` runs inside the same transaction (job bookkeeping, idempotency marks);
    ``on_retry`` hears about every busy retry.
    """

    def run() -> WriteStats:
        with write_transaction(conn):
            stats = _apply_batch_rows(conn, batch)
            bump_generation(conn)
            if also is not None:
                also(conn)
        return stats

    return retry_on_busy(run, on_retry=on_retry)


def apply_metadata_updates(conn: sqlite3.Connection, decisions: Sequence[Decision]) -> int:
    """Refresh mtime/size of files whose content hash did not change."""
    updates = [(d.mtime_ns, d.size_bytes, d.rel_path) for d in decisions if d.kind == "metadata"]
    if not updates:
        return 0

    def run() -> None:
        with write_transaction(conn):
            conn.executemany(
                "UPDATE files SET mtime_ns = ?, size_bytes = ? WHERE path = ?", updates
            )

    retry_on_busy(run)
    return len(updates)


def delete_file_rows(conn: sqlite3.Connection, paths: Sequence[str]) -> int:
    """Delete files with their chunks, FTS entries and vectors (inside a transaction)."""
    deleted = 0
    for path in paths:
        deleted += conn.execute("DELETE FROM files WHERE path = ?", (path,)).rowcount
    if deleted:
        bump_generation(conn)
    return deleted


def delete_files(conn: sqlite3.Connection, paths: Sequence[str]) -> int:
    """Delete files with their chunks, FTS entries and vectors, in one transaction."""

    def run() -> int:
        with write_transaction(conn):
            return delete_file_rows(conn, paths)

    return retry_on_busy(run)
