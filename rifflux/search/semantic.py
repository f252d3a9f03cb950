"""Cosine similarity and top-k selection: pure functions on NumPy arrays."""

from __future__ import annotations

import numpy as np


def cosine_scores(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosine of ``query`` with every row of ``matrix``; 0.0 where a norm is zero."""
    matrix = np.asarray(matrix, dtype=np.float32)
    query = np.asarray(query, dtype=np.float32)
    if matrix.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    query_norm = float(np.linalg.norm(query))
    if query_norm == 0.0:
        return np.zeros(matrix.shape[0], dtype=np.float32)
    row_norms = np.linalg.norm(matrix, axis=1)
    dots = matrix @ query
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = np.where(row_norms > 0, dots / (row_norms * query_norm), 0.0)
    return scores.astype(np.float32)


def top_k_positions(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` best scores, best first; equal scores by position ascending.

    ``argpartition`` finds the candidates in O(n); only those are sorted. Every row
    tied with the k-th score is kept as a candidate so the tie-break is exact.
    """
    n = scores.shape[0]
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.int64)
    if k >= n:
        candidates = np.arange(n)
    else:
        kth = np.argpartition(-scores, k - 1)[k - 1]
        candidates = np.flatnonzero(scores >= scores[kth])
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order][:k].astype(np.int64)
