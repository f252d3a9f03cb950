"""Publish the vector cache for the index's current generation.

Invariants:

* Only writers publish: a job's finalize (``rifflux.index.pipeline.finalize``), the end of
  an in-process :class:`~rifflux.index.indexer.Indexer` run, ``rifflux index --repair``.
  Searches never do, so this is the one place that writes the cache directory and
  creates the database's cache uid. One :class:`Publish` owns one publish under the
  lock; its ``run`` is the steps, in order.
* One publish reads the database once, in one read transaction: rows, vectors and
  generation come from one state. It reads in proportion to the change (the chunk
  rowids logged since its manifest's position, :mod:`rifflux.store.changes`) and lists
  every row only when it cannot trust the log; either way the result is the cache a full
  listing would build (``tests/vectors/test_vector_publish_delta.py``).
* Memory is bounded: one block of ``READ_BLOCK_ROWS`` vectors and ~80 bytes a row.
* A file is deleted only when neither the new nor the previous manifest names it, and a
  cache that cannot be trusted (corrupt, mismatched, an older format) is republished in
  full, never built on.

Segments, compaction, reader safety and repair: docs/architecture.md, "The vector cache".
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import secrets
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np
import structlog

from rifflux.config import Settings
from rifflux.errors import CacheCorrupt, CacheUnusable
from rifflux.store import changes
from rifflux.store.connection import (
    INDEX_UID_KEY,
    open_index,
    transaction,
)
from rifflux.store.reader import IndexReader
from rifflux.store.vector_blobs import int8_rows
from rifflux.store.writer import IndexWriter
from rifflux.vectors.hnsw import DEFAULT_EF, SUFFIX, wants_graph
from rifflux.vectors.pages import drop_pages
from rifflux.vectors.segments import (
    LOCK_NAME,
    MANIFEST_NAME,
    META_IDENT,
    META_INDEX,
    META_PATH,
    META_ROWID,
    TMP_PREFIX,
    Manifest,
    Segment,
    SegmentRef,
    StatKey,
    attach_hnsw,
    check_hnsw,
    files_as_published,
    format_is_current,
    live_column,
    load_segment,
    map_vectors,
    read_manifest,
    row_idents,
    stat_key,
    vectors_dir,
    write_dead,
    write_manifest,
    write_segment_blocks,
)

log = structlog.get_logger(__name__)

# Rewrite everything as one base segment when delta rows + tombstones exceed this
# fraction of the base segment's rows.
COMPACT_FRACTION = 0.2
# Fold all delta segments into one when a publish would leave more segments than this,
# the base segments counted as one (so at most MAX_SEGMENTS - 1 deltas at any size).
MAX_SEGMENTS = 8
# Rows of one base segment: a full publish writes the rows in segments of at most this
# many. The rows themselves go through memory a block at a time whatever this is; it
# bounds what one graph build holds (usearch keeps its segment's rows and links: a whole
# 789k-row segment was one graph, now at most 96 MiB of int8 rows at 384 dimensions).
# 2**18 is above HNSW_MIN_ROWS (200k, rifflux.vectors.hnsw): under ``auto`` every full
# base segment gets a graph, one per 256k rows, and only the last one (the remainder) may
# be small enough to be scanned exactly instead; halves of 262k would get none.
BASE_SEGMENT_ROWS = 262_144
# List every row instead of the logged ones when the change log holds more entries since
# the manifest than this fraction of its rows (a large job: ~2 entries per rewritten
# chunk; listing reads a row in ~6 us, a lookup by rowid costs more).
LIST_ALL_FRACTION = 0.5
# Vectors read from the database (and quantized, for an older float32 index) per step.
READ_BLOCK_ROWS = 4_096
# Temporary files of a publisher that died are removed after this many seconds.
TMP_MAX_AGE_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class PublishResult:
    manifest: Manifest
    # "unchanged", "full", "fold" or "delta".
    action: str
    rows_added: int
    rows_removed: int
    # Why the previous cache was discarded and everything republished (None: it was not).
    discarded: str | None = None
    # Chunk rows looked up in the database: every row with a vector when the publish
    # listed them all, the rowids logged since the manifest's position otherwise.
    rows_read: int = 0


@dataclass(slots=True)
class DbRows:
    """The chunk rows that have a vector of the index's model, sorted by (path, index).

    A row's path is ``path_names[path_ordinals[row]]``: ``path_names`` sorted and
    distinct (one str a row was ~100 bytes a row, 80 MB at 789k rows)."""

    generation: int
    model: str | None
    dim: int
    rowids: np.ndarray
    idents: np.ndarray
    path_ordinals: np.ndarray
    path_names: list[str]
    chunk_indexes: np.ndarray


@contextlib.contextmanager
def publish_lock(directory: Path, *, blocking: bool = True) -> Iterator[bool]:
    """An exclusive flock on ``publish.lock``; yields False if busy and not blocking."""
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def ensure_index_uid(conn: sqlite3.Connection) -> str:
    """The database's cache uid, created on first use (no generation bump)."""
    uid = IndexReader(conn).metadata(INDEX_UID_KEY)
    if uid:
        return uid
    return IndexWriter(conn).set_metadata_if_absent(INDEX_UID_KEY, secrets.token_hex(8))


