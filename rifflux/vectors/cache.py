"""An immutable snapshot of all vectors of one model at one index generation.

Rows are ordered by ``(path, chunk_index)``, so a stable best-first sort of scores is
already the contract's tie-break. The front process swaps snapshots atomically when
the index generation moves; a search holds on to the snapshot it started with.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass

import numpy as np

from rifflux.search.semantic import top_k_positions


@dataclass(frozen=True, slots=True)
class SemanticHit:
    row_id: int
    key: tuple[str, int]
    cosine: float


@dataclass(frozen=True, slots=True)
class VectorSnapshot:
    generation: int
    model: str
    matrix: np.ndarray
    row_ids: np.ndarray
    keys: list[tuple[str, int]]

    @property
    def size(self) -> int:
        return int(self.matrix.shape[0])

    def search(self, query: np.ndarray, limit: int) -> list[SemanticHit]:
        """The ``limit`` rows most similar to ``query``; [] for a zero-norm query."""
        if self.size == 0 or limit <= 0:
            return []
        norm = float(np.linalg.norm(query))
        if norm == 0.0:
            return []
        scores = self.matrix @ (np.asarray(query, dtype=np.float32) / norm)
        positions = top_k_positions(scores, limit)
        return [
            SemanticHit(int(self.row_ids[p]), self.keys[p], float(scores[p])) for p in positions
        ]


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


def load_snapshot(conn: sqlite3.Connection, generation: int, model: str) -> VectorSnapshot:
    """Read every ``model`` vector from SQLite (one query) into a normalised matrix."""
    rows = conn.execute(
        "SELECT c.id, f.path, c.chunk_index, e.dim, e.vec FROM embeddings e "
        "JOIN chunks c ON c.chunk_id = e.chunk_id JOIN files f ON f.id = c.file_id "
        "WHERE e.model = ? ORDER BY f.path, c.chunk_index",
        (model,),
    ).fetchall()
    if not rows:
        return VectorSnapshot(
            generation, model, np.zeros((0, 0), np.float32), np.zeros(0, np.int64), []
        )
    dim = int(rows[0][3])
    blob = b"".join(row[4] for row in rows if int(row[3]) == dim)
    kept = [row for row in rows if int(row[3]) == dim]
    matrix = normalize_rows(
        np.frombuffer(blob, dtype="<f4").reshape(len(kept), dim).astype(np.float32)
    )
    row_ids = np.fromiter((row[0] for row in kept), dtype=np.int64, count=len(kept))
    keys = [(str(row[1]), int(row[2])) for row in kept]
    return VectorSnapshot(generation, model, matrix, row_ids, keys)


class VectorCache:
    """Holds the current snapshot and reloads it when the generation or model moves."""

    def __init__(self) -> None:
        self._snapshot: VectorSnapshot | None = None
        self._lock = threading.Lock()

    def snapshot(self, conn: sqlite3.Connection, generation: int, model: str) -> VectorSnapshot:
        current = self._snapshot
        if current is not None and current.generation == generation and current.model == model:
            return current
        with self._lock:
            current = self._snapshot
            if current is None or current.generation != generation or current.model != model:
                current = load_snapshot(conn, generation, model)
                self._snapshot = current
            return current
