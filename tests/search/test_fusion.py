from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from rifflux.search.fusion import max_scaled, maxnorm_fuse, rrf_contribution, rrf_fuse

keys = st.lists(st.tuples(st.sampled_from("abcde"), st.integers(0, 5)), unique=True, max_size=12)


def test_contribution_is_weight_over_k_plus_rank() -> None:
    assert rrf_contribution(1, 60) == 1 / 61
    assert rrf_contribution(3, 10, 2.0) == 2 / 13


def test_hybrid_orders_by_rrf_not_raw_scores() -> None:
    # "b" is second in both lists and beats "a", first in only one.
    fused = rrf_fuse([("a", 0), ("b", 0)], [("c", 0), ("b", 0)], k=60)
    assert [hit.key for hit in fused] == [("b", 0), ("a", 0), ("c", 0)]
    assert fused[0].rrf == 2 / 62
    assert (fused[0].lexical_rank, fused[0].semantic_rank) == (2, 2)
    assert (fused[1].lexical_rank, fused[1].semantic_rank) == (1, None)
    assert (fused[2].lexical_rank, fused[2].semantic_rank) == (None, 1)


def test_ties_break_by_path_then_chunk_index() -> None:
    fused = rrf_fuse([("b", 1)], [("a", 2)], k=60)
    assert [hit.key for hit in fused] == [("a", 2), ("b", 1)]
    fused = rrf_fuse([("a", 3)], [("a", 1)], k=60)
    assert [hit.key for hit in fused] == [("a", 1), ("a", 3)]


def test_empty_lists() -> None:
    assert rrf_fuse([], []) == []
    only_semantic = rrf_fuse([], [("x", 0)])
    assert only_semantic[0].lexical_rank is None and only_semantic[0].rrf == 1 / 61
    only_lexical = rrf_fuse([("x", 0)], [])
    assert only_lexical[0].semantic_rank is None


def test_weights_scale_each_modality() -> None:
    fused = rrf_fuse([("a", 0)], [("b", 0)], k=60, lexical_weight=0.5, semantic_weight=2.0)
    assert [hit.key for hit in fused] == [("b", 0), ("a", 0)]
    assert fused[0].rrf == 2.0 / 61 and fused[1].rrf == 0.5 / 61


def test_k_is_configurable() -> None:
    assert rrf_fuse([("a", 0)], [], k=1)[0].rrf == 0.5


@given(keys, keys)
def test_fused_is_union_sorted_by_score_then_key(lexical: list, semantic: list) -> None:
    fused = rrf_fuse(lexical, semantic)
    assert {hit.key for hit in fused} == set(lexical) | set(semantic)
    order = [(-hit.rrf, hit.key) for hit in fused]
    assert order == sorted(order)
    for hit in fused:
        expected = 0.0
        if hit.key in lexical:
            expected += 1 / (60 + lexical.index(hit.key) + 1)
        if hit.key in semantic:
            expected += 1 / (60 + semantic.index(hit.key) + 1)
        assert abs(hit.rrf - expected) < 1e-12


@given(keys)
def test_a_chunk_in_both_lists_outranks_the_same_ranks_in_one(lexical: list) -> None:
    fused = rrf_fuse(lexical, lexical)
    assert [hit.key for hit in fused] == lexical


def test_max_scaling_divides_by_the_best_score() -> None:
    assert max_scaled([4.0, 2.0, 1.0]) == [1.0, 0.5, 0.25]
    assert max_scaled([-1.0, -2.0]) == [0.0, 0.0]
    assert max_scaled([]) == []


def test_maxnorm_weighs_scaled_scores_and_floors_missing_keys() -> None:
    # Lexical scaled: a 1.0, b 0.5; semantic scaled: b 1.0, c 0.25 (c has no lexical score:
    # it takes lexical's floor 0.5; a takes semantic's floor 0.25).
    lexical = [(("a", 0), 8.0), (("b", 0), 4.0)]
    semantic = [(("b", 0), 0.8), (("c", 0), 0.2)]
    fused = maxnorm_fuse(lexical, semantic, alpha=0.5)
    assert [(h.key, h.score) for h in fused] == [
        (("b", 0), 0.75),
        (("a", 0), 0.625),
        (("c", 0), 0.375),
    ]
    assert (fused[0].lexical_rank, fused[0].semantic_rank) == (2, 1)
    assert (fused[1].lexical_rank, fused[1].semantic_rank) == (1, None)
    assert (fused[2].lexical_rank, fused[2].semantic_rank) == (None, 2)


@given(keys, keys, st.floats(0.0, 1.0))
def test_maxnorm_keeps_every_key_once_best_first(
    lexical: list[tuple[str, int]], semantic: list[tuple[str, int]], alpha: float
) -> None:
    lex = [(key, float(len(lexical) - i)) for i, key in enumerate(lexical)]
    sem = [(key, 1.0 / (i + 1)) for i, key in enumerate(semantic)]
    fused = maxnorm_fuse(lex, sem, alpha=alpha)
    assert sorted(h.key for h in fused) == sorted(set(lexical) | set(semantic))
    assert all(a.score >= b.score for a, b in pairwise(fused))
