import numpy as np

from rifflux.vectors import segments
from rifflux.vectors.segments import normalize_rows


def whole_matrix_reference(matrix: np.ndarray) -> np.ndarray:
    """The one-pass float64 normalisation that blocks replaced."""
    wide = np.asarray(matrix, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", wide, wide))[:, None]
    return np.divide(wide, norms, out=np.zeros_like(wide), where=norms > 0).astype(np.float32)


def test_normalize_rows_in_blocks_is_bit_identical_to_one_pass(monkeypatch):
    rows = np.random.default_rng(3).normal(size=(2_500, 384)).astype(np.float32)
    rows[[0, 1_500]] = 0.0
    monkeypatch.setattr(segments, "NORMALIZE_BLOCK_ROWS", 1_000)
    blocked = normalize_rows(rows)
    assert blocked.dtype == np.float32
    np.testing.assert_array_equal(blocked, whole_matrix_reference(rows))
    assert not blocked[[0, 1_500]].any()


def test_normalize_rows_keeps_an_empty_matrix_empty():
    assert normalize_rows(np.zeros((0, 384), dtype=np.float32)).shape == (0, 384)
