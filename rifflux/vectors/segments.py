"""The on-disk vector cache: immutable segments, per-segment tombstones, one manifest.

Layout of ``<db file>.vectors/`` (next to the index database)::

    current.json                 the manifest, replaced atomically with os.replace
    <sid>.vec.npy                int8 [rows, dim], each row quantized to ±127
    <sid>.meta.npy               int64 [rows, 5]: chunk rowid, identity, path ordinal,
                                 chunk_index, the int8 row's exact squared norm; rows
                                 sorted by (path, chunk_index)
    <sid>.paths.json             the segment's distinct paths, sorted (ordinal → path)
    <sid>.dead-<token>.npy       int64 sorted row positions tombstoned in the segment
    <sid>.hnsw-<token>.usearch   optional HNSW graph (:mod:`rifflux.vectors.hnsw`)
    publish.lock                 flock held by whoever publishes

Invariants: every file a manifest names is immutable (never written twice under one
name) and has its sha256 in the manifest; a reader verifies a file before mapping it
(once per stat key) and re-stats mapped files on every search, so a mismatch raises
:class:`CacheCorrupt`, never a silently wrong search. Format versions are decided here
only (:func:`format_is_current`, :data:`READABLE_FORMATS`). This module is the format
only: searching loaded segments is :mod:`rifflux.vectors.scan`, publishing
:mod:`rifflux.vectors.publish`. The manifest's fields and the integrity design:
docs/architecture.md, "The manifest".
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import structlog

from rifflux.errors import CacheCorrupt, CacheUnusable
from rifflux.vectors.hnsw import (
    DEFAULT_EF,
    SAMPLE_ROWS,
    Graph,
    build_graph,
    graph_name,
    measure_recall,
    open_graph,
    recall_passes,
    sample_recall,
    save_graph,
)
from rifflux.vectors.quantize import inverse_norms, quantize_rows, squared_norms

log = structlog.get_logger(__name__)

MANIFEST_NAME = "current.json"
LOCK_NAME = "publish.lock"
TMP_PREFIX = ".tmp-"
# The format writers produce. 2: per-file sha256 in the manifest. 3: int8 rows and their
# squared norms (deterministic scores).
FORMAT_VERSION = 3
# Formats a reader maps. 1 (no checksums) and 2 (float32 rows) are served as stale until
# a writer republishes.
READABLE_FORMATS = (1, 2, 3)
# The first format whose rows are int8 with a squared-norm meta column.
INT8_FORMAT = 3
# Files verified by this process, keyed by (path, device, inode, size, mtime_ns, digest).
VERIFIED_MAX = 4096
# Bytes of a segment's array handed to the file per write (no copy of the whole array).
WRITE_BLOCK_BYTES = 1 << 20

# Columns of ``<sid>.meta.npy`` (META_SQNORM from format 3 on).
META_ROWID, META_IDENT, META_PATH, META_INDEX, META_SQNORM = range(5)
META_COLUMNS = 5
OLD_META_COLUMNS = 4


def format_is_current(fmt: int) -> bool:
    """Does a manifest of format ``fmt`` need no republish? (The one version check.)"""
    return fmt == FORMAT_VERSION


def outdated_because(fmt: int) -> str:
    """What an outdated format lacks, for a status reason."""
    return "has no checksums" if fmt < 2 else "has float32 rows, not int8"


StatKey = tuple[int, int, int, int]
"""(device, inode, mtime_ns, size) of a file: any write to it or replacement of it moves
one of them (an ``os.replace`` brings another inode, a write the mtime)."""


def stat_key_of(st: os.stat_result) -> StatKey:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def stat_key(path: Path | str) -> StatKey | None:
    """The file's :data:`StatKey`; None if it cannot be stat'ed (gone, no permission):
    a file that cannot be stat'ed never has the key it was verified or published with.
    The one stat key of the vector cache, its readers and the search service."""
    try:
        return stat_key_of(os.stat(path))
    except OSError:
        return None


def vectors_dir(db_path: Path | str) -> Path:
    db = Path(db_path)
    return db.with_name(db.name + ".vectors")


def row_ident(rowid: int, path: str, chunk_index: int, embed_sha256: str) -> int:
    """The identity of one cached row (see the module docstring)."""
    return int.from_bytes(
        _ident_digest(rowid, path, chunk_index, embed_sha256), "little", signed=True
    )


def row_idents(
    rowids: Sequence[int],
    paths: Sequence[str],
    chunk_indexes: Sequence[int],
    embed_sha256s: Sequence[str],
) -> np.ndarray:
    """:func:`row_ident` of each row of the columns, as int64: the digests joined and read
    as little-endian int64 at once, not one Python int a row."""
    digests = b"".join(map(_ident_digest, rowids, paths, chunk_indexes, embed_sha256s))
    return np.frombuffer(digests, dtype="<i8").astype(np.int64)


def _ident_digest(rowid: int, path: str, chunk_index: int, embed_sha256: str) -> bytes:
    """The 8-byte blake2b digest a row's identity is read from."""
    key = f"{rowid}\x00{path}\x00{chunk_index}\x00{embed_sha256}".encode()
    return hashlib.blake2b(key, digest_size=8).digest()


