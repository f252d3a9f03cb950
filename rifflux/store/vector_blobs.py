"""The stored form of a vector: its int8 row, as the vector cache scores it.

Searches score int8 rows only (rifflux.vectors.quantize): each row scaled by
``127 / max |v_i|`` (in float64) and rounded half-to-even, so its largest component is
±127. The database keeps the quantized row (1 byte a component), not the float32 one
(4 bytes), so the ``embeddings`` table is a quarter of the bytes (float32 rows take 395
MB of a 744 MB index at ~200k chunks), and the cache, hence every search result, stays
bit-identical:
quantizing an int8 row again is the identity (its peak is already 127, so each
component is multiplied by 127 and divided by 127, exactly, in float64; a zero row stays
zero).

A blob's length says its form, so rows written before, float32 little-endian
(``4 · dim`` bytes), keep working beside new int8 ones (``dim`` bytes) without a schema
change: :func:`int8_rows` quantizes the float32 ones as the cache always did.
:func:`quantize_rows` lives here, not in rifflux.vectors, because the writer (this layer)
quantizes what it stores.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

# Largest magnitude of a quantized component.
QMAX = 127
# Rows quantized per float64 pass: float64 temporaries of a whole 9,101-row matrix made a
# worker's publish peak at 88 MB.
QUANTIZE_BLOCK_ROWS = 1024
# Longest row whose int8 dot products stay exact in float32: dim · 127² < 2**24.
MAX_EXACT_DIM = (2**24 - 1) // (QMAX * QMAX)
# Bytes per component of the two stored forms.
INT8_BYTES, FLOAT32_BYTES = 1, 4


def quantize_rows(matrix: np.ndarray) -> np.ndarray:
    """int8 rows, each scaled so its largest component is ±127 (zero rows stay zero)."""
    matrix = np.asarray(matrix)
    if matrix.ndim != 2:
        raise ValueError(f"expected a 2-d matrix, got shape {matrix.shape}")
    if matrix.shape[1] > MAX_EXACT_DIM:
        raise ValueError(f"dimension {matrix.shape[1]} exceeds {MAX_EXACT_DIM}")
    out = np.empty(matrix.shape, dtype=np.int8)
    for start in range(0, matrix.shape[0], QUANTIZE_BLOCK_ROWS):
        wide = np.asarray(matrix[start : start + QUANTIZE_BLOCK_ROWS], dtype=np.float64)
        peak = np.max(np.abs(wide), axis=1, initial=0.0)[:, None]
        scaled = np.divide(wide * QMAX, peak, out=np.zeros_like(wide), where=peak > 0)
        out[start : start + QUANTIZE_BLOCK_ROWS] = np.clip(np.rint(scaled), -QMAX, QMAX)
    return out


def encode_rows(vectors: Sequence[np.ndarray] | np.ndarray) -> list[bytes]:
    """The stored blob of each vector (or of each row of a matrix, which is not split into
    vectors first): its float32 value quantized, one byte a component.

    Cast to float32 first, as the float32 blob was, so the int8 row is the one the cache
    got from the float32 blob before."""
    if len(vectors) == 0:
        return []
    if isinstance(vectors, np.ndarray):
        matrix = np.asarray(vectors, dtype="<f4")
    else:
        matrix = np.stack([np.asarray(v, dtype="<f4").reshape(-1) for v in vectors])
    return [row.tobytes() for row in quantize_rows(matrix)]


def encode_vectors(vectors: Mapping[str, np.ndarray]) -> dict[str, bytes]:
    """:func:`encode_rows` of a mapping's vectors, under the same keys (embed hashes)."""
    return dict(zip(vectors, encode_rows(list(vectors.values())), strict=True))


def encode_matrix(keys: Sequence[str], matrix: np.ndarray) -> dict[str, bytes]:
    """:func:`encode_rows` of a matrix's rows, under ``keys`` (one a row): an embedder's
    output quantized whole, not split into a vector per text first."""
    return dict(zip(keys, encode_rows(matrix), strict=True))


def compact(blob: bytes, dim: int) -> bytes:
    """``blob`` in the int8 form (a float32 blob quantized; an int8 one as it is)."""
    if len(blob) == dim * INT8_BYTES:
        return bytes(blob)
    return quantize_rows(_float_rows([blob], dim)).tobytes()


def int8_rows(blobs: Iterable[tuple[int, bytes]], rows: int, dim: int) -> np.ndarray:
    """An int8 ``[rows, dim]`` matrix with each ``(row, blob)`` at its row: int8 blobs as
    stored, float32 blobs quantized. Rows without a blob are left unset.

    Holds the blobs it is given until the end (a publish gives one block of
    ``READ_BLOCK_ROWS``, rifflux.vectors.publish)."""
    out = np.empty((rows, dim), dtype=np.int8)
    int8_at: list[int] = []
    int8_blobs: list[bytes] = []
    float_at: list[int] = []
    float_blobs: list[bytes] = []
    width = dim * INT8_BYTES
    for row, blob in blobs:
        if len(blob) == width:
            int8_at.append(row)
            int8_blobs.append(blob)
        else:
            float_at.append(row)
            float_blobs.append(blob)
    if int8_blobs:
        # One copy of the joined blobs, not one small array a row.
        joined = np.frombuffer(b"".join(int8_blobs), dtype=np.int8)
        out[int8_at] = joined.reshape(len(int8_at), dim)
    if float_blobs:
        out[float_at] = quantize_rows(_float_rows(float_blobs, dim))
    return out


def float_row(blob: bytes, dim: int) -> np.ndarray:
    """The vector of one blob as float32: the float32 row, or the int8 row's integers
    (the same direction up to quantization; cosines ignore the scale)."""
    if len(blob) == dim * INT8_BYTES:
        return np.frombuffer(blob, dtype=np.int8, count=dim).astype(np.float32)
    row: np.ndarray = _float_rows([blob], dim)[0]
    return row


def _float_rows(blobs: Sequence[bytes], dim: int) -> np.ndarray:
    for blob in blobs:
        if len(blob) != dim * FLOAT32_BYTES:
            raise ValueError(
                f"a stored vector has {len(blob)} bytes, not {dim} (int8) or "
                f"{dim * FLOAT32_BYTES} (float32) for dimension {dim}: the index is damaged, "
                "rebuild it with `rifflux index --force`"
            )
    return np.stack([np.frombuffer(blob, dtype="<f4", count=dim) for blob in blobs])
