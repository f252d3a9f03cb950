"""SearchService: the synchronous read side the CLI and the MCP server call.

Results follow one contract in every mode: exactly ``chunk_id``, ``path``,
``heading_path``, ``chunk_index``, ``content`` and a mode-specific ``score_breakdown``.

A corrupt vector cache never yields semantic results: semantic and hybrid searches
answer with the lexical results (``score_breakdown`` ``{"bm25": ...}``, so a client can
tell) and the response gains a ``warning`` naming the damage and the repair. A user who
asked for meaning still gets the keyword matches, which are right, rather than nothing
or hits that may be arbitrary. Without damage the response has no ``warning`` key.

Arguments arrive as a :class:`~rifflux.search.request.SearchRequest`, already validated
(``search_response``); ``search``, the in-process ranking the evaluation calls with
depths beyond ``MAX_TOP_K``, checks its arguments with the same functions and messages.

One search, in order (issue 12): filters pick the admitted chunks (``filters.py``; none:
every chunk); each side takes its candidates among them (``candidate_k``, default
``top_k × RIFFLUX_CANDIDATE_MULTIPLIER``, 80 for minmax; never fewer than ``top_k``);
``min_cosine`` drops weak semantic candidates; the sides are fused (RRF with this call's
weights, minmax or maxnorm with its α); chunks holding every quoted phrase move ahead
(lexical and hybrid); ``group_by="file"`` keeps each file's best chunk (searching deeper
while fewer than ``top_k`` files came back and a side may hold more); then truncation to
``top_k``. ``search_response`` answers repeated requests from the query cache
(``query_cache.py``) while the index state is unchanged.

Every search (``search_response``, ``search``) runs under a :class:`~rifflux.search.deadline.
Deadline` of ``RIFFLUX_SEARCH_TIMEOUT_SECONDS``: SQLite work past it is interrupted and the
Python steps check it between pieces, so a call fails with one line
(:class:`~rifflux.errors.SearchTimeoutError`) instead of holding its thread, and the
thread's connection serves the next search.

A search never writes its database: connections are read-only (``mode=ro``), an absent
index is reported ("no index at PATH; ...") instead of created, and a damaged one reads
as one line (:class:`~rifflux.errors.IndexDamagedError`), never a raw ``DatabaseError``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import structlog

from rifflux.config import Settings
from rifflux.embed.base import Embedder
from rifflux.embed.factory import embedder_label_for, make_embedder
from rifflux.errors import (
    EmbeddingModelMismatch,
    InvalidQueryError,
    NotFoundError,
    RiffluxError,
    echo,
)
from rifflux.search.budget import budget_response, fit_in_order
from rifflux.search.deadline import Deadline
from rifflux.search.filters import admitted_rows
from rifflux.search.fusion import (
    DEFAULT_MAXNORM_ALPHA,
    DEFAULT_MINMAX_ALPHA,
    maxnorm_fuse,
    minmax_fuse,
    rrf_fuse,
)
from rifflux.search.lexical import (
    DEFAULT_OPTIONS,
    LexicalHit,
    LexicalOptions,
    lexical_search,
    phrase_rows,
    query_phrases,
)
from rifflux.search.query_cache import QueryCache
from rifflux.search.request import (
    SearchRequest,
    check_max_tokens,
    check_mode,
    check_neighbors,
    check_top_k,
)
from rifflux.search.sections import (
    ChunkHeadings,
    breadcrumbs,
    resolve_heading,
    section_parts,
)
from rifflux.store.connection import (
    database_failure,
    open_index_readonly,
    transaction,
)
from rifflux.store.integrity import quick_check
from rifflux.store.reader import IndexReader, current_generation, get_metadata
from rifflux.store.rows import headings_from_json
from rifflux.vectors.cache import SemanticHit, VectorCache
from rifflux.vectors.segments import CacheCorrupt, forget_verified, stat_key, vectors_dir

REPAIR_HINT = "repair it with `rifflux index --repair` (any index job also republishes it)"

log = structlog.get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

MINMAX_CANDIDATE_K = 80
"""Candidates per side of a minmax search without ``candidate_k`` (the spec's value)."""
GROUP_DEEPEN = 4
"""``group_by="file"``: the factor by which the candidate depth grows while too few
files came back and a side may hold more."""


@dataclass(frozen=True, slots=True)
class Ranked:
    """One ranked chunk before it is read: ``score`` is higher-better (−bm25 for
    lexical), ``tier`` 0 when it holds every quoted phrase of the query (or there is none)."""

    row_id: int
    key: tuple[str, int]
    score: float
    breakdown: dict[str, Any]
    tier: int = 0


def _chunk_dict(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "chunk_id": row["chunk_id"],
        "path": row["path"],
        "heading_path": row["heading_path"],
        "chunk_index": int(row["chunk_index"]),
        "content": row["content"],
    }


def _chunk_details(reader: IndexReader, rows: Sequence[sqlite3.Row]) -> list[dict[str, Any]]:
    """Chunks as ``get_chunk`` and ``get_file`` show them: a search result's keys and
    ``headings``, the headings that start in the chunk (``[{offset, heading_path}]``;
    None in a row an older Rifflux wrote). Search results never carry ``headings``."""
    stored = reader.headings_of_rowids(int(row["id"]) for row in rows)
    return [
        {**_chunk_dict(row), "headings": headings_from_json(stored.get(int(row["id"])))}
        for row in rows
    ]


def _section_chunks(
    chunks: list[dict[str, Any]], heading: str, file_path: str
) -> tuple[str, list[dict[str, Any]]]:
    """The section ``heading`` names and its chunks: a chunk holding more than the section
    (a merged chunk) is cut to the section's part (rifflux.search.sections), keeping its
    ``chunk_id`` and ``chunk_index``, with that part's breadcrumb and headings."""
    views = [
        ChunkHeadings(
            c["heading_path"],
            len(c["content"]),
            None
            if c["headings"] is None
            else [(h["offset"], h["heading_path"]) for h in c["headings"]],
        )
        for c in chunks
    ]
    section = resolve_heading(heading, breadcrumbs(views), file_path)
    found = []
    for part in section_parts(views, section):
        chunk = chunks[part.position]
        if part.start == 0 and part.end == len(chunk["content"]):
            found.append(chunk)
            continue
        found.append(
            {
                **chunk,
                "heading_path": part.heading_path,
                "content": chunk["content"][part.start : part.end].rstrip(),
                "headings": [
                    {**h, "offset": h["offset"] - part.start}
                    for h in chunk["headings"] or ()
                    if part.start <= h["offset"] < part.end
                ],
            }
        )
    return section, found


def _headings_within(
    headings: list[dict[str, Any]] | None, length: int
) -> list[dict[str, Any]] | None:
    """The headings that start within a chunk's first ``length`` characters (a cut one)."""
    return None if headings is None else [h for h in headings if h["offset"] < length]


def _ranks(score: dict[str, float], fused: Any) -> dict[str, Any]:
    """A fused score's breakdown: the score, then both sides' ranks (None: not there)."""
    return {**score, "lexical_rank": fused.lexical_rank, "semantic_rank": fused.semantic_rank}


def _reports_damage(method: F) -> F:
    """Turn SQLite's "malformed"/"not a database" errors into one-line IndexDamagedError."""

    @functools.wraps(method)
    def wrapper(self: SearchService, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as exc:
            known = database_failure(self.db_path, exc)
            if known is not None:
                raise known from exc
            raise

    return wrapper  # type: ignore[return-value]


class SearchService:
    """Lexical, semantic and hybrid search over one index database."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        vector_cache: VectorCache | None = None,
        lexical: LexicalOptions = DEFAULT_OPTIONS,
    ) -> None:
        """``lexical``: bm25() weights and query stop words (experiments vary them)."""
        self.settings = settings
        self.lexical = lexical
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        self._vectors = vector_cache or VectorCache(
            vector_index=settings.vector_index, hnsw_ef=settings.hnsw_ef
        )
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._query_cache = QueryCache(settings.query_cache_size, settings.query_cache_ttl_seconds)

    # -- resources -------------------------------------------------------------------

    @property
    def db_path(self) -> Path:
        return self.settings.db_path

    @_reports_damage
    def connection(self) -> sqlite3.Connection:
        """This thread's read-only connection (SQLite connections are per thread)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = open_index_readonly(self.settings.db_path)
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    def close(self) -> None:
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    @property
    def embedder_label(self) -> str:
        if self._embedder is not None:
            return self._embedder.label
        return embedder_label_for(self.settings)

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            with self._embedder_lock:
                if self._embedder is None:
                    self._embedder = make_embedder(self.settings)
        return self._embedder

    def embed_query(self, query: str) -> np.ndarray | None:
        """The query's vector, or ``None`` when the query has nothing to embed."""
        if not query.strip():
            return None
        vector: np.ndarray = self.embedder.embed_batch([query])[0]
        return vector

    # -- search ----------------------------------------------------------------------

    @_reports_damage
    def search(
        self, query: str, *, top_k: int = 10, mode: str = "hybrid", **options: Any
    ) -> list[dict[str, Any]]:
        """The ``top_k`` best chunks; ``top_k`` has no upper bound (evaluation depths).

        ``options`` are the optional :class:`SearchRequest` fields (``fusion``,
        ``group_by``, filters...), checked there."""
        mode = check_mode(mode)
        top_k = check_top_k(top_k, maximum=None)
        request = SearchRequest.from_arguments({**options, "query": query, "mode": mode})
        deadline = self.deadline()
        with deadline.guarding(self.connection()):
            return self._search(request, top_k, deadline)[0]

    def deadline(self) -> Deadline:
        """A new search's deadline: ``RIFFLUX_SEARCH_TIMEOUT_SECONDS`` from now."""
        return Deadline(self.settings.search_timeout_seconds)

    @_reports_damage
    def search_within(
        self, request: SearchRequest, restrict: np.ndarray | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """(results, warning) of ``request`` among the chunk rowids ``restrict`` (sorted;
        None: every chunk) only, as if a filter admitted them: how the knowledge tools
        rank one kind."""
        deadline = self.deadline()
        with deadline.guarding(self.connection()):
            return self._search(request, request.top_k, deadline, restrict)

    def _search(
        self,
        request: SearchRequest,
        top_k: int,
        deadline: Deadline,
        restrict: np.ndarray | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """(results, warning): the warning is set when lexical results stand in.

        The request is valid; ``top_k`` replaces its own (evaluation depths). The caller
        guards the connection with ``deadline``."""
        if not request.query.strip():
            return [], None
        conn = self.connection()
        admitted = admitted_rows(conn, request, deadline.check)
        if restrict is not None:
            admitted = restrict if admitted is None else np.intersect1d(admitted, restrict)
        if admitted is not None and admitted.shape[0] == 0:
            return [], None
        depth = self._candidate_depth(request, top_k)
        while True:
            deadline.check()
            ranked, warning, deeper = self._ranked(conn, request, depth, admitted, deadline)
            if request.group_by != "file":
                break
            ranked = self._best_per_file(conn, ranked)
            if len(ranked) >= top_k or not deeper:
                break
            depth *= GROUP_DEEPEN
        fill = request.mode == "semantic" and warning is None
        return self._materialise(conn, ranked, top_k, fill=fill), warning

    def _fusion(self, request: SearchRequest) -> str:
        return request.fusion or self.settings.fusion

    def _candidate_depth(self, request: SearchRequest, top_k: int) -> int:
        """Candidates per side: ``candidate_k``, else 80 for a minmax hybrid search, else
        ``top_k × candidate_multiplier``; never fewer than ``top_k``."""
        if request.candidate_k is not None:
            return max(request.candidate_k, top_k)
        if request.mode == "hybrid" and self._fusion(request) == "minmax":
            return max(MINMAX_CANDIDATE_K, top_k)
        return top_k * self.settings.candidate_multiplier

    def _ranked(
        self,
        conn: sqlite3.Connection,
        request: SearchRequest,
        depth: int,
        admitted: np.ndarray | None,
        deadline: Deadline,
    ) -> tuple[list[Ranked], str | None, bool]:
        """(ranked candidates best first, warning, whether a side may hold more)."""
        query, mode = request.query, request.mode
        warning = None
        semantic: list[SemanticHit] = []
        if mode != "lexical":
            try:
                semantic = self._semantic(conn, query, depth, admitted, deadline.check)
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
                (warning),
                deeper,
            )
        deadline.check()
        lexical = lexical_search(conn, query, depth, self.lexical, admitted)
        deadline.check()
        deeper = deeper or len(lexical) >= depth
        if mode == "lexical":
            ranked = [Ranked(h.row_id, h.key, -h.bm25, {"bm25": h.bm25}) for h in lexical]
        else:
            ranked = self._fused(request, lexical, semantic)
        phrases = query_phrases(query)
        if phrases:
            holding = phrase_rows(conn, phrases, (r.row_id for r in ranked))
            ranked = [replace(r, tier=0 if r.row_id in holding else 1) for r in ranked]
            ranked.sort(key=lambda r: r.tier)  # Stable: each tier keeps the fused order.
        return ranked, warning, deeper

    def _fused(
        self,
        request: SearchRequest,
        lexical: list[LexicalHit],
        semantic: list[SemanticHit],
    ) -> list[Ranked]:
        row_by_key = {h.key: h.row_id for h in lexical}
        row_by_key.update({h.key: h.row_id for h in semantic})
        fusion = self._fusion(request)
        if fusion in ("minmax", "maxnorm"):
            alpha = request.alpha
            if alpha is None:
                alpha = self.settings.fusion_alpha
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
                    for f in minmax_fuse(
                        lex, sem, alpha=DEFAULT_MINMAX_ALPHA if alpha is None else alpha
                    )
                ]
            return [
                Ranked(row_by_key[f.key], f.key, f.score, _ranks({"maxnorm": f.score}, f))
                for f in maxnorm_fuse(
                    lex, sem, alpha=DEFAULT_MAXNORM_ALPHA if alpha is None else alpha
                )
            ]
        lexical_weight = request.lexical_weight
        if lexical_weight is None:
            lexical_weight = self.settings.lexical_weight
        semantic_weight = request.semantic_weight
        if semantic_weight is None:
            semantic_weight = self.settings.semantic_weight
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
                k=self.settings.rrf_k,
                lexical_weight=lexical_weight,
                semantic_weight=semantic_weight,
            )
        ]

    def _best_per_file(self, conn: sqlite3.Connection, ranked: list[Ranked]) -> list[Ranked]:
        """Each file's best chunk (its first in ``ranked``), files ordered by tier, score,
        newer mtime, path, chunk index."""
        best: dict[str, Ranked] = {}
        for item in ranked:
            best.setdefault(item.key[0], item)
        mtimes = IndexReader(conn).file_mtimes(best)
        return sorted(
            best.values(),
            key=lambda r: (r.tier, -r.score, -mtimes.get(r.key[0], 0), r.key),
        )

    def _materialise(
        self, conn: sqlite3.Connection, ranked: list[Ranked], top_k: int, *, fill: bool
    ) -> list[dict[str, Any]]:
        """The first ``top_k`` as result dicts. A chunk deleted since it was ranked (the
        vector cache lags) is dropped; ``fill``: read every candidate, so later ones
        take its place."""
        chosen = ranked if fill else ranked[:top_k]
        rows = self._rows(conn, [r.row_id for r in chosen])
        present = [r for r in chosen if r.row_id in rows][:top_k]
        return [{**rows[r.row_id], "score_breakdown": r.breakdown} for r in present]

    @_reports_damage
    def search_response(self, request: SearchRequest) -> dict[str, Any]:
        """The object the MCP tool and ``rifflux search --json`` return.

        Repeated requests are answered from the query cache while the index state (its
        generation, uid and vector cache manifest) is the one they were computed at."""
        deadline = self.deadline()
        with deadline.guarding(self.connection()):
            return self._respond(request, deadline)

    def _respond(self, request: SearchRequest, deadline: Deadline) -> dict[str, Any]:
        state = self._index_state() if self._query_cache.enabled else None
        cached = self._query_cache.get(request, state)
        if cached is not None:
            return cached
        results, warning = self._search(request, request.top_k, deadline)
        response: dict[str, Any] = {
            "query": request.query,
            "mode": request.mode,
            "count": len(results),
            "embedding_model": self.stored_model() or self.embedder_label,
        }
        if warning is not None:
            response["warning"] = warning
        response["results"] = results
        if request.max_tokens is not None:
            response = budget_response(response, request.query, request.max_tokens, deadline.check)
        if warning is None:
            self._query_cache.put(request, state, response)
        return response

    def _index_state(self) -> Hashable:
        """What a cached response depends on: the generation and uid, and the stat keys
        of the database, its WAL and every file of the vector cache (a damaged file is
        then noticed by the next search, as without the cache)."""
        generation, uid = IndexReader(self.connection()).generation_and_uid()
        db = self.db_path
        files = [db, db.with_name(db.name + "-wal")]
        directory = vectors_dir(db)
        with contextlib.suppress(OSError):
            files += sorted(Path(entry.path) for entry in os.scandir(directory))
        return generation, uid, tuple((path.name, stat_key(path)) for path in files)

    def _semantic(
        self,
        conn: sqlite3.Connection,
        query: str,
        limit: int,
        admitted: np.ndarray | None = None,
        check: Callable[[], None] | None = None,
    ) -> list[SemanticHit]:
        stored = self.stored_model(conn)
        if stored is None:
            return []
        label = self.embedder_label
        if stored != label:
            raise EmbeddingModelMismatch(
                f"the index was embedded with {stored!r} but the configured embedder is "
                f"{label!r}; reindex with `rifflux index --force PATH...`"
            )
        query_vec = self.embed_query(query)
        if query_vec is None:
            return []
        # Vector cache: memory-mapped segments, checked against the index generation.
        if check is not None:
            check()
        return self._vectors.search(conn, self.db_path, stored, query_vec, limit, admitted, check)

    def _rows(self, conn: sqlite3.Connection, row_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        if not row_ids:
            return {}
        rows = IndexReader(conn).chunks_by_rowids(row_ids)
        return {int(row["id"]): _chunk_dict(row) for row in rows}

    # -- lookups ---------------------------------------------------------------------

    @_reports_damage
    def stored_model(self, conn: sqlite3.Connection | None = None) -> str | None:
        return get_metadata(conn or self.connection(), "embedding_model")

    @_reports_damage
    def get_chunk(self, chunk_id: str) -> dict[str, Any]:
        """A chunk as search results show it, with ``headings`` added."""
        reader = IndexReader(self.connection())
        with transaction(reader.conn, write=False):
            row = reader.chunk_by_id(chunk_id)
            if row is None:
                raise NotFoundError(f"no chunk with id {chunk_id!r} in the index")
            return _chunk_details(reader, [row])[0]

    @_reports_damage
    def chunk_with_neighbors(self, chunk_id: str, neighbors: object = 0) -> dict[str, Any]:
        """``{chunk}``; with ``neighbors`` ≥ 1 also ``before`` and ``after``: up to that many
        chunks of the same file on each side, in file order (one read snapshot)."""
        count = check_neighbors(neighbors)
        conn = self.connection()
        reader = IndexReader(conn)
        with transaction(conn, write=False):
            chunk = self.get_chunk(chunk_id)
            if not count:
                return {"chunk": chunk}
            file_id = reader.file_id_of_chunk(chunk_id)
            index = chunk["chunk_index"]
            rows = reader.chunks_of_file_between(int(file_id or 0), index - count, index + count)
            around = _chunk_details(reader, rows)
        return {
            "chunk": chunk,
            "before": [c for c in around if c["chunk_index"] < index],
            "after": [c for c in around if c["chunk_index"] > index],
        }

    @_reports_damage
    def get_file(
        self, path: str, *, heading: str | None = None, max_tokens: object = None
    ) -> dict[str, Any]:
        """An indexed file's chunks, by its stored path. Never reads the filesystem.

        ``heading``: only that section and its subsections (rifflux.search.sections), the
        resolved path under ``heading``; a merged chunk is cut to the section's part.
        ``max_tokens``: chunks in order while they fit, the next cut to its beginning;
        each chunk gains ``tokens`` and ``truncated`` and the file a ``budget``.
        """
        budget = check_max_tokens(max_tokens)
        reader = IndexReader(self.connection())
        with transaction(reader.conn, write=False):
            file_row = reader.file_by_path(path)
            if file_row is None:
                raise NotFoundError(
                    f"{echo(path)} is not an indexed file; pass a path exactly as search results "
                    "show it"
                )
            chunks = _chunk_details(reader, reader.chunks_of_file(int(file_row["id"])))
        found: dict[str, Any] = {"path": file_row["path"], "sha256": file_row["sha256"]}
        if heading is not None:
            found["heading"], chunks = _section_chunks(chunks, heading, str(file_row["path"]))
        if budget is not None:
            fitted = fit_in_order([c["content"] for c in chunks], budget)
            kept = [
                {
                    **c,
                    "content": f.text,
                    "headings": _headings_within(c["headings"], len(f.text)),
                    "tokens": f.tokens,
                    "truncated": f.truncated,
                }
                for c, f in zip(chunks, fitted, strict=False)  # fitted may stop early
            ]
            found["budget"] = {
                "max_tokens": budget,
                "used_tokens": sum(f.tokens for f in fitted),
                "dropped": len(chunks) - len(kept),
            }
            chunks = kept
        found["chunks"] = chunks
        return found

    @_reports_damage
    def absolute_path(self, stored_path: str) -> Path:
        """Where an indexed file lives: its stored path against the index's base_dir."""
        if stored_path.startswith("/"):
            return Path(stored_path)
        base = get_metadata(self.connection(), "base_dir") or os.getcwd()
        return Path(base) / stored_path

    @_reports_damage
    def counts(self) -> dict[str, Any]:
        conn = self.connection()
        return {
            **IndexReader(conn).row_counts(),
            "generation": current_generation(conn),
            "db_path": str(self.settings.db_path),
            "embedding_model": self.stored_model(conn),
            "embedding_backend": self.settings.embedding_backend,
            "vector_cache": self._vectors.status(conn, self.db_path),
        }

    def check(self) -> dict[str, Any]:
        """``PRAGMA quick_check`` of the database and a full verification of the cache.

        ``{"ok", "database": {"ok", "problems"}, "vector_cache": {"ok", "state",
        "problems"}}``; every problem is one line. The cache is re-hashed even if this
        process verified it before.
        """
        db_problems = quick_check(self.db_path)
        cache: dict[str, Any] = {"ok": True, "state": None, "problems": []}
        forget_verified()
        self._vectors.forget()
        if not self.db_path.is_file():
            cache["ok"] = False  # Not checked; the database problem says why.
        else:
            try:
                status = self._vectors.status(self.connection(), self.db_path, thorough=True)
            except (sqlite3.DatabaseError, RiffluxError) as exc:
                cache.update(ok=False, problems=[f"cannot be checked: {exc}"])
            else:
                cache["state"] = status["state"]
                if status["state"] == "corrupt":
                    cache.update(ok=False, problems=[f"{status['reason']}; {REPAIR_HINT}"])
        return {
            "ok": not db_problems and cache["ok"],
            "database": {"ok": not db_problems, "problems": db_problems},
            "vector_cache": cache,
        }