def segment_meta(
    rowids: np.ndarray,
    idents: np.ndarray,
    ordinals: np.ndarray,
    chunk_indexes: np.ndarray,
    vectors: np.ndarray,
) -> np.ndarray:
    """The int64 [rows, META_COLUMNS] meta array of int8 ``vectors``."""
    return _meta(rowids, idents, ordinals, chunk_indexes, squared_norms(vectors))


def _meta(
    rowids: np.ndarray,
    idents: np.ndarray,
    ordinals: np.ndarray,
    chunk_indexes: np.ndarray,
    sqnorms: np.ndarray,
) -> np.ndarray:
    """The meta array of rows whose squared norms are already known."""
    meta = np.empty((len(rowids), META_COLUMNS), dtype=np.int64)
    meta[:, META_ROWID] = rowids
    meta[:, META_IDENT] = idents
    meta[:, META_PATH] = ordinals
    meta[:, META_INDEX] = chunk_indexes
    meta[:, META_SQNORM] = sqnorms
    return meta


@dataclass(frozen=True, slots=True)
class SegmentRef:
    id: str
    rows: int
    dead: str | None = None
    dead_rows: int = 0
    # (file name, sha256 hex) of every file the segment names; () in format 1.
    sha256: tuple[tuple[str, str], ...] = ()
    # The segment's HNSW graph file, if it has one (format 3).
    hnsw: str | None = None
    # The recall@10 its graph measured when built; None: never measured (no graph, or
    # an unchecked one). A recall with no ``hnsw`` file: the graph was refused.
    hnsw_recall: float | None = None

    def files(self) -> tuple[str, ...]:
        return (
            segment_files(self.id)
            + ((self.dead,) if self.dead else ())
            + ((self.hnsw,) if self.hnsw else ())
        )

    def with_dead(self, name: str, digest: str, rows: int) -> SegmentRef:
        kept = tuple((f, d) for f, d in self.sha256 if f != self.dead)
        return SegmentRef(
            self.id, self.rows, name, rows, (*kept, (name, digest)), self.hnsw, self.hnsw_recall
        )

    def with_hnsw(self, name: str, digest: str, recall: float) -> SegmentRef:
        """The ref naming graph ``name`` that measured ``recall``."""
        kept = tuple((f, d) for f, d in self.sha256 if f != self.hnsw)
        return SegmentRef(
            self.id, self.rows, self.dead, self.dead_rows, (*kept, (name, digest)), name, recall
        )

    def with_refused_graph(self, recall: float) -> SegmentRef:
        """The ref without a graph, recording the recall that refused it."""
        kept = tuple((f, d) for f, d in self.sha256 if f != self.hnsw)
        return SegmentRef(self.id, self.rows, self.dead, self.dead_rows, kept, None, recall)

    @property
    def graph_usable(self) -> bool:
        """Has the segment a graph whose measured recall lets readers search it?"""
        return self.hnsw is not None and recall_passes(self.hnsw_recall)


