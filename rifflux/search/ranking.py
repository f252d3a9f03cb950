"""Ranking: lexical, semantic and hybrid search as functions over one index snapshot.

Results follow one contract in every mode: exactly ``chunk_id``, ``path``,
``heading_path``, ``chunk_index``, ``content`` and a mode-specific ``score_breakdown``.

One search, in order: filters pick the admitted chunks (``filters.py``; none:
every chunk); each side takes its candidates among them (``candidate_k``, default
``top_k × rifflux.config.CANDIDATE_MULTIPLIER``, 80 for minmax; never fewer than ``top_k``);
``min_cosine`` drops weak semantic candidates; the sides are fused (RRF with this call's
weights, minmax or maxnorm with its α); chunks holding every quoted phrase move ahead
(lexical and hybrid); ``group_by="file"`` keeps each file's best chunk (searching deeper
while fewer than ``top_k`` files came back and a side may hold more); an MCP call's
``admits`` (``served.py``: the allowed roots and the deny list) drops the chunks of files
the call may not return, searching deeper the same way while fewer than ``top_k`` remain;
then truncation to ``top_k``.

A corrupt vector cache never yields semantic results: semantic and hybrid searches
answer with the lexical results (``score_breakdown`` ``{"bm25": ...}``, so a client can
tell) and :func:`rank` returns a warning naming the damage and the repair.

Invariants: everything here reads through the :class:`~rifflux.search.snapshot.
IndexSnapshot` it is given and writes nothing; the request is already valid; the caller
guards the snapshot's connection with the ``deadline`` (SQLite work past it is
interrupted), and the Python steps call ``deadline.check`` between pieces.

The query is embedded once per search (:class:`QueryVector`), also when ``group_by``
searches deeper. A hybrid search whose embedder is costly (its last query embedding
took :data:`BESIDE_MIN_SECONDS` or more: ONNX) embeds it in a small thread pool while
the lexical half runs (ONNX and SQLite release the GIL); a cheap one (the hash
embedder's ~0.1 ms) is embedded inline, as handing it to a thread costs more. Only the
embedding moves: the snapshot's connection is used by the calling thread alone, so the
results are those of the sequential order.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rifflux.errors import CacheCorrupt, EmbeddingModelMismatch, InvalidQueryError
from rifflux.search.deadline import Deadline
from rifflux.search.filters import admitted_rows
from rifflux.search.fusion import (
    DEFAULT_MAXNORM_ALPHA,
    DEFAULT_MINMAX_ALPHA,
    maxnorm_fuse,
    minmax_fuse,
    rrf_fuse,
)
from rifflux.search.lexical import lexical_search, phrase_rows
from rifflux.search.query import query_phrases
from rifflux.search.request import SearchRequest
from rifflux.search.retrieval import chunks_by_rowids
from rifflux.search.snapshot import IndexSnapshot
from rifflux.store.fts import LexicalHit
from rifflux.store.reader import IndexReader
from rifflux.vectors.cache import SemanticHit

REPAIR_HINT = "repair it with `rifflux index --repair` (any index job also republishes it)"

MINMAX_CANDIDATE_K = 80
"""Candidates per side of a minmax search without ``candidate_k`` (the spec's value)."""
GROUP_DEEPEN = 4
"""``group_by="file"``: the factor by which the candidate depth grows while too few
files came back and a side may hold more."""


BESIDE_MIN_SECONDS = 0.002
"""A query embedding at least this slow is computed beside the lexical half (measured on
awesome-copilot, hybrid p50 with the MCP server's GIL switch interval: ONNX 13.80 →
13.39 ms beside; hash 10.60 → 11.29 ms, so the hash embedder stays inline)."""
EMBED_THREADS = 4
"""Threads that embed hybrid queries beside their lexical half (shared by all searches)."""
_embed_pool = ThreadPoolExecutor(max_workers=EMBED_THREADS, thread_name_prefix="rifflux-query")


class QueryVector:
    """One search's query embedding: computed once, on the first :meth:`get`, or beside
    the caller after :meth:`start`."""

    def __init__(self, snapshot: IndexSnapshot, query: str) -> None:
        self._embed = snapshot.embedder.embed_query
        self._query = query
        self._future: Future[np.ndarray | None] | None = None

    def start(self) -> None:
        """Embed the query in the shared pool while the caller does other work."""
        if self._future is None:
            self._future = _embed_pool.submit(self._embed, self._query)

    def get(self) -> np.ndarray | None:
        if self._future is None:
            done: Future[np.ndarray | None] = Future()
            done.set_result(self._embed(self._query))
            self._future = done
        return self._future.result()


@dataclass(frozen=True, slots=True)
class Ranked:
    """One ranked chunk before it is read: ``score`` is higher-better (−bm25 for
    lexical), ``tier`` 0 when it holds every quoted phrase of the query (or there is none)."""

    row_id: int
    key: tuple[str, int]
    score: float
    breakdown: dict[str, Any]
    tier: int = 0


def rank(
    snapshot: IndexSnapshot,
    request: SearchRequest,
    top_k: int,
    deadline: Deadline,
    restrict: np.ndarray | None = None,
    admits: Callable[[str], bool] | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """(results, warning) of ``request``: the warning is set when lexical results stand in.

    ``top_k`` replaces the request's own (evaluation depths); ``restrict``: the chunk
    rowids (sorted) searched among, as if a filter admitted them (None: every chunk);
    ``admits``: whether a file (its stored path) may be returned (None: every file)."""
    if not request.query.strip():
        return [], None
    conn = snapshot.conn
    admitted = admitted_rows(conn, request, deadline.check)
    if restrict is not None:
        admitted = restrict if admitted is None else np.intersect1d(admitted, restrict)
    if admitted is not None and admitted.shape[0] == 0:
        return [], None
    depth = candidate_depth(snapshot, request, top_k)
    query_vec = QueryVector(snapshot, request.query)
    while True:
        deadline.check()
        ranked, warning, deeper = _ranked(snapshot, request, depth, admitted, deadline, query_vec)
        fill = request.mode == "semantic" and warning is None
        if request.group_by == "file":
            ranked = best_per_file(snapshot, ranked)
        if admits is not None:
            ranked = first_admitted(ranked, admits, None if fill else top_k)
        elif request.group_by != "file":
            break
        if len(ranked) >= top_k or not deeper:
            break
        depth *= GROUP_DEEPEN
    return materialise(snapshot, ranked, top_k, fill=fill), warning


def first_admitted(
    ranked: list[Ranked], admits: Callable[[str], bool], limit: int | None
) -> list[Ranked]:
    """The first ``limit`` (None: all) of ``ranked`` whose file ``admits`` returns true
    for, in order: files past them are never asked about (each answer costs a realpath)."""
    kept: list[Ranked] = []
    for item in ranked:
        if admits(item.key[0]):
            kept.append(item)
            if len(kept) == limit:
                break
    return kept


def fusion_of(snapshot: IndexSnapshot, request: SearchRequest) -> str:
    return request.fusion or snapshot.settings.fusion


def candidate_depth(snapshot: IndexSnapshot, request: SearchRequest, top_k: int) -> int:
    """Candidates per side: ``candidate_k``, else 80 for a minmax hybrid search, else
    ``top_k × candidate_multiplier``; never fewer than ``top_k``."""
    if request.candidate_k is not None:
        return max(request.candidate_k, top_k)
    if request.mode == "hybrid" and fusion_of(snapshot, request) == "minmax":
        return max(MINMAX_CANDIDATE_K, top_k)
    return top_k * snapshot.settings.candidate_multiplier


def _ranked(
    snapshot: IndexSnapshot,
    request: SearchRequest,
    depth: int,
    admitted: np.ndarray | None,
    deadline: Deadline,
    query_vec: QueryVector | None = None,
) -> tuple[list[Ranked], str | None, bool]:
    """(ranked candidates best first, warning, whether a side may hold more)."""
    query, mode = request.query, request.mode
    query_vec = query_vec or QueryVector(snapshot, query)
    warning = None
    semantic: list[SemanticHit] = []
    lexical: list[LexicalHit] | None = None
    costly = snapshot.embedder.last_seconds >= BESIDE_MIN_SECONDS
    if mode == "hybrid" and costly and _stored_model(snapshot) is not None:
        # The lexical half runs while the query is embedded beside it.
        query_vec.start()
        lexical = lexical_search(
            snapshot.conn, query, depth, snapshot.lexical, admitted, snapshot.counts
        )
        deadline.check()
    if mode != "lexical":
        try:
            semantic = semantic_hits(
                snapshot, query, depth, admitted, deadline.check, query_vec=query_vec
            )
        except CacheCorrupt as exc:
            warning = (
                f"the vector cache is corrupt ({exc}); these are lexical results "
                f"instead of {mode} ones; {REPAIR_HINT}"
            )
            mode = "lexical"
    # A deeper search can add semantic candidates only if this one was cut at
    # ``depth`` above the threshold (hits come best first).
    deeper = len(semantic) >= depth
    if request.min_cosine is not None:
        threshold = request.min_cosine
        deeper = deeper and semantic[-1].cosine >= threshold
        semantic = [h for h in semantic if h.cosine >= threshold]
    if mode == "semantic":
        return (
            [Ranked(h.row_id, h.key, h.cosine, {"cosine": h.cosine}) for h in semantic],
            warning,
            deeper,
        )
    if lexical is None:
        deadline.check()
        lexical = lexical_search(
            snapshot.conn, query, depth, snapshot.lexical, admitted, snapshot.counts
        )
        deadline.check()
    deeper = deeper or len(lexical) >= depth
    if mode == "lexical":
        ranked = [Ranked(h.row_id, h.key, -h.bm25, {"bm25": h.bm25}) for h in lexical]
    else:
        ranked = fused(snapshot, request, lexical, semantic)
    return _phrase_tiers(snapshot, query, ranked), warning, deeper


def _phrase_tiers(snapshot: IndexSnapshot, query: str, ranked: list[Ranked]) -> list[Ranked]:
    """``ranked`` with the chunks holding every quoted phrase of ``query`` first (tier 0)."""
    phrases = query_phrases(query)
    if not phrases:
        return ranked
    holding = phrase_rows(snapshot.conn, phrases, (r.row_id for r in ranked))
    ranked = [replace(r, tier=0 if r.row_id in holding else 1) for r in ranked]
    ranked.sort(key=lambda r: r.tier)  # Stable: each tier keeps the fused order.
    return ranked


def _ranks(score: dict[str, float], fused: Any) -> dict[str, Any]:
    """A fused score's breakdown: the score, then both sides' ranks (None: not there)."""
    return {**score, "lexical_rank": fused.lexical_rank, "semantic_rank": fused.semantic_rank}


def fused(
    snapshot: IndexSnapshot,
    request: SearchRequest,
    lexical: list[LexicalHit],
    semantic: list[SemanticHit],
) -> list[Ranked]:
    """Both sides fused by the request's fusion (else ``RIFFLUX_FUSION``), best first."""
    row_by_key = {h.key: h.row_id for h in lexical}
    row_by_key.update({h.key: h.row_id for h in semantic})
    fusion = fusion_of(snapshot, request)
    if fusion in ("minmax", "maxnorm"):
        return _score_fused(snapshot, request, fusion, row_by_key, lexical, semantic)
    settings = snapshot.settings
    lexical_weight = request.lexical_weight
    if lexical_weight is None:
        lexical_weight = settings.lexical_weight
    semantic_weight = request.semantic_weight
    if semantic_weight is None:
        semantic_weight = settings.semantic_weight
    if lexical_weight == 0 and semantic_weight == 0:
        raise InvalidQueryError(
            "lexical_weight and semantic_weight must not both be 0 (with "
            "RIFFLUX_LEXICAL_WEIGHT / RIFFLUX_SEMANTIC_WEIGHT)"
        )
    return [
        Ranked(row_by_key[f.key], f.key, f.rrf, _ranks({"rrf": f.rrf}, f))
        for f in rrf_fuse(
            [h.key for h in lexical],
            [h.key for h in semantic],
            k=settings.rrf_k,
            lexical_weight=lexical_weight,
            semantic_weight=semantic_weight,
        )
    ]


def _score_fused(
    snapshot: IndexSnapshot,
    request: SearchRequest,
    fusion: str,
    row_by_key: dict[tuple[str, int], int],
    lexical: list[LexicalHit],
    semantic: list[SemanticHit],
) -> list[Ranked]:
    """Minmax or maxnorm fusion of the sides' scores with the request's α."""
    alpha = request.alpha
    if alpha is None:
        alpha = snapshot.settings.fusion_alpha
    # SQLite's bm25() is negative, lower is better: negated, higher is better.
    lex = [(h.key, -h.bm25) for h in lexical]
    sem = [(h.key, h.cosine) for h in semantic]
    if fusion == "minmax":
        return [
            Ranked(
                row_by_key[f.key],
                f.key,
                f.score,
                {
                    "minmax": f.score,
                    "lexical_norm": f.lexical_norm,
                    "semantic_norm": f.semantic_norm,
                    "lexical_rank": f.lexical_rank,
                    "semantic_rank": f.semantic_rank,
                },
            )
            for f in minmax_fuse(lex, sem, alpha=DEFAULT_MINMAX_ALPHA if alpha is None else alpha)
        ]
    return [
        Ranked(row_by_key[f.key], f.key, f.score, _ranks({"maxnorm": f.score}, f))
        for f in maxnorm_fuse(lex, sem, alpha=DEFAULT_MAXNORM_ALPHA if alpha is None else alpha)
    ]


def best_per_file(snapshot: IndexSnapshot, ranked: list[Ranked]) -> list[Ranked]:
    """Each file's best chunk (its first in ``ranked``), files ordered by tier, score,
    newer mtime, path, chunk index."""
    best: dict[str, Ranked] = {}
    for item in ranked:
        best.setdefault(item.key[0], item)
    mtimes = IndexReader(snapshot.conn).file_mtimes(best)
    return sorted(
        best.values(),
        key=lambda r: (r.tier, -r.score, -mtimes.get(r.key[0], 0), r.key),
    )


def materialise(
    snapshot: IndexSnapshot, ranked: list[Ranked], top_k: int, *, fill: bool
) -> list[dict[str, Any]]:
    """The first ``top_k`` as result dicts. A chunk deleted since it was ranked (the
    vector cache lags) is dropped; ``fill``: read every candidate, so later ones
    take its place."""
    chosen = ranked if fill else ranked[:top_k]
    rows = chunks_by_rowids(snapshot.conn, [r.row_id for r in chosen])
    present = [r for r in chosen if r.row_id in rows][:top_k]
    return [{**rows[r.row_id], "score_breakdown": r.breakdown} for r in present]


def semantic_hits(
    snapshot: IndexSnapshot,
    query: str,
    limit: int,
    admitted: np.ndarray | None = None,
    check: Callable[[], None] | None = None,
    *,
    query_vec: QueryVector | None = None,
) -> list[SemanticHit]:
    """The best ``limit`` chunks by cosine from the vector cache (none before the index
    has vectors); an embedder other than the index's is one line (reindex).
    ``query_vec``: the search's embedding of ``query`` (default: embedded here)."""
    stored = _stored_model(snapshot)
    if stored is None:
        return []
    vector = (query_vec or QueryVector(snapshot, query)).get()
    if vector is None:
        return []
    # Vector cache: memory-mapped segments, checked against the index generation.
    if check is not None:
        check()
    return snapshot.vectors.search(
        snapshot.conn, snapshot.db_path, stored, vector, limit, admitted, check
    )


def _stored_model(snapshot: IndexSnapshot) -> str | None:
    """The index's embedding model (None before it has vectors); one line (reindex)
    when the configured embedder is another."""
    stored = snapshot.stored_model()
    if stored is None:
        return None
    label = snapshot.embedder.label
    if stored != label:
        raise EmbeddingModelMismatch(
            f"the index was embedded with {stored!r} but the configured embedder is "
            f"{label!r}; reindex with `rifflux index --force PATH...`"
        )
    return stored
