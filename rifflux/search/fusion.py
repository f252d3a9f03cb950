"""Reciprocal Rank Fusion: pure ranking math on ordered lists of chunk keys.

A chunk's fused score is the sum over modalities of ``weight / (k + rank)`` with ranks
from 1. Raw scores are never mixed: BM25 and cosine live on unrelated scales.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

DEFAULT_RRF_K = 60


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
