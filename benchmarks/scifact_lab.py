"""Retrieval experiments on a cached eval index: a lever is measured here (the fusions of
``benchmarks.scifact_fusion_grid``) before it becomes a default. It lives beside the
benchmarks, not in the package: nothing in ``rifflux`` uses it.

Every experiment runs the real search code with one thing changed, passed as a parameter,
never patched on a module. bm25() column weights and query stop words are a
:class:`~rifflux.search.lexical.LexicalOptions` given to the core's ``SearchService``
(:meth:`Lab.with_lexical`). Fusions (the core's RRF with other parameters; min-max, z-score and
max-scaled score fusion) and vector pseudo-relevance feedback are pure functions applied
to the same candidate lists the core fuses, fetched through the core's ``SearchService``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from rifflux.embed.base import Embedder, l2_normalise
from rifflux.eval.runner import ChunkSearch, EvalIndex
from rifflux.search.fusion import min_max_normalised, rrf_fuse
from rifflux.search.lexical import DEFAULT_OPTIONS, LexicalOptions, lexical_search
from rifflux.search.service import SearchService
from rifflux.store.reader import IndexReader
from rifflux.store.vector_blobs import float_row
from rifflux.vectors.cache import VectorCache

Hit = tuple[tuple[str, int], float]
"""A chunk key ``(path, chunk_index)`` and a higher-is-better score."""


class MemoEmbedder:
    """Wraps an embedder and remembers each text's vector (queries repeat across runs)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.label = inner.label
        self.dim = inner.dim
        self._memo: dict[str, np.ndarray] = {}

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            for text, vec in zip(missing, self.inner.embed_batch(missing), strict=True):
                self._memo[text] = vec
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._memo[t] for t in texts])

    @contextmanager
    def substitute(self, text: str, vector: np.ndarray) -> Iterator[None]:
        """Within the block, ``text`` embeds as ``vector``."""
        saved = self._memo.get(text)
        self._memo[text] = np.asarray(vector, np.float32)
        try:
            yield
        finally:
            if saved is None:
                del self._memo[text]
            else:
                self._memo[text] = saved


minmax = min_max_normalised
"""Scores rescaled to [0, 1] over the list (all 1.0 when they are equal): the core's."""


def zscore(scores: Sequence[float]) -> list[float]:
    """Scores as standard deviations from their mean over the list (0.0 when all equal)."""
    if not scores:
        return []
    mu = sum(scores) / len(scores)
    sd = (sum((s - mu) ** 2 for s in scores) / len(scores)) ** 0.5
    return [(s - mu) / sd if sd > 0 else 0.0 for s in scores]


def max_scaled(scores: Sequence[float]) -> list[float]:
    """Scores divided by the best one (no dependence on how deep the list goes)."""
    if not scores:
        return []
    high = max(scores)
    return [s / high for s in scores] if high > 0 else [0.0] * len(scores)


Normaliser = Callable[[Sequence[float]], list[float]]


@dataclass(frozen=True, slots=True)
class ScoredKey:
    """A fused chunk key and its fused score."""

    key: tuple[str, int]
    score: float


def score_fuse(
    lexical_hits: Sequence[Hit],
    semantic_hits: Sequence[Hit],
    *,
    alpha: float,
    normalise: Normaliser = minmax,
) -> list[ScoredKey]:
    """``alpha`` · norm(lexical) + (1 − alpha) · norm(semantic); higher is better.

    Inputs are (key, score) best-first with higher-is-better scores (negate SQLite's
    bm25()). A key missing from one list gets that list's lowest normalised score (0 for
    min-max). Ties order by key.
    """
    parts = []
    for hits, weight in ((lexical_hits, alpha), (semantic_hits, 1.0 - alpha)):
        normed = normalise([score for _, score in hits])
        floor = min(normed, default=0.0)
        parts.append((weight, floor, dict(zip((key for key, _ in hits), normed, strict=True))))
    keys = {key for _, _, scores in parts for key in scores}
    ranked = [
        ScoredKey(key, sum(w * scores.get(key, floor) for w, floor, scores in parts))
        for key in keys
    ]
    ranked.sort(key=lambda hit: (-hit.score, hit.key))
    return ranked


