"""SearchService: the front object the CLI, the MCP server and the evaluation call.

It owns what outlives one call: the settings, one read-only connection per thread (with
the clause row counts its lexical searches keep, rifflux.store.fts), the query embedder
(built on first use), the vector cache and the query cache. Each call takes an
:class:`~rifflux.search.snapshot.IndexSnapshot` and delegates: ranking to ``ranking.py``,
chunk and file retrieval to ``retrieval.py``.

Invariants: arguments arrive as a validated :class:`~rifflux.search.request.SearchRequest`
(``search`` checks its own with the same functions); a cached answer is served only
while the index state (generation, uid, file stat keys) is the one it was computed at,
and with :class:`~rifflux.search.served.ServedPaths` only while every file in it still
passes; every search runs under a :class:`~rifflux.search.deadline.Deadline`; a search
never writes its database (read-only connections; an absent index is reported, not
created), and SQLite damage reads as one line (:func:`damage_reported`). The response's
``warning`` and ``embedding_coverage`` keys: docs/mcp.md.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import structlog

from rifflux.config import Settings
from rifflux.embed.base import Embedder
from rifflux.search import ranking, retrieval
from rifflux.search.budget import budget_response
from rifflux.search.deadline import Deadline
from rifflux.search.lexical import DEFAULT_OPTIONS, LexicalOptions
from rifflux.search.query_cache import QueryCache
from rifflux.search.request import (
    SearchRequest,
    check_max_tokens,
    check_mode,
    check_neighbors,
    check_top_k,
)
from rifflux.search.served import ServedPaths
from rifflux.search.snapshot import IndexSnapshot, QueryEmbedder, stored_model
from rifflux.store.connection import LocklessReader, database_failure, open_index_readonly
from rifflux.store.fts import ClauseCounts
from rifflux.store.reader import IndexReader
from rifflux.vectors.cache import VectorCache
from rifflux.vectors.segments import stat_key, vectors_dir

log = structlog.get_logger(__name__)

PARTIAL_VECTORS = "{percent}% of chunks have vectors (indexing may still be embedding them): {rest}"
"""The warning of a search that used vectors while some chunks have none."""
REST_BY_MODE = {
    "hybrid": "the others are ranked by keywords only",
    "semantic": "the others cannot be found in semantic mode; search them with hybrid or lexical",
}


def coverage(embedded: int, chunks: int) -> float:
    """Embedded chunks ÷ chunks, rounded to 4 places (1.0 when there are no chunks); below
    1.0 whenever a chunk lacks its vector, however few."""
    if not chunks:
        return 1.0
    return round(embedded / chunks, 4) if embedded >= chunks else min(embedded / chunks, 0.9999)


def partial_vectors_warning(share: float, mode: str) -> str:
    """The one line a semantic or hybrid search adds while ``share`` < 1 of the chunks
    have vectors."""
    return PARTIAL_VECTORS.format(percent=int(share * 100), rest=REST_BY_MODE[mode])


F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


@contextlib.contextmanager
def damage_reported(db_path: Path) -> Iterator[None]:
    """Turn SQLite's "malformed"/"not a database" errors (and the other failures
    :func:`~rifflux.store.connection.database_failure` knows) into their one-line error."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        known = database_failure(db_path, exc)
        if known is not None:
            raise known from exc
        raise


def _reports_damage(method: F) -> F:
    """:func:`damage_reported` around a :class:`SearchService` method."""

    @functools.wraps(method)
    def wrapper(self: SearchService, *args: Any, **kwargs: Any) -> Any:
        with damage_reported(self.db_path):
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def index_state(conn: sqlite3.Connection, db: Path) -> Hashable:
    """What a cached response depends on: the generation and uid, and the stat keys of
    the database, its WAL and every file of the vector cache (a damaged file is then
    noticed by the next search, as without the cache)."""
    generation, uid = IndexReader(conn).generation_and_uid()
    files = [db, db.with_name(db.name + "-wal")]
    directory = vectors_dir(db)
    with contextlib.suppress(OSError):
        files += sorted(Path(entry.path) for entry in os.scandir(directory))
    return generation, uid, tuple((path.name, stat_key(path)) for path in files)


class EmbeddingCoverage:
    """The share of chunks that have a vector (:func:`coverage`), counted once per index
    state (a job's embed phase bumps the generation with every batch)."""

    def __init__(self) -> None:
        # (generation, uid) -> share.
        self._known: tuple[Hashable, float] | None = None

    def share(self, conn: sqlite3.Connection) -> float:
        state = IndexReader(conn).generation_and_uid()
        known = self._known
        if known is not None and known[0] == state:
            return known[1]
        counts = IndexReader(conn).row_counts()
        share = coverage(counts["embeddings"], counts["chunks"])
        self._known = (state, share)
        return share


