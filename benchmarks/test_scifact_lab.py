from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.scifact_lab import (
    Feedback,
    Lab,
    MemoEmbedder,
    max_scaled,
    minmax,
    rocchio,
    rrf_fusion,
    score_fuse,
    zscore,
)
from rifflux.config import Settings
from rifflux.embed.hashing import HashEmbedder
from rifflux.eval.runner import prepare_index
from rifflux.search.lexical import DEFAULT_OPTIONS, LexicalOptions

scores = st.lists(st.floats(-1e6, 1e6, allow_nan=False), max_size=20)


@given(scores)
def test_minmax_maps_best_to_one_and_worst_to_zero(values: list[float]) -> None:
    scaled = minmax(values)
    assert len(scaled) == len(values)
    assert all(0.0 <= s <= 1.0 for s in scaled)
    if values and max(values) > min(values):
        assert scaled[values.index(max(values))] == 1.0
        assert scaled[values.index(min(values))] == 0.0


def test_minmax_fusion_weighs_normalised_scores_by_alpha() -> None:
    lex = [(("a", 0), 12.0), (("b", 0), 8.0), (("c", 0), 2.0)]  # → 1.0, 0.6, 0.0
    sem = [(("c", 0), 0.9), (("b", 0), 0.5)]  # → 1.0, 0.0
    fused = score_fuse(lex, sem, alpha=0.25)
    assert [hit.key for hit in fused] == [("c", 0), ("a", 0), ("b", 0)]
    assert [hit.score for hit in fused] == pytest.approx([0.75, 0.25, 0.15])


def test_missing_keys_get_the_lists_lowest_normalised_score() -> None:
    lex = [(("a", 0), 3.0), (("b", 0), 1.0)]  # z-scores 1, -1
    sem = [(("b", 0), 0.5)]  # z-score 0
    fused = score_fuse(lex, sem, alpha=0.5, normalise=zscore)
    assert [(hit.key, hit.score) for hit in fused] == [(("a", 0), 0.5), (("b", 0), -0.5)]


def test_max_scaling_divides_by_the_best_score() -> None:
    assert max_scaled([4.0, 2.0, 1.0]) == [1.0, 0.5, 0.25]
    assert max_scaled([-1.0]) == [0.0]


def test_rrf_fusion_is_the_core_rrf_on_keys() -> None:
    fuse = rrf_fusion(k=60)
    assert fuse([(("a", 0), 3.0), (("b", 0), 1.0)], [(("b", 0), 0.9)]) == [("b", 0), ("a", 0)]


def test_rocchio_moves_the_query_towards_feedback_and_normalises() -> None:
    moved = rocchio(np.array([1.0, 0.0]), np.array([[0.0, 1.0], [0.0, 1.0]]), beta=1.0)
    assert moved == pytest.approx([2**-0.5, 2**-0.5])


def test_memo_embedder_embeds_each_text_once() -> None:
    calls: list[list[str]] = []
    inner = HashEmbedder(16)
    original = inner.embed_batch

    def counting(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        return original(texts)

    inner.embed_batch = counting  # type: ignore[method-assign]
    memo = MemoEmbedder(inner)
    first = memo.embed_batch(["a", "b", "a"])
    again = memo.embed_batch(["b"])
    assert calls == [["a", "b"]]
    assert np.array_equal(first[1], again[0])
    assert memo.embed_batch([]).shape == (0, 16)


def test_lab_rrf_hybrid_reproduces_the_core_hybrid(beir_dataset: Path, tmp_path: Path) -> None:
    index = prepare_index(
        beir_dataset, Settings(embedding_backend="hash"), cache_root=tmp_path / "cache"
    )
    lab = Lab(index)
    try:
        for query in ("zebra", "banana farming", "apples in the savanna"):
            assert lab.hybrid(rrf_fusion(60))(query, 6) == lab.core("hybrid")(query, 6)
        for source in ("lexical", "hybrid"):
            feedback = Feedback(beta=0.5, depth=2, source=source)
            assert len(lab.semantic(feedback)("zebra", 3)) == 3
            assert len(lab.hybrid(rrf_fusion(60), feedback=feedback)("zebra", 3)) == 3
    finally:
        lab.close()


def test_lab_lexical_options_reach_the_core_search_and_leave_the_default_alone(
    beir_dataset: Path, tmp_path: Path
) -> None:
    index = prepare_index(
        beir_dataset, Settings(embedding_backend="hash"), cache_root=tmp_path / "cache"
    )
    lab = Lab(index)
    try:
        keep = lab.with_lexical(LexicalOptions(stop_words=frozenset()))
        assert lab.with_lexical(DEFAULT_OPTIONS) is lab
        assert lab.with_lexical(LexicalOptions(stop_words=frozenset())) is keep
        # "the" is dropped by default, so only the banana document matches; kept, the
        # savanna document (the only other one saying "the") matches too.
        default_paths = lab.core("lexical")("the banana", 5)
        kept_paths = keep.core("lexical")("the banana", 5)
        assert len(default_paths) == 1
        assert kept_paths[0] == default_paths[0]
        assert len(kept_paths) == 2
        assert [k for k, _ in keep.lexical_hits("the banana", 5)] != [
            k for k, _ in lab.lexical_hits("the banana", 5)
        ]
        assert lab.core("lexical")("the banana", 5) == default_paths
        # A zero content weight leaves only heading matches with a nonzero score.
        no_content = lab.with_lexical(LexicalOptions(content_weight=0.0))
        assert all(score != 0.0 for _, score in lab.lexical_hits("zebra", 5))
        assert [score for _, score in no_content.lexical_hits("zebra", 5)] == [0.0, 0.0]
    finally:
        lab.close()