def index_head(conn: sqlite3.Connection) -> tuple[int, str | None, int]:
    """(generation, embedding model, dimension) of the index."""
    reader = IndexReader(conn)
    model = reader.metadata("embedding_model")
    return reader.generation(), model, reader.embedding_dim(model) if model else 0


def list_rows(conn: sqlite3.Connection, generation: int, model: str | None, dim: int) -> DbRows:
    """Every chunk row with a ``model`` vector (call inside the read transaction)."""
    return _db_rows(
        generation, model, dim, IndexReader(conn).vector_rows(model, dim) if model else ()
    )


def changed_rows(
    conn: sqlite3.Connection, generation: int, model: str, dim: int, since: int
) -> tuple[np.ndarray, DbRows]:
    """The sorted chunk rowids logged after change-log position ``since``, and those of
    them that have a ``model`` vector now, sorted by (path, chunk_index) (call inside the
    read transaction)."""
    changed = np.unique(np.fromiter(changes.changed_rowids(conn, since), dtype=np.int64))
    rows = IndexReader(conn).vector_rows(model, dim, changed.tolist())
    return changed, _db_rows(generation, model, dim, rows)


def _db_rows(generation: int, model: str | None, dim: int, rows: Iterable[sqlite3.Row]) -> DbRows:
    """:class:`DbRows` of (rowid, path, chunk_index, embed hash) rows, sorted by (path,
    chunk_index) whatever their order: ``READ_BLOCK_ROWS`` rows at a time are turned into
    compact int64 columns (each path once, every identity of the block hashed in one
    pass, :func:`~rifflux.vectors.segments.row_idents`), then the columns are sorted. A
    full listing comes sorted already (the sort is then ~0.1 s of its 2.3 s at 800k
    rows); a job's publish reads hundreds of thousands of changed rows in rowid order:
    sorting them as Python rows held every row's path and hex hash strings (a worker's
    316 MiB peak at 100k files)."""
    rowids: list[np.ndarray] = []
    idents: list[np.ndarray] = []
    ordinals: list[np.ndarray] = []
    indexes: list[np.ndarray] = []
    ordinal_of: dict[str, int] = {}
    listed = iter(rows)
    while block := list(islice(listed, READ_BLOCK_ROWS)):
        ids, paths, chunk_indexes, hashes = zip(*block, strict=True)
        del block
        rowids.append(np.array(ids, dtype=np.int64))
        idents.append(row_idents(ids, paths, chunk_indexes, hashes))
        at = (ordinal_of.setdefault(path, len(ordinal_of)) for path in paths)
        ordinals.append(np.fromiter(at, np.int64, len(paths)))
        indexes.append(np.array(chunk_indexes, dtype=np.int64))
    names = sorted(ordinal_of)
    # rank[k]: where the path first seen k-th stands in sorted order.
    rank = np.empty(len(names), dtype=np.int64)
    rank[np.fromiter((ordinal_of[name] for name in names), np.int64, len(names))] = np.arange(
        len(names)
    )
    path_ordinals = rank[_column(ordinals)]
    chunk_indexes_all = _column(indexes)
    order = np.lexsort((chunk_indexes_all, path_ordinals))
    return DbRows(
        generation=generation,
        model=model,
        dim=dim,
        rowids=_column(rowids)[order],
        idents=_column(idents)[order],
        path_ordinals=path_ordinals[order],
        path_names=names,
        chunk_indexes=chunk_indexes_all[order],
    )


def _column(blocks: list[np.ndarray]) -> np.ndarray:
    """The blocks of one int64 column as one array; the list emptied (:func:`_joined`)."""
    return _joined(blocks) if blocks else np.zeros(0, np.int64)


def list_rowids(conn: sqlite3.Connection, model: str | None, dim: int) -> np.ndarray:
    """Sorted rowids of the chunks with a ``model`` vector: ~17 ms per 24k rows, a sixth
    of :func:`list_rows` (no paths, no hashing)."""
    if not model:
        return np.zeros(0, np.int64)
    return np.sort(np.fromiter(IndexReader(conn).vector_rowids(model, dim), dtype=np.int64))


