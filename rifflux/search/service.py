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

A search never writes its database: connections are read-only (``mode=ro``), an absent
index is reported ("no index at PATH; ...") instead of created, and a damaged one reads
as one line (:class:`~rifflux.errors.IndexDamagedError`), never a raw ``DatabaseError``.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import structlog

from rifflux.config import Settings
from rifflux.embed.base import Embedder
from rifflux.embed.factory import embedder_label_for, make_embedder
from rifflux.errors import EmbeddingModelMismatch, NotFoundError, RiffluxError
from rifflux.search.fusion import maxnorm_fuse, rrf_fuse
from rifflux.search.lexical import DEFAULT_OPTIONS, LexicalOptions, lexical_search
from rifflux.search.request import SearchRequest, check_mode, check_query, check_top_k
from rifflux.store.connection import damaged_index, is_damage_error, open_index_readonly
from rifflux.store.integrity import quick_check
from rifflux.store.reader import IndexReader, current_generation, get_metadata
from rifflux.vectors.cache import VectorCache
from rifflux.vectors.segments import CacheCorrupt, forget_verified

REPAIR_HINT = "repair it with `rifflux index --repair` (any index job also republishes it)"

log = structlog.get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def _chunk_dict(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "chunk_id": row["chunk_id"],
        "path": row["path"],
        "heading_path": row["heading_path"],
        "chunk_index": int(row["chunk_index"]),
        "content": row["content"],
    }


def _reports_damage(method: F) -> F:
    """Turn SQLite's "malformed"/"not a database" errors into one-line IndexDamagedError."""

    @functools.wraps(method)
    def wrapper(self: SearchService, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as exc:
            if is_damage_error(exc):
                raise damaged_index(self.db_path, exc) from exc
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
        self._vectors = vector_cache or VectorCache()
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()

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
    def search(self, query: str, *, top_k: int = 10, mode: str = "hybrid") -> list[dict[str, Any]]:
        """The ``top_k`` best chunks; ``top_k`` has no upper bound (evaluation depths)."""
        mode = check_mode(mode)
        top_k = check_top_k(top_k, maximum=None)
        return self._search(check_query(query), top_k=top_k, mode=mode)[0]

    def _search(
        self, query: str, *, top_k: int, mode: str
    ) -> tuple[list[dict[str, Any]], str | None]:
        """(results, warning): the warning is set when lexical results stand in.

        The arguments are valid (a SearchRequest's, or checked by ``search``)."""
        if not query.strip():
            return [], None
        limit = top_k * self.settings.candidate_multiplier
        conn = self.connection()
        if mode == "lexical":
            return self._lexical(conn, query, limit, top_k), None
        try:
            semantic = self._semantic(conn, query, limit)
        except CacheCorrupt as exc:
            warning = (
                f"the vector cache is corrupt ({exc}); these are lexical results "
                f"instead of {mode} ones; {REPAIR_HINT}"
            )
            return self._lexical(conn, query, limit, top_k), warning
        return self._fused(conn, query, limit, top_k, mode, semantic), None

    def _lexical(
        self, conn: sqlite3.Connection, query: str, limit: int, top_k: int
    ) -> list[dict[str, Any]]:
        hits = lexical_search(conn, query, limit, self.lexical)[:top_k]
        rows = self._rows(conn, [h.row_id for h in hits])
        return [{**rows[h.row_id], "score_breakdown": {"bm25": h.bm25}} for h in hits]

    def _fused(
        self,
        conn: sqlite3.Connection,
        query: str,
        limit: int,
        top_k: int,
        mode: str,
        semantic: list[Any],
    ) -> list[dict[str, Any]]:
        if mode == "semantic":
            # Vector cache: a chunk deleted since the search is dropped, not a KeyError.
            rows = self._rows(conn, [h.row_id for h in semantic])
            hits_s = [h for h in semantic if h.row_id in rows][:top_k]
            return [{**rows[h.row_id], "score_breakdown": {"cosine": h.cosine}} for h in hits_s]
        lexical = lexical_search(conn, query, limit, self.lexical)
        row_by_key = {h.key: h.row_id for h in lexical}
        row_by_key.update({h.key: h.row_id for h in semantic})
        scored: list[tuple[Any, dict[str, float]]]
        if self.settings.fusion == "maxnorm":
            # SQLite's bm25() is negative, lower is better: negated, higher is better.
            scored = [
                (f, {"maxnorm": f.score})
                for f in maxnorm_fuse(
                    [(h.key, -h.bm25) for h in lexical],
                    [(h.key, h.cosine) for h in semantic],
                    alpha=self.settings.fusion_alpha,
                )[:top_k]
            ]
        else:
            scored = [
                (f, {"rrf": f.rrf})
                for f in rrf_fuse(
                    [h.key for h in lexical],
                    [h.key for h in semantic],
                    k=self.settings.rrf_k,
                    lexical_weight=self.settings.lexical_weight,
                    semantic_weight=self.settings.semantic_weight,
                )[:top_k]
            ]
        rows = self._rows(conn, [row_by_key[f.key] for f, _ in scored])
        return [
            {
                **rows[row_by_key[f.key]],
                "score_breakdown": {
                    **score,
                    "lexical_rank": f.lexical_rank,
                    "semantic_rank": f.semantic_rank,
                },
            }
            for f, score in scored
            if row_by_key[f.key] in rows  # Vector cache: drop chunks deleted meanwhile.
        ]

    @_reports_damage
    def search_response(self, request: SearchRequest) -> dict[str, Any]:
        """The object the MCP tool and ``rifflux search --json`` return."""
        results, warning = self._search(request.query, top_k=request.top_k, mode=request.mode)
        response: dict[str, Any] = {
            "query": request.query,
            "mode": request.mode,
            "count": len(results),
            "embedding_model": self.stored_model() or self.embedder_label,
        }
        if warning is not None:
            response["warning"] = warning
        response["results"] = results
        return response

    def _semantic(self, conn: sqlite3.Connection, query: str, limit: int) -> list[Any]:
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
        return self._vectors.search(conn, self.db_path, stored, query_vec, limit)

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
        row = IndexReader(self.connection()).chunk_by_id(chunk_id)
        if row is None:
            raise NotFoundError(f"no chunk with id {chunk_id!r} in the index")
        return _chunk_dict(row)

    @_reports_damage
    def get_file(self, path: str) -> dict[str, Any]:
        """An indexed file's chunks, by its stored path. Never reads the filesystem."""
        reader = IndexReader(self.connection())
        file_row = reader.file_by_path(path)
        if file_row is None:
            raise NotFoundError(
                f"{path!r} is not an indexed file; pass a path exactly as search results show it"
            )
        rows = reader.chunks_of_file(int(file_row["id"]))
        return {
            "path": file_row["path"],
            "sha256": file_row["sha256"],
            "chunks": [_chunk_dict(row) for row in rows],
        }

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
