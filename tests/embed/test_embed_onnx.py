import numpy as np
import pytest

from rifflux.embed import Embedder, OnnxEmbedder

LONG = "Rifflux indexes markdown files and serves hybrid search over MCP. " * 40
SHORT = "Install on Linux."
MEDIUM = "The worker embeds chunks in batches and writes the vectors to SQLite."


@pytest.fixture(scope="module")
def embedder() -> OnnxEmbedder:
    # batch_size 2: three texts make two length-sorted batches.
    return OnnxEmbedder(batch_size=2)


def test_onnx_label_and_dim_are_known_without_loading_the_model():
    embedder = OnnxEmbedder()
    assert isinstance(embedder, Embedder)
    assert (embedder.label, embedder.dim) == ("onnx:all-MiniLM-L6-v2-int8", 384)


def test_onnx_empty_list_gives_zero_rows():
    assert OnnxEmbedder().embed_batch([]).shape == (0, 384)


@pytest.mark.slow
def test_onnx_rows_are_unit_norm_float32_and_deterministic(embedder):
    first = embedder.embed_batch([SHORT, MEDIUM, ""])
    second = embedder.embed_batch([SHORT, MEDIUM, ""])
    assert first.shape == (3, 384)
    assert first.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(first, second)


@pytest.mark.slow
def test_onnx_restores_input_order_after_sorting_by_length(embedder):
    together = embedder.embed_batch([LONG, SHORT, MEDIUM])
    alone = np.vstack([embedder.embed_batch([text]) for text in (LONG, SHORT, MEDIUM)])
    np.testing.assert_allclose(together, alone, atol=1e-5)


@pytest.mark.slow
def test_onnx_truncates_text_longer_than_max_tokens(embedder):
    assert embedder.count_tokens([LONG * 3, SHORT]) == [256, 6]
    (vector,) = embedder.embed_batch([LONG * 3])
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.slow
def test_onnx_scores_paraphrase_above_unrelated_text(embedder):
    question, paraphrase, unrelated = embedder.embed_batch(
        [
            "How do I install the package on Linux?",
            "Installing the library on a Linux machine",
            "The recipe needs two eggs and flour",
        ]
    )
    assert question @ paraphrase > 0.5
    assert question @ paraphrase > question @ unrelated + 0.3