def read_vectors(conn: sqlite3.Connection, rowids: np.ndarray, model: str, dim: int) -> np.ndarray:
    """The int8 rows (:func:`~rifflux.vectors.quantize.quantize_rows`) of ``rowids``, in
    that order: as stored, or quantized from the float32 rows of an older index
    (rifflux.store.vector_blobs).

    Read ``READ_BLOCK_ROWS`` at a time into the int8 result: the float32 rows of a whole
    full rewrite (1.2 GB at 789k rows) and a dict of every rowid were the largest part of
    a publishing worker's 1.6 GB peak. Each row is quantized on its own, so the blocks
    change no bit.
    """
    out = np.empty((len(rowids), dim), dtype=np.int8)
    reader = IndexReader(conn)
    for start in range(0, len(rowids), READ_BLOCK_ROWS):
        block = rowids[start : start + READ_BLOCK_ROWS]
        where = {int(r): i for i, r in enumerate(block)}
        blobs = reader.vectors_of_rowids(where, model)
        out[start : start + len(block)] = int8_rows(
            ((where[int(rowid)], blob) for rowid, blob in blobs), len(block), dim
        )
    return out


def _open_current(directory: Path) -> tuple[Manifest | None, list[Segment], str | None]:
    """The current manifest, its verified segments, and why they may not be reused.

    (None, [], None) when there is no manifest; segments are [] whenever a reason is given.
    """
    try:
        found = read_manifest(directory)
        if found is None:
            return None, [], None
        manifest = found[0]
        if not format_is_current(manifest.format):
            return manifest, [], f"cache format {manifest.format} is outdated"
        # Graphs are verified (ef given) like every file a publisher reuses.
        segments = [
            load_segment(directory, s, manifest.dim, manifest.format, DEFAULT_EF)
            for s in manifest.segments
        ]
        return manifest, segments, None
    except (CacheUnusable, FileNotFoundError) as exc:
        log.warning("vectors.manifest_unusable", directory=str(directory), error=str(exc))
        return None, [], str(exc) or type(exc).__name__


def publish(
    db_path: Path | str,
    *,
    source: str,
    blocking: bool = True,
    full: bool = False,
    vector_index: str | None = None,
    trust_stamps: bool = False,
) -> PublishResult | None:
    """Bring the cache up to the database's current generation.

    ``full`` rewrites every row from the database whatever the cache holds.
    ``trust_stamps`` answers "unchanged" from stat keys alone (see :func:`_as_published`).
    ``vector_index`` (auto, exact, hnsw; default the :class:`Settings` default; callers
    pass their settings' or their job's) decides which
    segments get an HNSW graph (:func:`~rifflux.vectors.hnsw.wants_graph`); a segment
    kept from an earlier publish gets its graph too if it lacks one. Every graph checks
    its recall when built and is refused below ``RECALL_FLOOR`` (:mod:`rifflux.vectors.
    hnsw`); an unchecked graph from an older publisher is measured, not rebuilt.
    Returns None only when ``blocking`` is False and another publisher holds the lock.
    """
    mode = vector_index or Settings().vector_index
    directory = vectors_dir(db_path)
    directory.mkdir(parents=True, exist_ok=True)
    with publish_lock(directory, blocking=blocking) as locked:
        if not locked:
            return None
        conn = open_index(db_path)
        try:
            if trust_stamps and not full:
                current = _as_published(conn, directory, mode)
                if current is not None:
                    return PublishResult(current, "unchanged", 0, 0)
            return Publish(conn, directory, source, full=full, mode=mode).run()
        finally:
            conn.close()


def publish_quietly(
    db_path: Path | str,
    *,
    source: str,
    vector_index: str | None = None,
    trust_stamps: bool = False,
) -> PublishResult | None:
    """:func:`publish` for writers: a cache failure is logged, never raised.

    Searches keep serving a stale cache (validating each hit) or a missing one from
    memory until the next writer publishes.
    """
    try:
        return publish(db_path, source=source, vector_index=vector_index, trust_stamps=trust_stamps)
    except Exception as exc:
        log.exception("vectors.publish_failed", db_path=str(db_path), error=str(exc))
        return None


