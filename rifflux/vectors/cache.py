"""The front process's view of the vector cache: memory-mapped, checked on every search.

Invariants:

* Per search the cache costs one ``os.stat`` of the manifest (reload when its inode,
  mtime or size moved) and one SQLite read (the index generation and the cache uid).
* A search never returns a row the database does not hold at its generation: a fresh
  cache's rows are compared with the database once per loaded manifest
  (:func:`rows_mismatch`), a stale one's hits are kept only if their chunk row still has
  the same identity, a missing one is served from an in-memory copy built from SQLite.
* A damaged cache raises :class:`CacheCorrupt` with the reason (the verdict kept per
  manifest stat key, so it is hashed once); the search service then answers with
  lexical results and a warning. The reader does not repair: the next publish does.
* Readers never write: this module loads and reloads published generations and never
  publishes, never creates a file beside the database and never writes the database.

The states (fresh, stale, missing, corrupt, outdated formats): docs/architecture.md,
"The vector cache".
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

from rifflux.errors import CacheCorrupt, CacheUnusable
from rifflux.store.connection import transaction
from rifflux.store.reader import IndexReader, get_metadata
from rifflux.vectors.hnsw import DEFAULT_EF, search_verdict
from rifflux.vectors.publish import (
    INDEX_UID_KEY,
    index_head,
    list_rowids,
    list_rows,
    read_vectors,
)
from rifflux.vectors.scan import Candidate, search_segments
from rifflux.vectors.segments import (
    META_IDENT,
    META_ROWID,
    Manifest,
    Segment,
    StatKey,
    format_is_current,
    live_column,
    load_segment,
    manifest_stat_key,
    outdated_because,
    read_manifest,
    row_ident,
    segment_meta,
    vectors_dir,
)

log = structlog.get_logger(__name__)

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
    stat_key: StatKey | None

    @property
    def live_rows(self) -> int:
        return sum(s.live for s in self.segments)

    @property
    def outdated(self) -> bool:
        """A format older than the writers' (no checksums, float32): served as stale."""
        return not format_is_current(self.manifest.format)

    def changed_file(self) -> str | None:
        """A mapped file written to or replaced since it was verified, if any."""
        for segment in self.segments:
            name = segment.changed_file()
            if name is not None:
                return name
        return None

    def search(
        self,
        query: np.ndarray,
        limit: int,
        admitted: np.ndarray | None = None,
        check: Callable[[], None] | None = None,
    ) -> list[Candidate]:
        return search_segments(self.segments, query, limit, admitted, check)


def open_view(directory: Path, ef: int | None = None) -> CacheView | None:
    """Load the current manifest, verify and map its segments; None when there is none.

    ``ef``: also map the segments' HNSW graphs, searched with that breadth (None: scan
    every segment exactly).

    Raises CacheCorrupt when a file is damaged or missing, CacheUnusable when the
    manifest's format is not readable by this version.
    """
    for _ in range(OPEN_ATTEMPTS):
        found = read_manifest(directory)
        if found is None:
            return None
        manifest, stat_key = found
        try:
            segments = tuple(
                load_segment(directory, s, manifest.dim, manifest.format, ef)
                for s in manifest.segments
            )
        except FileNotFoundError:
            continue  # A newer manifest replaced this one and its files were collected.
        return CacheView(manifest, segments, stat_key)
    raise CacheCorrupt("the manifest names files that do not exist")


def rows_mismatch(
    conn: sqlite3.Connection, view: CacheView, *, thorough: bool = False
) -> str | None:
    """Why the view's rows are not the database's rows at its generation, or None.

    Compares the live rows' rowids with the rowids of the chunks that have a vector
    (~17 ms per 24k rows): writers bump the generation in the transaction that changes
    any row, so at an equal generation equal rowids mean equal rows. ``thorough`` compares
    full identities (rowid, path, chunk_index, embed hash; ~150 ms per 24k rows), which
    also catches a database swapped for another with the same uid and generation.
    None too when the database has moved past the view's generation (nothing to compare).
    """
    with read_transaction(conn):
        generation, model, dim = index_head(conn)
        if generation != view.manifest.generation:
            return None
        if thorough:
            db = np.sort(list_rows(conn, generation, model, dim).idents)
        else:
            db = list_rowids(conn, model, dim)
    cached = live_column(view.segments, META_IDENT if thorough else META_ROWID)
    if np.array_equal(cached, db):
        return None
    extra = int(np.isin(cached, db, invert=True).sum())
    absent = int(np.isin(db, cached, invert=True).sum())
    what = "row identities" if thorough else "row ids"
    return (
        f"the cached {what} do not match the database at generation {generation} "
        f"({cached.shape[0]} cached, {db.shape[0]} in the database; "
        f"{extra} unknown to it, {absent} not cached)"
    )


def _index_state(conn: sqlite3.Connection) -> tuple[int, str | None]:
    """(generation, cache uid) in one read."""
    return IndexReader(conn).generation_and_uid()


