"""Hybrid fusion: pure ranking math on ordered lists of chunk keys.

Reciprocal Rank Fusion (the default): a chunk's fused score is the sum over modalities of
``weight / (k + rank)`` with ranks from 1; raw scores are never mixed.

Min-max score fusion (``fusion="minmax"``), the Context Harness hybrid scoring spec:
keyword scores are ``−bm25`` (higher is better), each side is min-max normalised per query
(every score 1.0 when a side's max equals its min), a side that did not return a chunk
contributes 0.0, and a chunk scores ``(1 − α) · keyword + α · vector`` with α clamped to
[0, 1]. Every fused score lies in [0, 1].

Max-scaled score fusion (``RIFFLUX_FUSION=maxnorm``): each modality's scores are divided
by that query's best score, so BM25 and cosine both end at 1.0 for their best chunk, and a
chunk scores ``(1 − α) · lexical + α · semantic``. Unlike ranks, scaled scores keep how far
ahead a modality's best chunks are.

α is the **semantic** share in both score fusions (the spec's meaning). Ties order by the
key itself (Rifflux's ``(path, chunk_index)``), so equal inputs give equal orders in
every run.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

DEFAULT_RRF_K = 60
DEFAULT_MAXNORM_ALPHA = 0.5
"""maxnorm's semantic share (an even mix: the best measured on SciFact train)."""
DEFAULT_MINMAX_ALPHA = 0.6
"""minmax's semantic share: the spec's ``hybrid_alpha``."""


@dataclass(frozen=True, slots=True)
class FusedHit(Generic[K]):
    key: K
    rrf: float
    lexical_rank: int | None
    semantic_rank: int | None


def rrf_contribution(rank: int, k: int, weight: float = 1.0) -> float:
    """``weight / (k + rank)`` for a 1-based rank."""
    if rank < 1:
        raise ValueError("rank starts at 1")
    return weight / (k + rank)


def rrf_fuse(
    lexical: Sequence[K],
    semantic: Sequence[K],
    *,
    k: int = DEFAULT_RRF_K,
    lexical_weight: float = 1.0,
    semantic_weight: float = 1.0,
) -> list[FusedHit[K]]:
    """Fuse two best-first key lists. Ties order by the key itself (ascending).

    Keys must be orderable for the tie-break; Rifflux uses ``(path, chunk_index)``.
    """
    lexical_ranks = {key: rank for rank, key in enumerate(lexical, start=1)}
    semantic_ranks = {key: rank for rank, key in enumerate(semantic, start=1)}
    hits = []
    for key in lexical_ranks.keys() | semantic_ranks.keys():
        lex = lexical_ranks.get(key)
        sem = semantic_ranks.get(key)
        score = 0.0
        if lex is not None:
            score += rrf_contribution(lex, k, lexical_weight)
        if sem is not None:
            score += rrf_contribution(sem, k, semantic_weight)
        hits.append(FusedHit(key, score, lex, sem))
    hits.sort(key=lambda hit: (-hit.rrf, hit.key))
    return hits


@dataclass(frozen=True, slots=True)
class ScoreFusedHit(Generic[K]):
    key: K
    score: float
    lexical_rank: int | None
    semantic_rank: int | None


def max_scaled(scores: Sequence[float]) -> list[float]:
    """Scores divided by the best one; all 0.0 when the best is not positive."""
    best = max(scores, default=0.0)
    return [score / best for score in scores] if best > 0 else [0.0] * len(scores)


def maxnorm_fuse(
    lexical: Sequence[tuple[K, float]],
    semantic: Sequence[tuple[K, float]],
    *,
    alpha: float = DEFAULT_MAXNORM_ALPHA,
) -> list[ScoreFusedHit[K]]:
    """Fuse two best-first ``(key, score)`` lists whose higher scores are better.

    A chunk scores ``(1 − alpha) · lexical/best lexical + alpha · semantic/best semantic``
    (``alpha`` is the semantic share); a chunk missing from one list takes that list's
    lowest scaled score. Ties order by key.
    """
    sides = []
    for hits in (lexical, semantic):
        scaled = max_scaled([score for _, score in hits])
        pairs = zip((key for key, _ in hits), scaled, strict=True)
        by_key = {key: (rank, s) for rank, (key, s) in enumerate(pairs, start=1)}
        sides.append((by_key, min(scaled, default=0.0)))
    (lex, lex_floor), (sem, sem_floor) = sides
    fused = []
    for key in lex.keys() | sem.keys():
        lex_rank, lex_score = lex.get(key, (None, lex_floor))
        sem_rank, sem_score = sem.get(key, (None, sem_floor))
        score = (1.0 - alpha) * lex_score + alpha * sem_score
        fused.append(ScoreFusedHit(key, score, lex_rank, sem_rank))
    fused.sort(key=lambda hit: (-hit.score, hit.key))
    return fused


@dataclass(frozen=True, slots=True)
class MinMaxHit(Generic[K]):
    key: K
    score: float
    lexical_norm: float
    semantic_norm: float
    lexical_rank: int | None
    semantic_rank: int | None


def min_max_normalised(scores: Sequence[float]) -> list[float]:
    """``(s − min) / (max − min)`` of each score; every score 1.0 when max equals min."""
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high == low:
        return [1.0] * len(scores)
    span = high - low
    return [(score - low) / span for score in scores]


def clamp_unit(value: float) -> float:
    return min(1.0, max(0.0, value))


def minmax_fuse(
    lexical: Sequence[tuple[K, float]],
    semantic: Sequence[tuple[K, float]],
    *,
    alpha: float = DEFAULT_MINMAX_ALPHA,
) -> list[MinMaxHit[K]]:
    """Fuse two best-first ``(key, score)`` lists (higher is better) by the spec.

    ``(1 − alpha) · lexical_norm + alpha · semantic_norm``; a chunk one side did not return
    has 0.0 from it and no rank there; ``alpha`` is clamped to [0, 1]. Best first, ties by
    key. The score is clamped to [0, 1] against rounding of the weighted sum.
    """
    alpha = clamp_unit(alpha)
    sides: list[dict[K, tuple[int, float]]] = []
    for hits in (lexical, semantic):
        normed = min_max_normalised([score for _, score in hits])
        pairs = zip((key for key, _ in hits), normed, strict=True)
        sides.append({key: (rank, n) for rank, (key, n) in enumerate(pairs, start=1)})
    lex, sem = sides
    fused = []
    for key in lex.keys() | sem.keys():
        lex_rank, lex_norm = lex.get(key, (None, 0.0))
        sem_rank, sem_norm = sem.get(key, (None, 0.0))
        score = clamp_unit((1.0 - alpha) * lex_norm + alpha * sem_norm)
        fused.append(MinMaxHit(key, score, lex_norm, sem_norm, lex_rank, sem_rank))
    fused.sort(key=lambda hit: (-hit.score, hit.key))
    return fused