def _as_published(conn: sqlite3.Connection, directory: Path, mode: str) -> Manifest | None:
    """The current manifest if it is the database's at its generation and no file of it
    was touched since it was published (stat keys); None: decide by reading the cache.

    A few stats and one read of the index head: a job that changed nothing (1M rows: 2.7 s
    of hashing segments and listing every rowid, twice per finalize) skips both. What it
    trusts: that a cache file whose device, inode, mtime and size are as its publisher
    left them holds what was published (the per-process verification cache,
    :func:`~rifflux.vectors.segments.verify_file`, trusts the same key), and that every
    row change bumped the generation. Damage written into a file moves its mtime, so a
    no-op job still repairs it; rows changed without a new generation are found by
    readers (``rows_mismatch``) and repaired by ``rifflux index --repair``.
    """
    try:
        found = read_manifest(directory)
    except CacheUnusable:
        return None
    if found is None:
        return None
    manifest = found[0]
    if not format_is_current(manifest.format) or _graphs_missing(manifest.segments, mode):
        return None
    with transaction(conn, write=False):
        uid = IndexReader(conn).metadata(INDEX_UID_KEY)
        generation, model, dim = index_head(conn)
    head = (manifest.index_uid, manifest.generation, manifest.model, manifest.dim)
    if head != (uid, generation, model, dim) or not files_as_published(directory, manifest):
        return None
    return manifest


def _stamps(
    directory: Path, names: set[str], segments: list[Segment]
) -> tuple[tuple[str, StatKey], ...]:
    """Stat keys of the files a new manifest names: as they are now, for files written
    by this publish, and as verified, for files kept from the last manifest. () if a kept
    file changed since it was verified (nothing may vouch for it)."""
    verified = {Path(path).name: key for segment in segments for path, key in segment.stamps}
    stamps = []
    for name in sorted(names):
        key = stat_key(directory / name)
        if key is None or verified.get(name, key) != key:
            return ()
        stamps.append((name, key))
    return tuple(stamps)


def _restamped(directory: Path, manifest: Manifest, segments: list[Segment]) -> Manifest:
    """``manifest``, rewritten with the stat keys of its files just verified if it lacks
    them (an older publisher's, or a file copied back): so the next job that changes
    nothing takes the stat-key path instead of this full check."""
    if files_as_published(directory, manifest):
        return manifest
    stamps = _stamps(directory, manifest.files(), segments)
    if not stamps:
        return manifest
    manifest = dataclasses.replace(manifest, stamps=stamps)
    write_manifest(directory, manifest)
    return manifest


@dataclass(slots=True)
class _Read:
    """What a publish read in its one read transaction: the database's rows and the plan
    that diffs them against the reused segments (the vectors the cache lacks are read
    segment by segment, in the same transaction, by :meth:`Publish.write_segments`)."""

    db: DbRows
    plan: _Plan
    # Chunk rows looked up (PublishResult.rows_read), and whether that was every row.
    rows_read: int
    listed: bool


@dataclass(slots=True)
class _Written:
    """The segments of the new manifest, each with its int8 rows (memory-mapped) to build
    a graph from, and how many of the leading ones are base segments."""

    segments: list[tuple[SegmentRef, np.ndarray]]
    bases: int


