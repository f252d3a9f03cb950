import math

from hypothesis import given
from hypothesis import strategies as st

from rifflux.eval.metrics import dcg, mrr_at_k, ndcg_at_k, precision_at_k, recall_at_k

docs = st.lists(st.sampled_from("abcdefghij"), unique=True, max_size=10)
grades = st.dictionaries(st.sampled_from("abcdefghij"), st.integers(0, 3), min_size=1)


def test_ndcg_uses_linear_gain_and_log2_discount() -> None:
    # Ranks 1..3 hold grades 0, 2, 1; the ideal order is 2, 1.
    qrels = {"b": 2, "c": 1, "z": 0}
    actual = 2 / math.log2(3) + 1 / math.log2(4)
    ideal = 2 / math.log2(2) + 1 / math.log2(3)
    assert math.isclose(ndcg_at_k(["a", "b", "c"], qrels, 10), actual / ideal)
    assert math.isclose(actual / ideal, 0.6697, abs_tol=1e-4)


def test_ndcg_is_cut_at_k_but_ideal_counts_all_grades_up_to_k() -> None:
    qrels = {"a": 1, "b": 1}
    assert ndcg_at_k(["x", "a", "b"], qrels, 1) == 0.0
    assert math.isclose(ndcg_at_k(["a", "x", "b"], qrels, 2), 1 / (1 + 1 / math.log2(3)))


def test_recall_counts_relevant_documents_in_the_first_k() -> None:
    qrels = {"a": 1, "b": 2, "c": 0, "d": 1}
    assert recall_at_k(["a", "c", "b", "x"], qrels, 100) == 2 / 3
    assert recall_at_k(["a", "c", "b", "x"], qrels, 2) == 1 / 3
    assert recall_at_k([], qrels, 100) == 0.0


def test_mrr_is_reciprocal_rank_of_first_relevant_within_k() -> None:
    qrels = {"c": 1, "d": 0}
    assert mrr_at_k(["d", "x", "c"], qrels, 10) == 1 / 3
    assert mrr_at_k(["d", "x", "c"], qrels, 2) == 0.0


def test_precision_is_relevant_documents_in_the_first_k_over_k() -> None:
    qrels = {"a": 1, "c": 2, "z": 1}
    assert precision_at_k(["a", "b", "c", "d"], qrels, k=4) == 0.5
    assert precision_at_k(["a", "b", "c", "d"], qrels, k=2) == 0.5
    assert precision_at_k(["a"], qrels, k=10) == 0.1  # Missing places count as misses.
    assert precision_at_k(["b"], qrels, k=0) == 0.0


def test_queries_without_relevant_documents_score_zero() -> None:
    assert ndcg_at_k(["a"], {"a": 0}) == 0.0
    assert recall_at_k(["a"], {"a": 0}) == 0.0
    assert mrr_at_k(["a"], {}) == 0.0


def test_negative_grades_count_as_zero_gain() -> None:
    assert dcg([-1, 1]) == 1 / math.log2(3)


@given(docs, grades)
def test_ndcg_is_between_zero_and_one(ranked: list[str], qrels: dict[str, int]) -> None:
    assert 0.0 <= ndcg_at_k(ranked, qrels, 10) <= 1.0 + 1e-12


@given(grades)
def test_ideal_ordering_scores_one(qrels: dict[str, int]) -> None:
    ideal = sorted((d for d in qrels if qrels[d] > 0), key=lambda d: -qrels[d])
    expected = 1.0 if ideal else 0.0
    assert math.isclose(ndcg_at_k(ideal, qrels, 10), expected)
    assert recall_at_k(ideal, qrels, 10) == expected
    assert mrr_at_k(ideal, qrels, 10) == expected


@given(docs, grades, st.integers(1, 10))
def test_recall_never_drops_as_k_grows(ranked: list[str], qrels: dict[str, int], k: int) -> None:
    assert recall_at_k(ranked, qrels, k) <= recall_at_k(ranked, qrels, k + 1)
