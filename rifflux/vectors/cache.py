"""The front process's view of the vector cache: memory-mapped, checked on every search.

Per search the cache costs one ``os.stat`` of the manifest (reload when its inode,
mtime or size moved) and one SQLite read (the index generation and the cache uid).

Staleness policy:

* fresh (manifest generation == index generation): search the segments; the rows are
  exactly the database's rows at that generation.
* stale (a job has written batches that are not published yet, or something wrote
  without publishing): search the lagging segments anyway, over-fetch, and keep only
  hits whose chunk row still exists with the same identity (one extra SQLite read);
  search again with more candidates if too few survive. Rows added since the manifest
  are not found until the next publish. A background thread publishes a delta at most
  once per ``REFRESH_MIN_INTERVAL_SECONDS`` (and no more often than ten times its own
  duration, so a big index spends at most ~10% of a core on it while a job runs);
  searches never wait for it. Writers
  publish when a job finalizes, so a finished job's chunks are found by the next search.
* missing (no manifest, an unreadable one, or one of another database or model): the
  search rebuilds the cache synchronously (``source: "search-rebuild"``); if it cannot
  be written, it searches an in-memory copy built from SQLite for that generation.

A search never writes the database: its rebuilds and refreshes open it read-only, so
a database without a cache uid (which only writers create) is served from memory, and
a cache built with ``may_publish=False`` (a ``db_path`` search of another index) never
writes anything at all, not even files beside that database.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from rifflux.store.writer import get_metadata
from rifflux.vectors.publish import (
    INDEX_UID_KEY,
    READ_CHUNK,
    index_head,
    list_rows,
    publish,
    read_vectors,
)
from rifflux.vectors.segments import (
    CacheUnusable,
    Candidate,
    Manifest,
    Segment,
    load_segment,
    manifest_stat_key,
    read_manifest,
    row_ident,
    search_segments,
    vectors_dir,
)

log = structlog.get_logger(__name__)

# At most one background refresh of a stale cache per this many seconds, and at least
# this many times the last refresh's duration between two refreshes.
REFRESH_MIN_INTERVAL_SECONDS = 1.0
REFRESH_COST_FACTOR = 10.0
# After a failed rebuild, search the in-memory fallback this long before trying again.
REBUILD_RETRY_SECONDS = 30.0
# Times a reader retries when a manifest names a file a newer publish already deleted.
OPEN_ATTEMPTS = 5
# A stale search first asks the segments for this many times the wanted hits.
STALE_OVERFETCH = 2


@dataclass(frozen=True, slots=True)
class SemanticHit:
    row_id: int
    key: tuple[str, int]
    cosine: float


@dataclass(frozen=True, slots=True)
class CacheView:
    """One loaded manifest and its memory-mapped segments; immutable."""

    manifest: Manifest
    segments: tuple[Segment, ...]
    stat_key: tuple[int, int, int] | None

    @property
    def live_rows(self) -> int:
        return sum(s.live for s in self.segments)

    def search(self, query: np.ndarray, limit: int) -> list[Candidate]:
        return search_segments(self.segments, query, limit)


def open_view(directory: Path) -> CacheView | None:
    """Load the current manifest and map its segments; None when there is no manifest."""
    for _ in range(OPEN_ATTEMPTS):
        found = read_manifest(directory)
        if found is None:
            return None
        manifest, stat_key = found
        try:
            segments = tuple(load_segment(directory, s, manifest.dim) for s in manifest.segments)
        except FileNotFoundError:
            continue  # A newer manifest replaced this one and its files were collected.
        return CacheView(manifest, segments, stat_key)
    raise CacheUnusable(f"the manifest in {directory} names files that do not exist")


def _index_state(conn: sqlite3.Connection) -> tuple[int, str | None]:
    """(generation, cache uid) in one read."""
    rows = conn.execute(
        "SELECT key, value FROM index_metadata WHERE key IN ('generation', ?)", (INDEX_UID_KEY,)
    ).fetchall()
    values = {row[0]: row[1] for row in rows}
    return int(values.get("generation", 0)), values.get(INDEX_UID_KEY)


@contextlib.contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One consistent snapshot for several reads (joins a transaction already open)."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def memory_view(conn: sqlite3.Connection, model: str) -> CacheView:
    """The fallback when the cache cannot be written: one in-memory segment from SQLite."""
    with read_transaction(conn):
        db = list_rows(conn, *index_head(conn))
        vectors = (
            read_vectors(conn, db.rowids, model, db.dim)
            if db.model == model
            else np.zeros((0, db.dim), np.float32)
        )
        uid = get_metadata(conn, INDEX_UID_KEY) or ""
    distinct, ordinals = np.unique(np.asarray(db.paths, dtype=object), return_inverse=True)
    meta = np.stack([db.rowids, db.idents, ordinals.astype(np.int64), db.chunk_indexes], 1)
    segment = Segment(vectors, meta.reshape(-1, 4), tuple(str(p) for p in distinct))
    manifest = Manifest(uid, db.generation, db.model, db.dim, "memory", (), time.time())
    return CacheView(manifest, (segment,), None)


class VectorCache:
    """Holds the current view for one index and keeps it current; thread-safe."""

    def __init__(self, *, may_publish: bool = True) -> None:
        self.may_publish = may_publish
        self._view: CacheView | None = None
        self._memory: CacheView | None = None
        self._lock = threading.Lock()
        self._refreshing = False
        self._last_refresh = 0.0
        self._refresh_interval = REFRESH_MIN_INTERVAL_SECONDS
        self._rebuild_failed_at: float | None = None

    # -- the view --------------------------------------------------------------------

    def _current(self, directory: Path) -> CacheView | None:
        """The loaded view, reloaded if the manifest file changed (one stat)."""
        view = self._view
        key = manifest_stat_key(directory)
        if view is not None and key is not None and view.stat_key == key:
            return view
        with self._lock:
            view = self._view
            if view is None or view.stat_key != manifest_stat_key(directory):
                try:
                    view = open_view(directory)
                except CacheUnusable as exc:
                    log.warning("vectors.cache_unusable", directory=str(directory), error=str(exc))
                    view = None
                self._view = view
            return view

    def _usable(self, view: CacheView | None, uid: str | None, model: str) -> bool:
        return (
            view is not None
            and uid is not None
            and view.manifest.index_uid == uid
            and view.manifest.model == model
        )

    def _rebuild(self, conn: sqlite3.Connection, db_path: Path, model: str) -> CacheView | None:
        directory = vectors_dir(db_path)
        failed_at = self._rebuild_failed_at
        if failed_at is not None and time.monotonic() - failed_at < REBUILD_RETRY_SECONDS:
            return None
        if not self.may_publish or _index_state(conn)[1] is None:
            return None  # Publishing would write: serve from memory instead.
        try:
            publish(db_path, source="search-rebuild", readonly_db=True)
        except (OSError, sqlite3.Error) as exc:
            log.warning("vectors.rebuild_failed", db_path=str(db_path), error=str(exc))
            self._rebuild_failed_at = time.monotonic()
            return None
        self._rebuild_failed_at = None
        _generation, uid = _index_state(conn)
        view = self._current(directory)
        return view if self._usable(view, uid, model) else None

    def _memory_fallback(self, conn: sqlite3.Connection, generation: int, model: str) -> CacheView:
        view = self._memory
        if view is None or view.manifest.generation != generation or view.manifest.model != model:
            view = memory_view(conn, model)
            self._memory = view
        return view

    def _refresh_later(self, db_path: Path) -> None:
        """Publish a delta in a background thread, at most once per interval."""
        now = time.monotonic()
        if not self.may_publish:
            return
        with self._lock:
            if self._refreshing or now - self._last_refresh < self._refresh_interval:
                return
            self._refreshing = True
            self._last_refresh = now

        def run() -> None:
            try:
                publish(db_path, source="search-refresh", blocking=False, readonly_db=True)
            except Exception as exc:
                log.warning("vectors.refresh_failed", db_path=str(db_path), error=str(exc))
            finally:
                cost = time.monotonic() - now
                with self._lock:
                    self._refreshing = False
                    self._refresh_interval = max(
                        REFRESH_MIN_INTERVAL_SECONDS, REFRESH_COST_FACTOR * cost
                    )

        threading.Thread(target=run, name="rifflux-vector-refresh", daemon=True).start()

    # -- search ----------------------------------------------------------------------

    def search(
        self,
        conn: sqlite3.Connection,
        db_path: Path,
        model: str,
        query: np.ndarray,
        limit: int,
    ) -> list[SemanticHit]:
        """The ``limit`` chunks most similar to ``query``; only chunks that exist."""
        if limit <= 0:
            return []
        generation, uid = _index_state(conn)
        view = self._current(vectors_dir(db_path))
        if not self._usable(view, uid, model):
            view = self._rebuild(conn, db_path, model)
            generation, uid = _index_state(conn)
            if view is None:
                view = self._memory_fallback(conn, generation, model)
        assert view is not None
        if view.manifest.generation == generation:
            return [SemanticHit(c.row_id, c.key, c.cosine) for c in view.search(query, limit)]
        self._refresh_later(db_path)
        return self._search_validated(conn, view, model, query, limit)

    def _search_validated(
        self,
        conn: sqlite3.Connection,
        view: CacheView,
        model: str,
        query: np.ndarray,
        limit: int,
    ) -> list[SemanticHit]:
        """Search a lagging view; drop hits whose chunk was deleted or rewritten since."""
        fetch = limit * STALE_OVERFETCH
        while True:
            candidates = view.search(query, fetch)
            valid = _still_current(conn, model, candidates)
            hits = [SemanticHit(c.row_id, c.key, c.cosine) for c in candidates if valid(c)]
            if len(hits) >= limit or len(candidates) < fetch:
                return hits[:limit]
            fetch *= 4

    # -- status ----------------------------------------------------------------------

    def status(self, conn: sqlite3.Connection, db_path: Path) -> dict[str, Any]:
        """``{state, generation, segments, rows, tombstones, ...}`` for index_status."""
        generation, uid = _index_state(conn)
        model = get_metadata(conn, "embedding_model")
        directory = vectors_dir(db_path)
        try:
            found = read_manifest(directory)
        except CacheUnusable:
            found = None
        manifest = found[0] if found else None
        if manifest is None or manifest.index_uid != uid or manifest.model != model:
            memory = self._memory
            in_memory = memory is not None and memory.manifest.generation == generation
            return {
                "state": "missing",
                "generation": None,
                "index_generation": generation,
                "segments": 0,
                "rows": memory.live_rows if in_memory and memory else 0,
                "tombstones": 0,
                "in_memory": in_memory,
                "path": str(directory),
            }
        if manifest.generation != generation:
            state = "stale"
        elif manifest.source == "search-rebuild":
            state = "rebuilt"
        else:
            state = "fresh"
        return {
            "state": state,
            "generation": manifest.generation,
            "index_generation": generation,
            "segments": len(manifest.segments),
            "rows": manifest.rows,
            "tombstones": manifest.tombstones,
            "source": manifest.source,
            "dim": manifest.dim,
            "path": str(directory),
        }


def _still_current(
    conn: sqlite3.Connection, model: str, candidates: list[Candidate]
) -> Callable[[Candidate], bool]:
    """A predicate: does the candidate's chunk row still exist, unchanged, with a vector?"""
    ids = sorted({c.row_id for c in candidates})
    current: dict[int, int] = {}
    for start in range(0, len(ids), READ_CHUNK):
        part = ids[start : start + READ_CHUNK]
        marks = ",".join("?" * len(part))
        rows = conn.execute(
            "SELECT c.id, f.path, c.chunk_index, c.embed_sha256 FROM chunks c "
            "JOIN files f ON f.id = c.file_id JOIN embeddings e ON e.chunk_id = c.chunk_id "
            f"WHERE e.model = ? AND c.id IN ({marks})",
            (model, *part),
        )
        current.update((int(r[0]), row_ident(r[0], r[1], r[2], r[3])) for r in rows)
    return lambda c: current.get(c.row_id) == c.ident