class Publish:
    """One publish, under the publish lock: owns its steps as Tantivy's IndexWriter owns
    a commit. :meth:`run` is the whole sequence; each step is one method.

    1. :meth:`open_current`: the current manifest and its verified segments, or why they
       may not be reused;
    2. in one read transaction, :meth:`unchanged` (the cache already is the database's
       generation: nothing to write) or :meth:`read_rows` (rows and plan), then
    3. :meth:`write_segments`: new tombstones of kept segments, then the new segments,
       one at a time (their missing vectors read from the same snapshot);
    4. :meth:`attach_graphs`: an HNSW graph for each segment the mode wants one for,
       its recall measured and the graph refused below ``RECALL_FLOOR``;
    5. :meth:`write_manifest`, then :meth:`collect_garbage` of files neither the new nor
       the previous manifest names, then :meth:`report`.
    """

    def __init__(
        self, conn: sqlite3.Connection, directory: Path, source: str, *, full: bool, mode: str
    ) -> None:
        self.conn = conn
        self.directory = directory
        self.source = source
        self.full = full
        self.mode = mode
        self.started = time.perf_counter()
        self.uid = ""
        self.current: Manifest | None = None
        self.segments: list[Segment] = []
        # Why the current cache is not built on (None: it is, if it matches the head).
        self.discarded: str | None = None
        self.reusable = False
        # The index's change log as this publish's snapshot sees it (None: no log).
        self.log_head: changes.LogHead | None = None

    def run(self) -> PublishResult:
        self.uid = ensure_index_uid(self.conn)
        self.open_current()
        with transaction(self.conn, write=False):
            generation, model, dim = index_head(self.conn)
            self.log_head = changes.head(self.conn)
            self.reusable = self.matches_head(model, dim)
            unchanged = self.unchanged(generation, model, dim)
            if unchanged is not None:
                return unchanged
            read = self.read_rows(generation, model, dim)
            written = self.write_segments(read)
        refs = self.attach_graphs(written.segments)
        manifest = self.write_manifest(read.db, refs, written.bases)
        self.collect_garbage(manifest)
        self.prune_log(manifest)
        return self.report(manifest, read)

    def open_current(self) -> None:
        """Load the current manifest and its verified segments (:func:`_open_current`)."""
        self.current, self.segments, self.discarded = _open_current(self.directory)
        if self.full:
            self.discarded = "a full republish was asked for"

    def matches_head(self, model: str | None, dim: int) -> bool:
        """May the current segments be built on: sound, of this database and model?"""
        return (
            self.discarded is None
            and self.current is not None
            and self.current.index_uid == self.uid
            and self.current.model == model
            and self.current.dim == dim
        )

    def unchanged(self, generation: int, model: str | None, dim: int) -> PublishResult | None:
        """The result when the reusable cache already holds ``generation`` exactly and
        has the graphs the mode wants; None: publish. Cached rows that differ from the
        database's at the same generation are damage: nothing is reused then."""
        current = self.current
        if not self.reusable or current is None or current.generation != generation:
            return None
        # Writers bump the generation with every row change, so equal rowids at an
        # equal generation are equal rows; anything else is damage to republish.
        cached = live_column(self.segments, META_ROWID)
        listed = list_rowids(self.conn, model, dim)
        if not np.array_equal(cached, listed):
            self.discarded = f"the cached rows do not match the database at generation {generation}"
            self.reusable = False
            return None
        if _graphs_missing(current.segments, self.mode):
            return None
        restamped = _restamped(self.directory, current, self.segments)
        return PublishResult(restamped, "unchanged", 0, 0, rows_read=int(listed.shape[0]))

    def log_position(self) -> int | None:
        """The change-log position to read the changed rows from: the manifest's, when
        the cache is reused and the log holds every entry after it and not too many;
        None: list every row."""
        current, head = self.current, self.log_head
        if not self.reusable or current is None or current.changes is None or head is None:
            return None
        if not head.covers(current.changes):
            return None
        if head.last - current.changes > LIST_ALL_FRACTION * current.rows:
            return None
        return current.changes

    def bases(self) -> int:
        """How many of the reused segments are base segments (the rest are deltas)."""
        if self.current is None:
            return 0
        return min(self.current.base_segments, len(self.segments))

    def read_rows(self, generation: int, model: str | None, dim: int) -> _Read:
        """The rows that go into the new segments and the plan against the reused
        segments (call inside the read transaction): from the rows logged since the
        manifest's position (:func:`changed_rows`, :func:`_plan_changes`), or from every
        row (:func:`list_rows`, :func:`_plan`)."""
        if not self.reusable:
            self.segments = []
        since = self.log_position()
        if since is None or not model:
            db = list_rows(self.conn, generation, model, dim)
            plan = _plan(self.segments, self.bases(), db)
            rows_read, listed = int(db.rowids.shape[0]), True
        else:
            changed, fresh = changed_rows(self.conn, generation, model, dim, since)
            plan, db = _plan_changes(self.segments, self.bases(), changed, fresh)
            rows_read, listed = int(changed.shape[0]), False
        return _Read(db, plan, rows_read, listed)

    def write_segments(self, read: _Read) -> _Written:
        """The kept segments, with a new tombstone file where rows died, then the new ones
        (call inside the read transaction: it reads the vectors the cache lacks).

        A full publish writes its rows as base segments of ``BASE_SEGMENT_ROWS`` at most;
        a delta or a fold writes one delta segment. A segment's vectors are gathered
        (:func:`_gather_vectors`) ``READ_BLOCK_ROWS`` at a time, each block written
        (:func:`~rifflux.vectors.segments.write_segment_blocks`) and dropped before the
        next is read; the segment comes back memory-mapped, for its graph."""
        plan, db = read.plan, read.db
        refs = list(self.current.segments) if self.reusable and self.current is not None else []
        kept: list[tuple[SegmentRef, np.ndarray]] = []
        for i, ref in enumerate(refs):
            if i in plan.rewrite:
                continue
            if plan.dead[i].shape[0] != ref.dead_rows:
                dead_name, digest = write_dead(self.directory, ref.id, plan.dead[i])
                ref = ref.with_dead(dead_name, digest, int(plan.dead[i].shape[0]))
            kept.append((ref, self.segments[i].vectors))
        take = np.flatnonzero(plan.into_new)
        full = plan.action == "full"
        step = BASE_SEGMENT_ROWS if full else max(1, take.shape[0])
        for start in range(0, take.shape[0], step):
            part = take[start : start + step]
            blocks = (
                _gather_vectors(self.conn, self.segments, plan, db, part[at : at + READ_BLOCK_ROWS])
                for at in range(0, part.shape[0], READ_BLOCK_ROWS)
            )
            ordinals, names = _local_paths(db, part)
            ref = write_segment_blocks(
                self.directory,
                db.generation,
                db.dim,
                blocks,
                db.rowids[part],
                db.idents[part],
                ordinals,
                names,
                db.chunk_indexes[part],
            )
            kept.append((ref, map_vectors(self.directory, ref, db.dim)))
        bases = len(kept) if full else sum(i not in plan.rewrite for i in range(plan.bases))
        return _Written(kept, bases)

    def attach_graphs(self, kept: list[tuple[SegmentRef, np.ndarray]]) -> list[SegmentRef]:
        """The refs of ``kept``, each with the HNSW graph the mode wants it to have, its
        recall measured: built (and refused below the floor) where it has none, measured
        where an older publisher left one unchecked."""
        refs = []
        for ref, rows in kept:
            if _graphs_missing((ref,), self.mode):
                if ref.hnsw is not None:
                    try:
                        ref = check_hnsw(self.directory, ref, rows)
                    except CacheCorrupt as exc:
                        log.warning("vectors.hnsw_damaged", segment=ref.id, error=str(exc))
                        ref = attach_hnsw(self.directory, ref, rows)
                else:
                    ref = attach_hnsw(self.directory, ref, rows)
                drop_pages(rows)
            refs.append(ref)
        return refs

    def write_manifest(self, db: DbRows, refs: list[SegmentRef], bases: int) -> Manifest:
        """Write the manifest naming ``refs`` (the first ``bases`` of them base segments):
        the moment the new generation is published."""
        files = {name for ref in refs for name in ref.files()}
        manifest = Manifest(
            index_uid=self.uid,
            generation=db.generation,
            model=db.model,
            dim=db.dim,
            source=self.source,
            segments=tuple(refs),
            published_at=time.time(),
            stamps=_stamps(self.directory, files, self.segments if self.reusable else []),
            changes=self.log_head.last if self.log_head is not None else None,
            base_segments=bases,
        )
        write_manifest(self.directory, manifest)
        return manifest

    def collect_garbage(self, manifest: Manifest) -> None:
        """Delete files neither ``manifest`` nor the previous one names."""
        previous = self.current.files() if self.current else set()
        collect_garbage(self.directory, keep=manifest.files() | previous)

    def prune_log(self, manifest: Manifest) -> None:
        """Delete the change-log entries ``manifest`` includes (:func:`changes.prune`);
        a failure (the database busy past the retries) only leaves them for later."""
        if manifest.changes is None:
            return
        try:
            changes.prune(self.conn, manifest.changes)
        except sqlite3.Error as exc:
            log.warning("vectors.changes_prune_failed", error=str(exc))

    def report(self, manifest: Manifest, read: _Read) -> PublishResult:
        """Log ``vectors.published`` and return the result."""
        plan = read.plan
        log.info(
            "vectors.published",
            generation=read.db.generation,
            action=plan.action,
            segments=len(manifest.segments),
            rows=manifest.rows,
            tombstones=manifest.tombstones,
            added=int(plan.added.sum()),
            removed=plan.removed,
            rows_read=read.rows_read,
            read="all" if read.listed else "changes",
            discarded=self.discarded,
            duration_ms=round(1000 * (time.perf_counter() - self.started), 1),
        )
        return PublishResult(
            manifest,
            plan.action,
            int(plan.added.sum()),
            plan.removed,
            self.discarded,
            read.rows_read,
        )