@contextlib.contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One consistent snapshot for several reads (joins a transaction already open)."""
    with transaction(conn, write=False):
        yield


def memory_view(conn: sqlite3.Connection, model: str) -> CacheView:
    """What a missing cache is served from: one in-memory segment read from SQLite."""
    with read_transaction(conn):
        db = list_rows(conn, *index_head(conn))
        vectors = (
            read_vectors(conn, db.rowids, model, db.dim)
            if db.model == model
            else np.zeros((0, db.dim), np.int8)
        )
        uid = get_metadata(conn, INDEX_UID_KEY) or ""
    meta = segment_meta(db.rowids, db.idents, db.path_ordinals, db.chunk_indexes, vectors)
    segment = Segment(vectors, meta, tuple(db.path_names))
    manifest = Manifest(uid, db.generation, db.model, db.dim, "memory", (), time.time())
    return CacheView(manifest, (segment,), None)


class VectorCache:
    """Holds the current view for one index and keeps it current; thread-safe.

    ``vector_index`` (``RIFFLUX_VECTOR_INDEX``): ``exact`` scans every row and ignores
    HNSW graphs; ``auto`` and ``hnsw`` search a segment's graph when it has one (the
    publisher decides which do), with breadth ``hnsw_ef``.
    """

    def __init__(self, *, vector_index: str = "auto", hnsw_ef: int = DEFAULT_EF) -> None:
        self._mode = vector_index
        self._ef: int | None = None if vector_index == "exact" else hnsw_ef
        self._view: CacheView | None = None
        # (manifest stat key, reason) of the last manifest found corrupt.
        self._corrupt: tuple[StatKey, str] | None = None
        # Manifest stat key whose rows were found equal to the database's.
        self._rows_checked: StatKey | None = None
        self._memory: CacheView | None = None
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Drop the loaded view and every verdict: the next use verifies from scratch."""
        with self._lock:
            self._view = None
            self._corrupt = None
            self._rows_checked = None

    # -- the view --------------------------------------------------------------------

    def _current(self, directory: Path) -> CacheView | None:
        """The loaded view, reloaded if the manifest or a mapped file changed (stats only).

        Raises CacheCorrupt (remembered until the manifest changes).
        """
        view = self._view
        key = manifest_stat_key(directory)
        if (
            view is not None
            and key is not None
            and view.stat_key == key
            and view.changed_file() is None
        ):
            return view
        corrupt = self._corrupt
        if corrupt is not None and key is not None and corrupt[0] == key:
            raise CacheCorrupt(corrupt[1])
        with self._lock:
            view = self._view
            key = manifest_stat_key(directory)
            if view is not None and view.stat_key == key and view.changed_file() is None:
                return view
            self._view = None
            try:
                view = open_view(directory, self._ef)
            except CacheCorrupt as exc:
                log.warning("vectors.cache_corrupt", directory=str(directory), reason=str(exc))
                if key is not None:
                    self._corrupt = (key, str(exc))
                raise
            except CacheUnusable as exc:
                log.warning("vectors.cache_unusable", directory=str(directory), error=str(exc))
                view = None
            self._view = view
            return view

    def _check_rows(
        self, conn: sqlite3.Connection, view: CacheView, *, thorough: bool = False
    ) -> None:
        """Compare a fresh view's rows with the database once; raise CacheCorrupt if unequal."""
        if view.stat_key is None or (self._rows_checked == view.stat_key and not thorough):
            return
        reason = rows_mismatch(conn, view, thorough=thorough)
        if reason is None:
            self._rows_checked = view.stat_key
            return
        log.warning("vectors.cache_corrupt", reason=reason)
        with self._lock:
            self._corrupt = (view.stat_key, reason)
            if self._view is view:
                self._view = None
        raise CacheCorrupt(reason)

    def _usable(self, view: CacheView | None, uid: str | None, model: str | None) -> bool:
        return (
            view is not None
            and uid is not None
            and view.manifest.index_uid == uid
            and view.manifest.model == model
        )

    def _memory_fallback(self, conn: sqlite3.Connection, generation: int, model: str) -> CacheView:
        view = self._memory
        if view is None or view.manifest.generation != generation or view.manifest.model != model:
            view = memory_view(conn, model)
            self._memory = view
        return view

    # -- search ----------------------------------------------------------------------

    def search(
        self,
        conn: sqlite3.Connection,
        db_path: Path,
        model: str,
        query: np.ndarray,
        limit: int,
        admitted: np.ndarray | None = None,
        check: Callable[[], None] | None = None,
    ) -> list[SemanticHit]:
        """The ``limit`` chunks most similar to ``query``; only chunks that exist.

        ``admitted`` (sorted chunk rowids, from a search filter): only those rows are
        scored. ``check`` (a search's deadline) is called between segments and rounds.
        Raises CacheCorrupt instead of searching a damaged cache.
        """
        if limit <= 0:
            return []
        generation, uid = _index_state(conn)
        view = self._current(vectors_dir(db_path))
        if view is None or not self._usable(view, uid, model):
            view = self._memory_fallback(conn, generation, model)
        if view.manifest.generation == generation and not view.outdated:
            self._check_rows(conn, view)
            hits = view.search(query, limit, admitted, check)
            return [SemanticHit(c.row_id, c.key, c.cosine) for c in hits]
        return self._search_validated(conn, view, model, query, limit, admitted, check)

    def _search_validated(
        self,
        conn: sqlite3.Connection,
        view: CacheView,
        model: str,
        query: np.ndarray,
        limit: int,
        admitted: np.ndarray | None = None,
        check: Callable[[], None] | None = None,
    ) -> list[SemanticHit]:
        """Search a lagging view; drop hits whose chunk was deleted or rewritten since."""
        fetch = limit * STALE_OVERFETCH
        while True:
            candidates = view.search(query, fetch, admitted, check)
            valid = _still_current(conn, model, candidates)
            hits = [SemanticHit(c.row_id, c.key, c.cosine) for c in candidates if valid(c)]
            if len(hits) >= limit or len(candidates) < fetch:
                return hits[:limit]
            fetch *= 4

    # -- status ----------------------------------------------------------------------

    def status(
        self, conn: sqlite3.Connection, db_path: Path, *, thorough: bool = False
    ) -> dict[str, Any]:
        """``{state, generation, segments, rows, tombstones, ...}`` for index_status.

        Verifies the cache as a search would (checksums, rows against the database), so
        ``state`` is ``corrupt``, with a ``reason``, exactly when searches refuse it;
        ``thorough`` compares full row identities (``rifflux status --check``).
        ``segment_search`` (with a manifest): per segment, how this reader searches it
        (:func:`segment_search`); ``approximate_segments``: how many by their graph.
        """
        generation, uid = _index_state(conn)
        model = get_metadata(conn, "embedding_model")
        directory = vectors_dir(db_path)
        try:
            view = self._current(directory)
            if (
                view is not None
                and self._usable(view, uid, model)
                and view.manifest.generation == generation
                and not view.outdated
            ):
                self._check_rows(conn, view, thorough=thorough)
        except CacheCorrupt as exc:
            return _corrupt_status(directory, generation, str(exc), self._mode)
        manifest = view.manifest if view is not None else None
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
        reason = None
        if manifest.generation != generation or not format_is_current(manifest.format):
            state = "stale"
            if not format_is_current(manifest.format):
                reason = (
                    f"cache format {manifest.format} {outdated_because(manifest.format)}; "
                    "the next index job republishes it"
                )
        else:
            state = "fresh"
        status: dict[str, Any] = {"state": state}
        if reason is not None:
            status["reason"] = reason
        status.update(_manifest_status(manifest, generation, directory, self._mode))
        return status


