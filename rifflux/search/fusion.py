"""Hybrid fusion: pure ranking math on ordered lists of chunk keys.

Reciprocal Rank Fusion (the default): a chunk's fused score is the sum over modalities of
``weight / (k + rank)`` with ranks from 1; raw scores are never mixed.

Max-scaled score fusion (``RIFFLUX_FUSION=maxnorm``): each modality's scores are divided
by that query's best score, so BM25 and cosine both end at 1.0 for their best chunk, and a
chunk scores ``alpha · lexical + (1 − alpha) · semantic``. Unlike ranks, scaled scores keep
how far ahead a modality's best chunks are.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

DEFAULT_RRF_K = 60
DEFAULT_MAXNORM_ALPHA = 0.5


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

    A chunk scores ``alpha · lexical/best lexical + (1 − alpha) · semantic/best semantic``;
    a chunk missing from one list takes that list's lowest scaled score. Ties order by key.
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
        score = alpha * lex_score + (1.0 - alpha) * sem_score
        fused.append(ScoreFusedHit(key, score, lex_rank, sem_rank))
    fused.sort(key=lambda hit: (-hit.score, hit.key))
    return fused