def _graphs_missing(refs: tuple[SegmentRef, ...], mode: str) -> bool:
    """Does a segment lack the measured HNSW graph ``mode`` wants it to have? (No graph
    and no recall, or an unchecked graph; a refused graph's recall is kept: its rows are
    immutable, so rebuilding it would measure the same.)"""
    return any(ref.hnsw_recall is None and wants_graph(mode, ref.rows) for ref in refs)


@dataclass(slots=True)
class _Plan:
    action: str
    # Per database row: index of the segment holding it (-1: not cached) and position.
    source: np.ndarray
    position: np.ndarray
    added: np.ndarray
    removed: int
    # Per segment: all tombstoned positions after this publish.
    dead: list[np.ndarray]
    # Segments rewritten into the new segment.
    rewrite: set[int]
    # Per database row: goes into the new segment.
    into_new: np.ndarray
    # How many of the leading segments are base segments.
    bases: int


def _plan(segments: list[Segment], bases: int, db: DbRows) -> _Plan:
    n = db.idents.shape[0]
    source = np.full(n, -1, dtype=np.int64)
    position = np.full(n, -1, dtype=np.int64)
    dead: list[np.ndarray] = []
    removed = 0
    # Sorted once for every segment's membership test (np.isin sorts both sides anew
    # per call: 1.4 s of a one-file publish at 789k rows).
    db_sorted = np.sort(db.idents)
    for i, segment in enumerate(segments):
        live = np.flatnonzero(segment.live_mask())
        idents = np.asarray(segment.meta[live, META_IDENT])
        present = _members(idents, db_sorted)
        gone = live[~present]
        removed += int(gone.shape[0])
        dead.append(np.union1d(segment.dead, gone).astype(np.int64))
        kept, kept_idents = live[present], idents[present]
        if kept.shape[0]:
            order = np.argsort(kept_idents)
            at = np.searchsorted(kept_idents[order], db.idents)
            at = np.minimum(at, order.shape[0] - 1)
            hit = kept_idents[order][at] == db.idents
            source[hit] = i
            position[hit] = kept[order][at[hit]]
    added = source < 0
    action, rewrite = _compaction(segments, bases, dead, int(added.sum()))
    into_new = added | np.isin(source, sorted(rewrite))
    return _Plan(action, source, position, added, removed, dead, rewrite, into_new, bases)


