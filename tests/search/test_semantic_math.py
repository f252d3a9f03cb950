import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rifflux.search.semantic import cosine_scores, top_k_positions


def test_zero_denominator_scores_zero() -> None:
    matrix = np.array([[0.0, 0.0], [1.0, 0.0]], dtype=np.float32)
    assert cosine_scores(matrix, np.array([1.0, 0.0])).tolist() == [0.0, 1.0]
    assert cosine_scores(matrix, np.zeros(2)).tolist() == [0.0, 0.0]


def test_cosine_ignores_row_length() -> None:
    matrix = np.array([[3.0, 4.0], [0.3, 0.4]], dtype=np.float32)
    scores = cosine_scores(matrix, np.array([4.0, 3.0]))
    assert np.allclose(scores, [0.96, 0.96])


def test_empty_matrix() -> None:
    assert cosine_scores(np.zeros((0, 3)), np.ones(3)).shape == (0,)
    assert top_k_positions(np.zeros(0), 5).tolist() == []


def test_top_k_breaks_ties_by_position() -> None:
    scores = np.array([0.5, 0.9, 0.5, 0.9, 0.1], dtype=np.float32)
    assert top_k_positions(scores, 3).tolist() == [1, 3, 0]
    assert top_k_positions(scores, 10).tolist() == [1, 3, 0, 2, 4]


@settings(max_examples=200)
@given(
    arrays(np.float32, st.integers(1, 60), elements=st.sampled_from([0.0, 0.25, 0.5, 1.0, -1.0])),
    st.integers(1, 70),
)
def test_top_k_equals_full_stable_sort(scores: np.ndarray, k: int) -> None:
    expected = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
    assert top_k_positions(scores, k).tolist() == expected