def segment_search(manifest: Manifest, mode: str) -> list[dict[str, Any]]:
    """Per segment of ``manifest``: ``{id, rows (live), search: "hnsw" | "exact",
    reason (why not "hnsw", else None), recall (its graph's measured recall@10, or
    None)}`` as a reader under ``RIFFLUX_VECTOR_INDEX=mode`` searches it."""
    out = []
    for ref in manifest.segments:
        search, reason = search_verdict(mode, ref.rows, ref.hnsw is not None, ref.hnsw_recall)
        out.append(
            {
                "id": ref.id,
                "rows": ref.rows - ref.dead_rows,
                "search": search,
                "reason": reason,
                "recall": ref.hnsw_recall,
            }
        )
    return out


def _corrupt_status(directory: Path, generation: int, reason: str, mode: str) -> dict[str, Any]:
    status: dict[str, Any] = {"state": "corrupt", "reason": reason}
    try:
        found = read_manifest(directory)
    except CacheUnusable:
        found = None
    if found is None:
        status.update(generation=None, index_generation=generation, path=str(directory))
    else:
        status.update(_manifest_status(found[0], generation, directory, mode))
    return status


def _manifest_status(
    manifest: Manifest, generation: int, directory: Path, mode: str
) -> dict[str, Any]:
    searched = segment_search(manifest, mode)
    return {
        "generation": manifest.generation,
        "index_generation": generation,
        "segments": len(manifest.segments),
        "rows": manifest.rows,
        "tombstones": manifest.tombstones,
        "source": manifest.source,
        "dim": manifest.dim,
        "path": str(directory),
        "approximate_segments": sum(1 for s in searched if s["search"] == "hnsw"),
        "segment_search": searched,
    }


def _still_current(
    conn: sqlite3.Connection, model: str, candidates: list[Candidate]
) -> Callable[[Candidate], bool]:
    """A predicate: does the candidate's chunk row still exist, unchanged, with a vector?"""
    ids = sorted({c.row_id for c in candidates})
    rows = IndexReader(conn).vector_rows(model, None, ids)
    current = {int(r[0]): row_ident(r[0], r[1], r[2], r[3]) for r in rows}
    return lambda c: current.get(c.row_id) == c.ident
