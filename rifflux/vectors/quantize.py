"""int8 vectors and exact integer cosine scores: the same bits on every machine.

A float32 dot product's last bits depend on the order its terms are summed in, which
varies with the BLAS build, the thread count, the CPU and where a row sits in a matrix,
so two machines could order near-ties differently. Identical queries must give identical
results everywhere, so every stored row, and the query, is quantized:

* **Quantization** (:func:`~rifflux.store.vector_blobs.quantize_rows`, in the store
  because the database keeps the quantized rows): each row is scaled by
  ``127 / max |v_i|`` (taken in float64) and rounded half-to-even to int8, so its
  largest component is ±127. Scaling per row keeps ~5 more bits of precision for a
  typical MiniLM row (largest component ~0.2-0.3) than one global scale would. Cosine
  is scale-invariant, so the float row need not be normalised first. A zero row stays
  zero.
* **Exactness**: with ``|v_i| <= 127`` and ``dim <= 1040``, every partial sum of a dot
  product of two int8 rows is an integer of magnitude ``< 2**24`` (384 · 127² =
  6,193,536), which float32 represents exactly. So a float32 sum of the products is the
  exact integer under *any* summation order: the scan may use BLAS, SIMD, threads or
  segments and still gets the same bits.
* **Score** (:func:`exact_cosines`): ``dot / (sqrt(q·q) · sqrt(v·v))`` in float64 from
  the exact integers (each operation correctly rounded by IEEE 754, hence reproducible),
  rounded to float32. Equal rows get equal scores wherever they are stored; the
  (path, chunk_index) tie-break then orders them. :func:`scalar_cosine` is the same
  formula in plain Python integers, the reference the tests compare against.
* **Selection**: a scan ranks rows by ``dot · (1/|v|) · (1/|q|)`` in float32: the dot is
  exact and the two products are single correctly rounded operations, so these
  approximate scores are themselves identical everywhere. Rows within ``SCORE_MARGIN``
  of the k-th are rescored exactly (:mod:`rifflux.vectors.scan`).

The scan (:func:`integer_dots`) runs NumKong's int8 dot-product kernels on the calling
thread: they accumulate in int32, so they are exact whatever the CPU's instruction set.
What this costs and saves: docs/architecture.md, "Deterministic scores".
"""

from __future__ import annotations

import math
from typing import Any

import numkong
import numpy as np

from rifflux.store.vector_blobs import MAX_EXACT_DIM, quantize_rows

# Rows per step of squared_norms (bounds its widened temporary).
SCAN_BLOCK_ROWS = 1024


def quantize_query(query: np.ndarray) -> np.ndarray:
    """The query as one int8 row (see :func:`quantize_rows`)."""
    return quantize_rows(np.asarray(query).reshape(1, -1))[0]


def squared_norms(matrix: np.ndarray) -> np.ndarray:
    """Exact ``v·v`` of every int8 row, as int64: summed in int32 (a quarter of the
    int64 temporaries' bytes) wherever ``dim · 127²`` fits it, as it does up to
    ``MAX_EXACT_DIM``."""
    out = np.empty(matrix.shape[0], dtype=np.int64)
    fits = matrix.ndim == 2 and matrix.shape[1] <= MAX_EXACT_DIM
    wide: np.dtype[np.signedinteger[Any]] = np.dtype(np.int32 if fits else np.int64)
    for start in range(0, matrix.shape[0], SCAN_BLOCK_ROWS):
        block = np.asarray(matrix[start : start + SCAN_BLOCK_ROWS], dtype=wide)
        out[start : start + SCAN_BLOCK_ROWS] = np.einsum("ij,ij->i", block, block)
    return out


def inverse_norms(sqnorms: np.ndarray) -> np.ndarray:
    """float32 ``1/|v|`` per row (0 for a zero row): the selection scores' row factor."""
    wide = np.sqrt(np.asarray(sqnorms, dtype=np.float64))
    inv = np.divide(1.0, wide, out=np.zeros_like(wide), where=wide > 0)
    return inv.astype(np.float32)


def integer_dots(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``matrix @ query`` for int8 rows and an int8 query: exact integers, as float32.

    NumKong's int8 kernels accumulate in int32 (exact: module docstring), on the calling
    thread; the integers fit float32 exactly.
    """
    if matrix.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    rows = np.ascontiguousarray(matrix, dtype=np.int8)
    q = np.ascontiguousarray(query, dtype=np.int8).reshape(1, -1)
    dots = np.asarray(numkong.cdist(rows, q, metric="dot", threads=1))
    return dots.reshape(-1).astype(np.float32)


def exact_cosines(rows: np.ndarray, sqnorms: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The cosine of the int8 ``query`` with each int8 row, as float32 (0 at a zero norm).

    ``dot / (sqrt(q·q) · sqrt(v·v))`` from exact int64 integers, in float64.
    """
    q = np.asarray(query, dtype=np.int64)
    dots = np.asarray(rows, dtype=np.int64) @ q
    q_norm = math.sqrt(int(q @ q))
    norms = np.sqrt(np.asarray(sqnorms, dtype=np.int64).astype(np.float64))
    denominators = q_norm * norms
    scores = np.divide(
        dots.astype(np.float64),
        denominators,
        out=np.zeros(dots.shape[0], dtype=np.float64),
        where=denominators > 0,
    )
    return scores.astype(np.float32)


def scalar_cosine(row: list[int], query: list[int]) -> float:
    """:func:`exact_cosines` for one row, in plain Python integers (the test reference)."""
    dot = sum(a * b for a, b in zip(row, query, strict=True))
    denominator = math.sqrt(sum(b * b for b in query)) * math.sqrt(sum(a * a for a in row))
    return float(np.float32(dot / denominator)) if denominator > 0 else 0.0
