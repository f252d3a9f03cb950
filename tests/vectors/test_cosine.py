import numpy as np

from rifflux.vectors.cosine import cosine_scores


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