def rocchio(query: np.ndarray, feedback: np.ndarray, beta: float) -> np.ndarray:
    """``query + beta · mean(feedback rows)``, L2-normalised (vector pseudo-relevance)."""
    moved = np.asarray(query, np.float32) + beta * feedback.mean(axis=0)
    norm = float(np.linalg.norm(moved))
    return moved / norm if norm > 0 else moved


Fusion = Callable[[Sequence[Hit], Sequence[Hit]], list[tuple[str, int]]]
"""Lexical and semantic candidates, best first → fused chunk keys, best first."""


def rrf_fusion(k: int = 60, lexical_weight: float = 1.0, semantic_weight: float = 1.0) -> Fusion:
    """The core's RRF (:func:`rifflux.search.fusion.rrf_fuse`) as a :data:`Fusion`."""

    def fuse(lex: Sequence[Hit], sem: Sequence[Hit]) -> list[tuple[str, int]]:
        fused = rrf_fuse(
            [key for key, _ in lex],
            [key for key, _ in sem],
            k=k,
            lexical_weight=lexical_weight,
            semantic_weight=semantic_weight,
        )
        return [hit.key for hit in fused]

    return fuse


def score_fusion(alpha: float, normalise: Normaliser = minmax) -> Fusion:
    """:func:`score_fuse` as a :data:`Fusion`."""

    def fuse(lex: Sequence[Hit], sem: Sequence[Hit]) -> list[tuple[str, int]]:
        return [hit.key for hit in score_fuse(lex, sem, alpha=alpha, normalise=normalise)]

    return fuse


@dataclass(frozen=True, slots=True)
class Feedback:
    """Vector pseudo-relevance feedback: move the query towards its first-pass top chunks."""

    beta: float
    depth: int
    source: str = "hybrid"  # the first pass: "lexical" or "hybrid" (the same fusion)