def _compaction(
    segments: list[Segment], bases: int, dead: list[np.ndarray], added: int
) -> tuple[str, set[int]]:
    """The action (module docstring's policy) and the segments rewritten into the new
    ones, given the number of leading base segments, each segment's tombstones after
    this publish and the rows it adds."""
    live_rows = [s.size - d.shape[0] for s, d in zip(segments, dead, strict=True)]
    base_rows = sum(s.size for s in segments[:bases])
    delta_rows = sum(s.size for s in segments[bases:]) + added
    tombstones = sum(d.shape[0] for d in dead)
    if not segments or delta_rows + tombstones > COMPACT_FRACTION * base_rows:
        return "full", set(range(len(segments)))
    rewrite = {i for i, live in enumerate(live_rows) if live == 0}
    deltas = sum(i not in rewrite for i in range(bases, len(segments)))
    if added and 1 + deltas + 1 > MAX_SEGMENTS:
        return "fold", rewrite | set(range(bases, len(segments)))
    return "delta", rewrite


def _plan_changes(
    segments: list[Segment], bases: int, changed: np.ndarray, fresh: DbRows
) -> tuple[_Plan, DbRows]:
    """:func:`_plan` from the changed rows alone: ``changed`` the sorted rowids logged
    since the segments' position, ``fresh`` those of them with a vector now.

    A cached live row at a changed rowid stays if ``fresh`` has its identity and becomes a
    tombstone otherwise; a ``fresh`` row whose identity is not cached is added. Rows at
    other rowids did not change (the log is complete), so this is :func:`_plan`'s diff
    without the rows it would find equal. Returns the plan and the rows of the new
    segment (the added rows, and the live rows of the segments rewritten into it, taken
    from the segments), sorted by (path, chunk_index) as a full listing's."""
    fresh_sorted = np.sort(fresh.idents)
    dead: list[np.ndarray] = []
    stayed: list[np.ndarray] = []
    removed = 0
    for segment in segments:
        live = np.flatnonzero(segment.live_mask())
        at = live[_members(np.asarray(segment.meta[live, META_ROWID]), changed)]
        idents = np.asarray(segment.meta[at, META_IDENT])
        stays = _members(idents, fresh_sorted)
        gone = at[~stays]
        removed += int(gone.shape[0])
        dead.append(np.union1d(segment.dead, gone).astype(np.int64))
        stayed.append(idents[stays])
    cached = np.sort(np.concatenate(stayed)) if stayed else np.zeros(0, np.int64)
    added = ~_members(fresh.idents, cached)
    action, rewrite = _compaction(segments, bases, dead, int(added.sum()))
    db, source, position = _new_rows(segments, dead, rewrite, fresh, added)
    into_new = np.ones(source.shape[0], dtype=bool)
    plan = _Plan(action, source, position, source < 0, removed, dead, rewrite, into_new, bases)
    return plan, db


