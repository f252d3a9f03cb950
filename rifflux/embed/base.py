"""The one small protocol every embedder implements, and the helpers they share."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors.

    ``label`` names the model and its parameters; it is stored with every vector, so two
    embedders with the same label must give the same vectors for the same text.
    """

    label: str
    dim: int

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        """Return an array of shape ``(len(texts), dim)``, dtype float32, in input order.

        Rows have unit L2 norm, except that an embedder may return a zero row for a text
        with nothing to embed (no tokens). An empty list gives shape ``(0, dim)``.
        """
        ...


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    """Scale each row of a 2-D array to unit L2 norm, as float32; zero rows stay zero."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