class Lab:
    """Chunk searches over one eval index: the core's, and variants of its hybrid.

    A lab searches with one set of :class:`LexicalOptions`; :meth:`with_lexical` gives
    the lab for another set, sharing the embedder, the vector cache and the remembered
    candidates (lexical ones are keyed by their options).
    """

    def __init__(self, index: EvalIndex, lexical: LexicalOptions = DEFAULT_OPTIONS) -> None:
        self.index = index
        self.lexical = lexical
        self.embedder = MemoEmbedder(index.embedder)
        self.vectors = VectorCache()
        self.service = self._service(lexical)
        # Candidate lists are reused across fusion experiments: (depth asked, hits).
        self._lexical_memo: dict[tuple[LexicalOptions, str], tuple[int, list[Hit]]] = {}
        self._semantic_memo: dict[str, list[Hit]] = {}
        self._labs: dict[LexicalOptions, Lab] = {lexical: self}

    def _service(self, lexical: LexicalOptions) -> SearchService:
        return SearchService(
            self.index.settings, embedder=self.embedder, vector_cache=self.vectors, lexical=lexical
        )

    def with_lexical(self, lexical: LexicalOptions) -> Lab:
        """This lab searching with ``lexical`` (made once per options, then reused)."""
        lab = self._labs.get(lexical)
        if lab is None:
            lab = copy.copy(self)  # shares the embedder, the cache and every memo
            lab.lexical = lexical
            lab.service = self._service(lexical)
            self._labs[lexical] = lab
        return lab

    def close(self) -> None:
        for lab in self._labs.values():
            lab.service.close()

    def warm_queries(self, texts: Sequence[str]) -> None:
        """Embed every query in one batch, so runs time the search, not the model."""
        self.embedder.embed_batch(list(texts))

    def core(self, mode: str) -> ChunkSearch:
        """The unchanged core search in ``mode``."""

        def search(query: str, n: int) -> list[str]:
            return [hit["path"] for hit in self.service.search(query, top_k=n, mode=mode)]

        return search

    def lexical_hits(self, query: str, depth: int) -> list[Hit]:
        """Core BM25 candidates with this lab's lexical options, remembered."""
        memo_key = (self.lexical, query)
        cached = self._lexical_memo.get(memo_key)
        if cached is None or (len(cached[1]) < depth and cached[0] < depth):
            conn = self.service.connection()
            found = lexical_search(conn, query, depth, self.lexical)
            hits = [(hit.key, -hit.bm25) for hit in found]
            cached = (depth, hits)
            self._lexical_memo[memo_key] = cached
        return cached[1][:depth]

    def semantic_hits(self, query: str, depth: int) -> list[Hit]:
        """Core cosine candidates, remembered."""
        cached = self._semantic_memo.get(query)
        if cached is None or len(cached) < depth:
            results = self.service.search(query, top_k=depth, mode="semantic")
            cached = [
                ((hit["path"], hit["chunk_index"]), hit["score_breakdown"]["cosine"])
                for hit in results
            ]
            self._semantic_memo[query] = cached
        return cached[:depth]

    def stored_vectors(self, keys: Sequence[tuple[str, int]]) -> np.ndarray:
        """The indexed (unit) vectors of chunks ``keys``, read from SQLite."""
        reader = IndexReader(self.service.connection())
        blobs = [reader.vector_of_chunk(path, chunk_index) for path, chunk_index in keys]
        dim = self.embedder.dim
        vectors = [float_row(blob, dim) for blob in blobs if blob is not None]
        return l2_normalise(np.stack(vectors)) if vectors else np.zeros((0, self.embedder.dim))

    def moved_semantic_hits(
        self, query: str, first_pass: Sequence[tuple[str, int]], feedback: Feedback, depth: int
    ) -> list[Hit]:
        """Cosine candidates for the query vector moved towards ``first_pass[:depth]``."""
        feedback_rows = self.stored_vectors(first_pass[: feedback.depth])
        if feedback_rows.shape[0] == 0:
            return self.semantic_hits(query, depth)
        vec = rocchio(self.embedder.embed_batch([query])[0], feedback_rows, feedback.beta)
        with self.embedder.substitute(query, vec):
            results = self.service.search(query, top_k=depth, mode="semantic")
        return [
            ((hit["path"], hit["chunk_index"]), hit["score_breakdown"]["cosine"]) for hit in results
        ]

    def _first_pass(
        self, lex: Sequence[Hit], sem: Sequence[Hit], fusion: Fusion, feedback: Feedback
    ) -> list[tuple[str, int]]:
        if feedback.source == "lexical":
            return [key for key, _ in lex]
        return fusion(lex, sem)

    def semantic(self, feedback: Feedback, fusion: Fusion | None = None) -> ChunkSearch:
        """Semantic search with the query vector moved by ``feedback``; a hybrid first
        pass fuses with ``fusion`` (default: the core's RRF)."""
        first_fusion = fusion or rrf_fusion()
        mult = self.service.settings.candidate_multiplier

        def search(query: str, n: int) -> list[str]:
            lex = self.lexical_hits(query, n * mult)
            sem = self.semantic_hits(query, n * mult)
            first = self._first_pass(lex, sem, first_fusion, feedback)
            return [key[0] for key, _ in self.moved_semantic_hits(query, first, feedback, n)]

        return search

    def hybrid(
        self, fusion: Fusion, *, multiplier: int | None = None, feedback: Feedback | None = None
    ) -> ChunkSearch:
        """Hybrid search as the core does it, with another fusion or candidate depth, and
        optionally the semantic list re-run with a feedback-moved query vector."""
        mult = multiplier or self.service.settings.candidate_multiplier

        def search(query: str, n: int) -> list[str]:
            lex = self.lexical_hits(query, n * mult)
            sem = self.semantic_hits(query, n * mult)
            if feedback is not None:
                first = self._first_pass(lex, sem, fusion, feedback)
                sem = self.moved_semantic_hits(query, first, feedback, n * mult)
            return [key[0] for key in fusion(lex, sem)[:n]]

        return search