def _new_rows(
    segments: list[Segment],
    dead: list[np.ndarray],
    rewrite: set[int],
    fresh: DbRows,
    added: np.ndarray,
) -> tuple[DbRows, np.ndarray, np.ndarray]:
    """The new segment's rows: ``fresh`` rows where ``added``, and the live rows of the
    ``rewrite`` segments, sorted by (path, chunk_index); with each row's source segment
    (-1: ``fresh``) and position in it."""
    picked = np.flatnonzero(added)
    kept = []
    for i in sorted(rewrite):
        segment = segments[i]
        mask = np.ones(segment.size, dtype=bool)
        mask[dead[i]] = False
        kept.append((i, np.flatnonzero(mask)))
    vocabulary = sorted(set(fresh.path_names).union(*(segments[i].paths for i, _ in kept)))
    ordinal_of = {path: k for k, path in enumerate(vocabulary)}
    sources = [np.full(picked.shape[0], -1, dtype=np.int64)]
    positions = [np.full(picked.shape[0], -1, dtype=np.int64)]
    rowids, idents = [fresh.rowids[picked]], [fresh.idents[picked]]
    chunk_indexes = [fresh.chunk_indexes[picked]]
    fresh_local = np.fromiter((ordinal_of[p] for p in fresh.path_names), np.int64)
    ordinals = [fresh_local[fresh.path_ordinals[picked]]]
    for i, at in kept:
        # One column at a time, each its own array: views of a copied meta block kept
        # every column of it (squared norms too) alive until the end.
        meta = segments[i].meta
        local = np.fromiter((ordinal_of[p] for p in segments[i].paths), np.int64)
        sources.append(np.full(at.shape[0], i, dtype=np.int64))
        positions.append(at)
        rowids.append(np.asarray(meta[at, META_ROWID]))
        idents.append(np.asarray(meta[at, META_IDENT]))
        chunk_indexes.append(np.asarray(meta[at, META_INDEX]))
        ordinals.append(local[np.asarray(meta[at, META_PATH])])
        drop_pages(meta)
    path_ordinals = _joined(ordinals)
    indexes = _joined(chunk_indexes)
    order = np.lexsort((indexes, path_ordinals))
    db = DbRows(
        generation=fresh.generation,
        model=fresh.model,
        dim=fresh.dim,
        rowids=_joined(rowids)[order],
        idents=_joined(idents)[order],
        path_ordinals=path_ordinals[order],
        path_names=vocabulary,
        chunk_indexes=indexes[order],
    )
    return db, _joined(sources)[order], _joined(positions)[order]


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The parts as one array; the list emptied, so each part is freed as soon as the
    caller's next step no longer needs it (one column of a full rewrite at a time)."""
    joined = np.concatenate(parts)
    parts.clear()
    return joined


def _members(values: np.ndarray, sorted_pool: np.ndarray) -> np.ndarray:
    """``np.isin(values, sorted_pool)`` for an already sorted pool."""
    if sorted_pool.shape[0] == 0:
        return np.zeros(values.shape[0], dtype=bool)
    at = np.minimum(np.searchsorted(sorted_pool, values), sorted_pool.shape[0] - 1)
    return sorted_pool[at] == values


def _gather_vectors(
    conn: sqlite3.Connection, segments: list[Segment], plan: _Plan, db: DbRows, part: np.ndarray
) -> np.ndarray:
    """The int8 rows of ``db``'s rows at ``part`` (one new segment's, in database order):
    read from the database (:func:`read_vectors`) where the cache lacks them, copied
    from the reused segments otherwise, whose mapped pages are then dropped
    (:func:`~rifflux.vectors.segments.drop_pages`; call inside the read transaction)."""
    src = plan.source[part]
    new_rows = src < 0
    if new_rows.all():
        return _read_new(conn, db, part)
    out = np.empty((part.shape[0], db.dim), dtype=np.int8)
    if new_rows.any():
        out[new_rows] = _read_new(conn, db, part[new_rows])
    for i in np.unique(src[~new_rows]):
        mine = src == i
        out[mine] = segments[int(i)].vectors[plan.position[part[mine]]]
        drop_pages(segments[int(i)].vectors)
    return out


def _read_new(conn: sqlite3.Connection, db: DbRows, part: np.ndarray) -> np.ndarray:
    """:func:`read_vectors` of ``db``'s rows at ``part``."""
    if db.model is None:
        return np.zeros((part.shape[0], db.dim), np.int8)
    return read_vectors(conn, db.rowids[part], db.model, db.dim)


def _local_paths(db: DbRows, part: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The path ordinals and the sorted distinct paths of ``db``'s rows at ``part``, as
    one segment's ``paths.json`` holds them (only the paths its rows have)."""
    used, local = np.unique(db.path_ordinals[part], return_inverse=True)
    return local.astype(np.int64).reshape(-1), [db.path_names[k] for k in used]


def collect_garbage(directory: Path, *, keep: set[str]) -> int:
    """Delete cache files that ``keep`` does not name; old temporary files too."""
    removed = 0
    now = time.time()
    for entry in os.scandir(directory):
        name = entry.name
        if name in keep or name in (MANIFEST_NAME, LOCK_NAME):
            continue
        if name.startswith(TMP_PREFIX):
            try:
                if now - entry.stat().st_mtime < TMP_MAX_AGE_SECONDS:
                    continue
            except FileNotFoundError:
                continue
        elif not name.endswith((".npy", ".json", SUFFIX)):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry.path)
            removed += 1
    return removed
