from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rifflux.config import Settings
from rifflux.embed.hashing import HashEmbedder
from rifflux.eval.lab import (
    Feedback,
    Lab,
    MemoEmbedder,
    lexical_variant,
    max_scaled,
    minmax,
    rocchio,
    rrf_fusion,
    score_fuse,
    zscore,
)
from rifflux.eval.runner import prepare_index
from rifflux.search import lexical

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


def test_lexical_variant_patches_the_core_and_restores_it() -> None:
    with lexical_variant(heading_weight=3.0, drop_stop_words=True):
        assert lexical.HEADING_WEIGHT == 3.0
        assert lexical.build_match_query("the role of p53") == '"role" OR "p53"'
        assert lexical.build_match_query("the of") == '"the" OR "of"'
    with lexical_variant(drop_stop_words=False):
        assert lexical.build_match_query("the p53") == '"the" OR "p53"'
    assert lexical.HEADING_WEIGHT == 1.0
    assert lexical.build_match_query("the p53") == '"p53"'


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
