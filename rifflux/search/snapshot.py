"""What one search reads: a read-only index snapshot, and the lazily built query embedder.

Invariants:

* An :class:`IndexSnapshot` is a value handed to the ranking (``ranking.py``) and
  retrieval (``retrieval.py``) functions: this thread's read-only connection, the
  database path, the settings, the vector cache, the embedder handle, the lexical
  options and the clause row counts kept with the connection. It owns none of them:
  :class:`~rifflux.search.service.SearchService` opens, caches and closes them, and
  builds one snapshot per call.
* Nothing reachable from a snapshot writes the index (the connection is ``mode=ro``;
  the vector cache only reads its directory).
* :class:`QueryEmbedder` builds the configured embedder once, on the first query that
  needs a vector, under a lock (the MCP server searches from several threads); its
  ``label`` never loads a model; ``last_seconds`` is what its last query embedding
  took (0 before the first), so a search can tell a costly embedder from a cheap one.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rifflux.config import Settings
from rifflux.embed.base import Embedder
from rifflux.embed.factory import embedder_label_for, make_embedder
from rifflux.search.lexical import LexicalOptions
from rifflux.store.fts import ClauseCounts
from rifflux.store.reader import get_metadata
from rifflux.vectors.cache import VectorCache


class QueryEmbedder:
    """The configured embedder (or a given one), built on first use."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        self._settings = settings
        self._embedder = embedder
        self._lock = threading.Lock()
        self.last_seconds = 0.0

    @property
    def label(self) -> str:
        if self._embedder is not None:
            return self._embedder.label
        return embedder_label_for(self._settings)

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            with self._lock:
                if self._embedder is None:
                    self._embedder = make_embedder(self._settings, queries=True)
        return self._embedder

    def embed_query(self, query: str) -> np.ndarray | None:
        """The query's vector, or ``None`` when the query has nothing to embed."""
        if not query.strip():
            return None
        started = time.perf_counter()
        vector: np.ndarray = self.embedder.embed_batch([query])[0]
        self.last_seconds = time.perf_counter() - started
        return vector


@dataclass(frozen=True, slots=True)
class IndexSnapshot:
    """One call's read-only view of an index: see the module docstring."""

    conn: sqlite3.Connection
    db_path: Path
    settings: Settings
    vectors: VectorCache
    embedder: QueryEmbedder
    lexical: LexicalOptions
    counts: ClauseCounts  # the clause row counts kept with ``conn``

    def stored_model(self) -> str | None:
        """The embedding model label the index was written with (None: no vectors yet)."""
        return stored_model(self.conn)


def stored_model(conn: sqlite3.Connection) -> str | None:
    return get_metadata(conn, "embedding_model")