@dataclass(frozen=True, slots=True)
class Manifest:
    index_uid: str
    generation: int
    model: str | None
    dim: int
    source: str
    segments: tuple[SegmentRef, ...] = ()
    published_at: float = 0.0
    format: int = FORMAT_VERSION
    # (file name, stat key) of every file the manifest names, as its publisher left
    # them; () when unknown. Only a publisher reads them (:func:`files_as_published`).
    stamps: tuple[tuple[str, StatKey], ...] = ()
    # The position in the index's chunk change log (rifflux.store.changes) that the rows
    # include; None when unknown (an older publisher, an index without the log).
    changes: int | None = None
    # How many of the leading segments are base segments (written by a full publish);
    # the rest are deltas. Only a publisher reads it.
    base_segments: int = 1

    @property
    def rows(self) -> int:
        return sum(s.rows - s.dead_rows for s in self.segments)

    @property
    def tombstones(self) -> int:
        return sum(s.dead_rows for s in self.segments)

    def files(self) -> set[str]:
        names: set[str] = set()
        for seg in self.segments:
            names.update(seg.files())
        return names

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "index_uid": self.index_uid,
            "generation": self.generation,
            "model": self.model,
            "dim": self.dim,
            "source": self.source,
            "published_at": self.published_at,
            "rows": self.rows,
            "segments": [
                {
                    "id": s.id,
                    "rows": s.rows,
                    "dead": s.dead,
                    "dead_rows": s.dead_rows,
                    "hnsw": s.hnsw,
                    "hnsw_recall": s.hnsw_recall,
                    "sha256": dict(s.sha256),
                }
                for s in self.segments
            ],
            "stat": {name: list(key) for name, key in self.stamps},
            "changes": self.changes,
            "base_segments": self.base_segments,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        try:
            fmt = data["format"]
            if fmt not in READABLE_FORMATS:
                raise CacheUnusable(f"manifest format {fmt!r} is not supported")
            return cls(
                index_uid=str(data["index_uid"]),
                generation=int(data["generation"]),
                model=data["model"],
                dim=int(data["dim"]),
                source=str(data["source"]),
                published_at=float(data["published_at"]),
                segments=tuple(
                    SegmentRef(
                        str(s["id"]),
                        int(s["rows"]),
                        s["dead"],
                        int(s["dead_rows"]),
                        tuple(sorted((str(k), str(v)) for k, v in s["sha256"].items()))
                        if fmt >= 2
                        else (),
                        s.get("hnsw"),
                        _optional_float(s.get("hnsw_recall")),
                    )
                    for s in data["segments"]
                ),
                format=int(fmt),
                stamps=tuple(
                    sorted(
                        (str(name), _as_stat_key(key)) for name, key in data.get("stat", {}).items()
                    )
                ),
                changes=None if data.get("changes") is None else int(data["changes"]),
                base_segments=int(data.get("base_segments", 1)),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise CacheCorrupt(f"the manifest is malformed: {exc!r}") from None


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _as_stat_key(value: Any) -> StatKey:
    dev, ino, mtime_ns, size = (int(v) for v in value)
    return (dev, ino, mtime_ns, size)


def files_as_published(directory: Path, manifest: Manifest) -> bool:
    """Does every file ``manifest`` names still have the stat key its publisher recorded?

    A few ``stat`` calls, no read: what lets a writer that changed nothing skip reading
    every row of a sound cache (``rifflux.vectors.publish``). False when the manifest
    recorded no stat keys (an older publisher) or not one for every file.
    """
    stamps = dict(manifest.stamps)
    names = manifest.files()
    if not names or not names <= stamps.keys():
        return False
    return all(stat_key(directory / name) == stamps[name] for name in names)


def segment_files(segment_id: str) -> tuple[str, str, str]:
    return (f"{segment_id}.vec.npy", f"{segment_id}.meta.npy", f"{segment_id}.paths.json")


def new_segment_id(generation: int) -> str:
    return f"{generation:010d}-{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class Segment:
    """One immutable block of rows: memory-mapped from disk, or plain arrays in memory.

    ``vectors`` are int8 rows, ``meta`` has META_COLUMNS columns (:func:`segment_meta`).
    """

    vectors: np.ndarray
    meta: np.ndarray
    paths: tuple[str, ...]
    dead: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # (path, stat key) of the verified files this segment was loaded from: a search
    # re-stats them to notice a file written to after it was verified.
    stamps: tuple[tuple[str, StatKey], ...] = ()
    # The segment's memory-mapped HNSW graph (a usearch view), None to scan exactly.
    graph: Graph | None = None
    # float32 1/|v| per row, derived from META_SQNORM (4 bytes a row in memory).
    inv_norms: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inv_norms", inverse_norms(self.meta[:, META_SQNORM]))

    @property
    def size(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def live(self) -> int:
        return self.size - int(self.dead.shape[0])

    def live_mask(self) -> np.ndarray:
        mask = np.ones(self.size, dtype=bool)
        mask[self.dead] = False
        return mask

    def changed_file(self) -> str | None:
        """The name of a loaded file whose stat key moved since it was verified, if any."""
        for path, key in self.stamps:
            if stat_key(path) != key:
                return Path(path).name
        return None


# -- writing -------------------------------------------------------------------------


class _HashingWriter:
    """A write-only file wrapper that hashes what passes through it."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self.digest = hashlib.sha256()

    def write(self, data: Any) -> int:
        self.digest.update(data)
        return self._fh.write(data)


def attach_hnsw(
    directory: Path, ref: SegmentRef, vectors: np.ndarray, ef: int | None = None
) -> SegmentRef:
    """Build the HNSW graph of a segment's int8 rows and measure its recall at ``ef``
    (default the readers' ``DEFAULT_EF``), after a graph of a sample of a large
    segment's rows passed (:func:`~rifflux.vectors.hnsw.sample_recall`)
    with :func:`~rifflux.vectors.hnsw.measure_recall`; the ref that names it, or, below
    ``RECALL_FLOOR``, the ref that records the refused recall (nothing written).

    Written like every cache file: a temporary file, fsync, os.replace, sha256 in the
    manifest (hashed by a second read: usearch writes the file itself).
    """
    sampled = sample_recall(vectors, ef)
    if sampled is not None and not recall_passes(sampled):
        log.warning(
            "vectors.hnsw_refused",
            segment=ref.id,
            rows=ref.rows,
            recall=sampled,
            sample_rows=SAMPLE_ROWS,
        )
        return ref.with_refused_graph(sampled)
    index = build_graph(vectors)
    recall = measure_recall(index, vectors, ef)
    if not recall_passes(recall):
        log.warning("vectors.hnsw_refused", segment=ref.id, rows=ref.rows, recall=recall)
        return ref.with_refused_graph(recall)
    name = graph_name(ref.id)
    tmp = directory / f"{TMP_PREFIX}{secrets.token_hex(6)}-{name}"
    try:
        save_graph(index, tmp)
        with tmp.open("rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
            os.fsync(fh.fileno())
        os.replace(tmp, directory / name)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return ref.with_hnsw(name, digest, recall)


def check_hnsw(
    directory: Path, ref: SegmentRef, vectors: np.ndarray, ef: int | None = None
) -> SegmentRef:
    """Measure the unchecked graph ``ref`` names (a manifest from before recall checks)
    without rebuilding it: the ref recording its recall, or refusing it.

    Raises CacheCorrupt if the graph file does not match its checksum or its rows.
    """
    assert ref.hnsw is not None
    digest = dict(ref.sha256).get(ref.hnsw)
    if digest is None:
        raise CacheCorrupt(f"the manifest has no checksum for {ref.hnsw}")
    verify_file(directory / ref.hnsw, digest)
    try:
        graph = open_graph(directory / ref.hnsw, ref.rows, DEFAULT_EF if ef is None else ef)
        recall = graph.recall(vectors)
    except (ValueError, RuntimeError) as exc:
        raise CacheCorrupt(f"{ref.hnsw} is unreadable: {exc}") from None
    if not recall_passes(recall):
        log.warning("vectors.hnsw_refused", segment=ref.id, rows=ref.rows, recall=recall)
        return ref.with_refused_graph(recall)
    return ref.with_hnsw(ref.hnsw, digest, recall)


def _write_atomically(directory: Path, name: str, write: Any) -> str:
    """Write ``name`` through a temporary file: fsync, then os.replace. Returns its sha256."""
    tmp = directory / f"{TMP_PREFIX}{secrets.token_hex(6)}-{name}"
    try:
        with tmp.open("wb") as fh:
            out = _HashingWriter(fh)
            write(out)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, directory / name)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out.digest.hexdigest()


def _save_npy(directory: Path, name: str, array: np.ndarray) -> str:
    return _write_atomically(directory, name, lambda fh: _write_npy(fh, array))


def _write_npy(fh: _HashingWriter, array: np.ndarray) -> None:
    """The bytes ``np.save`` writes (a version 1.0 header, then the C-order data), the
    data written from the array's own memory ``WRITE_BLOCK_BYTES`` at a time: np.save
    copies all of it into one bytes object first (a second 96 MiB for a base segment)."""
    array = np.ascontiguousarray(array)
    np.lib.format.write_array_header_1_0(fh, np.lib.format.header_data_from_array_1_0(array))
    _write_data(fh, array)


def _write_data(fh: _HashingWriter, array: np.ndarray) -> None:
    """The C-order bytes of ``array``, ``WRITE_BLOCK_BYTES`` a write, without a copy."""
    data = np.ascontiguousarray(array).reshape(-1).data.cast("B")
    for start in range(0, len(data), WRITE_BLOCK_BYTES):
        fh.write(data[start : start + WRITE_BLOCK_BYTES])


def _save_json(directory: Path, name: str, data: Any) -> str:
    payload = json.dumps(data, separators=(",", ":")).encode()
    return _write_atomically(directory, name, lambda fh: fh.write(payload))


def write_segment(
    directory: Path,
    generation: int,
    vectors: np.ndarray,
    rowids: np.ndarray,
    idents: np.ndarray,
    paths: Sequence[str],
    chunk_indexes: np.ndarray,
) -> SegmentRef:
    """Write rows (already sorted by (path, chunk_index), vectors already int8)."""
    distinct, ordinals = np.unique(np.asarray(paths, dtype=object), return_inverse=True)
    return write_segment_blocks(
        directory,
        generation,
        vectors.shape[1] if vectors.ndim == 2 else 0,
        [vectors],
        rowids,
        idents,
        ordinals,
        [str(p) for p in distinct],
        chunk_indexes,
    )


def write_segment_blocks(
    directory: Path,
    generation: int,
    dim: int,
    blocks: Iterable[np.ndarray],
    rowids: np.ndarray,
    idents: np.ndarray,
    path_ordinals: np.ndarray,
    path_names: Sequence[str],
    chunk_indexes: np.ndarray,
) -> SegmentRef:
    """:func:`write_segment` of int8 rows that come in ``blocks``, in order, whose paths
    are ``path_names[path_ordinals]`` (sorted, distinct, each some row's): each
    block is written and its squared norms taken as it comes, so a publisher holds one
    block of a segment's rows, never all of them. The files are byte for byte those of
    the same rows written at once."""
    rows = len(rowids)
    sqnorms = np.empty(rows, dtype=np.int64)

    def write_rows(fh: _HashingWriter) -> None:
        header = np.lib.format.header_data_from_array_1_0(np.empty((0, dim), np.int8))
        np.lib.format.write_array_header_1_0(fh, {**header, "shape": (rows, dim)})
        at = 0
        for block in blocks:
            if block.dtype != np.int8:
                raise TypeError(f"segment rows must be int8, got {block.dtype}")
            if block.shape[1:] != (dim,) or at + block.shape[0] > rows:
                raise ValueError(f"a block of {block.shape} does not fit {rows} x {dim} rows")
            sqnorms[at : at + block.shape[0]] = squared_norms(block)
            _write_data(fh, block)
            at += block.shape[0]
        if at != rows:
            raise ValueError(f"the blocks held {at} rows, not {rows}")

    segment_id = new_segment_id(generation)
    vec_name, meta_name, paths_name = segment_files(segment_id)
    vec_digest = _write_atomically(directory, vec_name, write_rows)
    meta = _meta(rowids, idents, path_ordinals, chunk_indexes, sqnorms)
    digests = (
        (vec_name, vec_digest),
        (meta_name, _save_npy(directory, meta_name, meta)),
        (paths_name, _save_json(directory, paths_name, list(path_names))),
    )
    return SegmentRef(segment_id, rows, sha256=digests)


def write_dead(directory: Path, segment_id: str, positions: np.ndarray) -> tuple[str, str]:
    """Write a tombstone file; returns (file name, sha256)."""
    name = f"{segment_id}.dead-{secrets.token_hex(4)}.npy"
    return name, _save_npy(directory, name, np.unique(np.asarray(positions, dtype=np.int64)))


def write_manifest(directory: Path, manifest: Manifest) -> None:
    _save_json(directory, MANIFEST_NAME, manifest.to_json())


# -- verifying -----------------------------------------------------------------------

_verified: OrderedDict[tuple[str, StatKey, str], None] = OrderedDict()
_verified_lock = threading.Lock()


def verify_file(path: Path, expected: str) -> StatKey:
    """Check ``path`` against its sha256; returns the stat key of the file verified.

    Raises CacheCorrupt on a mismatch, FileNotFoundError if the file is gone. A file
    already verified by this process under the same stat key is not hashed again.
    """
    with path.open("rb") as fh:
        stamp = stat_key_of(os.fstat(fh.fileno()))
        key = (str(path), stamp, expected)
        with _verified_lock:
            if key in _verified:
                _verified.move_to_end(key)
                return stamp
        actual = hashlib.file_digest(fh, "sha256").hexdigest()
    if actual != expected:
        raise CacheCorrupt(f"{path.name} does not match its sha256 checksum")
    with _verified_lock:
        _verified[key] = None
        while len(_verified) > VERIFIED_MAX:
            _verified.popitem(last=False)
    return stamp


def forget_verified() -> None:
    """Hash every file again at its next load (``rifflux status --check``, tests)."""
    with _verified_lock:
        _verified.clear()


# -- reading -------------------------------------------------------------------------


def manifest_stat_key(directory: Path) -> StatKey | None:
    """The manifest's stat key: every publish changes its inode."""
    return stat_key(directory / MANIFEST_NAME)


def read_manifest(directory: Path) -> tuple[Manifest, StatKey] | None:
    """The manifest and the stat key of the very file read; None if there is none."""
    try:
        with (directory / MANIFEST_NAME).open("rb") as fh:
            key = stat_key_of(os.fstat(fh.fileno()))
            raw = fh.read()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise CacheCorrupt(f"the manifest is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CacheCorrupt("the manifest is not a JSON object")
    return Manifest.from_json(data), key


def _load_npy(path: Path, dtype: str, shape: tuple[int, ...], mmap: bool) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise
    except Exception as exc:  # A damaged header fails in many ways (ValueError, EOFError...).
        raise CacheCorrupt(f"{path.name} is unreadable: {exc}") from None
    if array.dtype != np.dtype(dtype) or array.shape != shape:
        raise CacheCorrupt(f"{path.name} holds {array.dtype}{array.shape}, expected {dtype}{shape}")
    return array


def load_segment(
    directory: Path,
    ref: SegmentRef,
    dim: int,
    fmt: int = FORMAT_VERSION,
    ef: int | None = None,
) -> Segment:
    """Verify, then memory-map one segment of a manifest of format ``fmt``.

    ``ef``: also verify and map the segment's HNSW graph, if it has one whose measured
    recall passes (:attr:`SegmentRef.graph_usable`), searching it with that breadth;
    None ignores the graph (exact scans). An unchecked or refused graph is ignored too:
    neither verified nor mapped.

    Rows of a format before INT8_FORMAT (float32, no squared norms) are quantized into
    memory, so an outdated cache scores exactly as its republished successor will.

    Raises FileNotFoundError if a file was garbage-collected (the caller re-reads the
    manifest), CacheCorrupt if a file does not match its checksum or row count.
    """
    digests = dict(ref.sha256)
    stamps: list[tuple[str, StatKey]] = []
    for name in ref.files() if digests else ():
        if name == ref.hnsw and (ef is None or not ref.graph_usable):
            continue
        if name not in digests:
            raise CacheCorrupt(f"the manifest has no checksum for {name}")
        stamps.append((str(directory / name), verify_file(directory / name, digests[name])))
    vec_name, meta_name, paths_name = segment_files(ref.id)
    if fmt >= INT8_FORMAT:
        vectors = _load_npy(directory / vec_name, "int8", (ref.rows, dim), mmap=True)
        meta = _load_npy(directory / meta_name, "int64", (ref.rows, META_COLUMNS), mmap=True)
    else:
        floats = _load_npy(directory / vec_name, "float32", (ref.rows, dim), mmap=True)
        old = _load_npy(directory / meta_name, "int64", (ref.rows, OLD_META_COLUMNS), mmap=True)
        vectors = quantize_rows(floats)
        meta = np.concatenate([old, squared_norms(vectors)[:, None]], axis=1)
    try:
        paths = tuple(json.loads((directory / paths_name).read_bytes()))
    except ValueError as exc:
        raise CacheCorrupt(f"{paths_name} is not JSON: {exc}") from None
    # Format 1 has no checksums: at least keep a damaged ordinal from failing a search.
    if not digests and ref.rows and int(meta[:, META_PATH].max(initial=0)) >= len(paths):
        raise CacheCorrupt(f"{meta_name} names paths {paths_name} does not have")
    dead = np.zeros(0, np.int64)
    if ref.dead:
        dead = _load_npy(directory / ref.dead, "int64", (ref.dead_rows,), mmap=False)
        if dead.shape[0] and (dead.min() < 0 or dead.max() >= ref.rows):
            raise CacheCorrupt(f"{ref.dead} names rows outside the segment")
    graph = None
    if ref.hnsw and ef is not None and ref.graph_usable:
        try:
            graph = open_graph(directory / ref.hnsw, ref.rows, ef)
        except (ValueError, RuntimeError) as exc:
            raise CacheCorrupt(f"{ref.hnsw} is unreadable: {exc}") from None
    return Segment(vectors, meta, paths, dead, tuple(stamps), graph)


def map_vectors(directory: Path, ref: SegmentRef, dim: int) -> np.ndarray:
    """The int8 rows of a segment this process just wrote, memory-mapped (unverified:
    a publisher builds its graphs from them without holding them in anonymous memory)."""
    return _load_npy(directory / segment_files(ref.id)[0], "int8", (ref.rows, dim), mmap=True)


def live_column(segments: Sequence[Segment], column: int) -> np.ndarray:
    """One meta column (META_ROWID, META_IDENT) of every live row, sorted."""
    parts = [np.asarray(s.meta[s.live_mask(), column]) for s in segments]
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
