"""Ranking metrics with the BEIR / trec_eval definitions, as pure functions.

``ranked`` is a best-first list of distinct document ids; ``qrels`` maps document ids to
graded relevance (an id absent from ``qrels`` has relevance 0). A document is relevant
when its grade is above 0.

- nDCG@k: DCG = sum over ranks i = 1..k of rel_i / log2(i + 1) (linear gain, as
  pytrec_eval's ``ndcg_cut``), divided by the DCG of the ideal ordering of the query's
  positive grades.
- Recall@k: relevant documents in the first k / all relevant documents.
- MRR@k: 1 / rank of the first relevant document within the first k, else 0.
- Precision@k: relevant documents in the first k / k (trec_eval's
  ``P_k``: a ranking shorter than k counts its missing places as not relevant).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def _relevant_count(qrels: Mapping[str, int]) -> int:
    return sum(1 for grade in qrels.values() if grade > 0)


def dcg(grades: Sequence[float]) -> float:
    """Discounted cumulative gain of grades in rank order (negative grades count as 0)."""
    return sum(max(g, 0) / math.log2(rank + 1) for rank, g in enumerate(grades, start=1))


def ndcg_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """Normalised DCG of the first ``k`` documents; 0.0 when the query has no relevant one."""
    ideal = dcg(sorted((g for g in qrels.values() if g > 0), reverse=True)[:k])
    if ideal == 0.0:
        return 0.0
    return dcg([qrels.get(doc, 0) for doc in ranked[:k]]) / ideal


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 100) -> float:
    """Share of the relevant documents found in the first ``k``; 0.0 without any."""
    total = _relevant_count(qrels)
    if total == 0:
        return 0.0
    return sum(1 for doc in ranked[:k] if qrels.get(doc, 0) > 0) / total


def precision_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """Share of the first ``k`` places holding a relevant document."""
    if k <= 0:
        return 0.0
    return sum(1 for doc in ranked[:k] if qrels.get(doc, 0) > 0) / k


def mrr_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """Reciprocal rank of the first relevant document within the first ``k``, else 0.0."""
    for rank, doc in enumerate(ranked[:k], start=1):
        if qrels.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