class SearchService:
    """Lexical, semantic and hybrid search, and chunk and file retrieval, over one index
    database."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        vector_cache: VectorCache | None = None,
        lexical: LexicalOptions = DEFAULT_OPTIONS,
        query_cache: QueryCache | None = None,
    ) -> None:
        """``lexical``: bm25() weights and query stop words (experiments vary them);
        ``query_cache``: one shared with the process's other services (its own if None),
        so the cache's bounds hold per process."""
        self.settings = settings
        self.lexical = lexical
        self._embedder = QueryEmbedder(settings, embedder)
        self.vectors = vector_cache or VectorCache(
            vector_index=settings.vector_index, hnsw_ef=settings.hnsw_ef
        )
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        if query_cache is None:
            query_cache = QueryCache(
                settings.query_cache_size,
                settings.query_cache_ttl_seconds,
                max_bytes=settings.query_cache_max_mb * 2**20,
            )
        self.query_cache = query_cache
        self._query_cache = query_cache  # The name tests read its counters under.
        self.db_path: Path = settings.db_path
        self.coverage = EmbeddingCoverage()

    # -- resources -------------------------------------------------------------------

    @_reports_damage
    def connection(self) -> sqlite3.Connection:
        """This thread's read-only connection (SQLite connections are per thread).

        One opened while the disk was full (a LocklessReader) is replaced once it is
        outdated; it is not closed here, as a caller up this thread's stack may still be
        reading it (it closes when the last reference goes)."""
        conn = getattr(self._local, "conn", None)
        if isinstance(conn, LocklessReader) and conn.outdated():
            with self._connections_lock:
                self._connections.remove(conn)
            conn = None
        if conn is None:
            conn = open_index_readonly(self.settings.db_path)
            self._local.conn = conn
            self._local.counts = ClauseCounts()
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    def snapshot(self) -> IndexSnapshot:
        """This thread's read-only view of the index, for one call."""
        conn = self.connection()
        return IndexSnapshot(
            conn=conn,
            db_path=self.db_path,
            settings=self.settings,
            vectors=self.vectors,
            embedder=self._embedder,
            lexical=self.lexical,
            counts=self._local.counts,
        )

    def close(self) -> None:
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    @property
    def embedder_label(self) -> str:
        return self._embedder.label

    def embed_query(self, query: str) -> np.ndarray | None:
        """The query's vector, or ``None`` when the query has nothing to embed."""
        return self._embedder.embed_query(query)

    def deadline(self) -> Deadline:
        """A new search's deadline: ``RIFFLUX_SEARCH_TIMEOUT_SECONDS`` from now."""
        return Deadline(self.settings.search_timeout_seconds)

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
        snapshot = self.snapshot()
        with deadline.guarding(snapshot.conn):
            return ranking.rank(snapshot, request, top_k, deadline)[0]

    @_reports_damage
    def search_response(
        self, request: SearchRequest, served: ServedPaths | None = None
    ) -> dict[str, Any]:
        """The object the MCP tool and ``rifflux search --json`` return; with ``served``
        (an MCP call's), only files it serves.

        Repeated requests are answered from the query cache while the index state (its
        generation, uid and vector cache manifest) is the one they were computed at."""
        deadline = self.deadline()
        snapshot = self.snapshot()
        with deadline.guarding(snapshot.conn):
            return _respond(self, snapshot, request, deadline, served)

    # -- lookups ---------------------------------------------------------------------

    @_reports_damage
    def stored_model(self, conn: sqlite3.Connection | None = None) -> str | None:
        return stored_model(conn or self.connection())

    @_reports_damage
    def get_chunk(self, chunk_id: str) -> dict[str, Any]:
        """A chunk as search results show it, with ``headings`` added."""
        return retrieval.get_chunk(self.connection(), chunk_id)

    @_reports_damage
    def chunk_with_neighbors(self, chunk_id: str, neighbors: object = 0) -> dict[str, Any]:
        """``{chunk}``; with ``neighbors`` ≥ 1 also ``before`` and ``after``: up to that many
        chunks of the same file on each side, in file order (one read snapshot)."""
        count = check_neighbors(neighbors)
        return retrieval.chunk_with_neighbors(self.connection(), chunk_id, count)

    @_reports_damage
    def get_file(
        self, path: str, *, heading: str | None = None, max_tokens: object = None
    ) -> dict[str, Any]:
        """An indexed file's chunks, by its stored path (``retrieval.get_file``): with
        ``heading`` only that section, with ``max_tokens`` only what fits."""
        budget = check_max_tokens(max_tokens)
        return retrieval.get_file(self.connection(), path, heading=heading, budget=budget)

    @_reports_damage
    def base_dir(self) -> str | None:
        """The directory the index's stored paths are relative to (None: none recorded)."""
        return retrieval.stored_base_dir(self.connection())

    @_reports_damage
    def absolute_path(self, stored_path: str) -> Path:
        """Where an indexed file lives: its stored path against the index's base_dir."""
        return retrieval.absolute_path(
            stored_path, lambda: retrieval.stored_base_dir(self.connection())
        )


def _respond(
    service: SearchService,
    snapshot: IndexSnapshot,
    request: SearchRequest,
    deadline: Deadline,
    served: ServedPaths | None = None,
) -> dict[str, Any]:
    """The response to ``request``: from the query cache while the index state is the one
    it was computed at, else ranked, with the coverage warning and the token budget."""
    state = index_state(snapshot.conn, service.db_path) if service.query_cache.enabled else None
    key: Hashable = request if served is None else (request, served)
    admits = None if served is None else served.admitting(retrieval.placer(snapshot.conn))
    cached = service.query_cache.get(key, state, scope=service.db_path)
    # A file swapped for a link out of the roots since: its answer is computed again.
    if cached is not None and (admits is None or all(admits(r["path"]) for r in cached["results"])):
        return cached
    results, warning = ranking.rank(snapshot, request, request.top_k, deadline, admits=admits)
    response: dict[str, Any] = {
        "query": request.query,
        "mode": request.mode,
        "count": len(results),
        "embedding_model": snapshot.stored_model() or service.embedder_label,
    }
    if warning is not None:
        response["warning"] = warning
    elif request.mode != "lexical" and request.query.strip():
        share = service.coverage.share(snapshot.conn)
        if share < 1.0:
            response["embedding_coverage"] = share
            response["warning"] = partial_vectors_warning(share, request.mode)
    response["results"] = results
    if request.max_tokens is not None:
        response = budget_response(response, request.query, request.max_tokens, deadline.check)
    if warning is None:
        service.query_cache.put(key, state, response, scope=service.db_path)
    return response
