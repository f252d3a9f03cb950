"""Cosine similarity: a pure function on NumPy arrays, shared by the vector cache's exact
rescoring and every semantic score a search reports."""

from __future__ import annotations

import numpy as np


def cosine_scores(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosine of ``query`` with every row of ``matrix``; 0.0 where a norm is zero.

    Computed in float64 and rounded to float32, so equal rows get equal scores wherever
    they are stored, which the (path, chunk_index) tie-break relies on.
    """
    wide = np.asarray(matrix, dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    if wide.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    q_norm = float(np.sqrt(q @ q))
    if q_norm == 0.0:
        return np.zeros(wide.shape[0], dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", wide, wide))
    dots = np.einsum("ij,j->i", wide, q)
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = np.where(norms > 0, dots / (norms * q_norm), 0.0)
    return scores.astype(np.float32)
