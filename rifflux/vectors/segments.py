"""The on-disk vector cache: immutable segments, per-segment tombstones, one manifest.

Layout of ``<db file>.vectors/`` (next to the index database)::

    current.json                 the manifest, replaced atomically with os.replace
    <sid>.vec.npy                float32 [rows, dim], every row L2-normalised
    <sid>.meta.npy               int64 [rows, 4]: chunk rowid, identity, path ordinal,
                                 chunk_index; rows sorted by (path, chunk_index)
    <sid>.paths.json             the segment's distinct paths, sorted (path ordinal → path)
    <sid>.dead-<token>.npy       int64 sorted row positions of the segment that are
                                 tombstoned (their chunk was deleted or rewritten)
    publish.lock                 flock held by whoever publishes

A segment id ``<sid>`` is the generation it was written at plus a random token, and a
file is never written twice under one name: every file a manifest names is immutable.

The manifest (``current.json``)::

    {"format": 1, "index_uid": "...", "generation": 42, "model": "hash:384", "dim": 384,
     "source": "finalize", "published_at": 1700000000.0, "rows": 1234,
     "segments": [{"id": "...", "rows": 1200, "dead": "<file>" | null, "dead_rows": 3}]}

``generation`` is the index generation whose rows the manifest holds exactly;
``index_uid`` ties it to one database (a rebuilt database starts over at generation 0).

A row's *identity* is a 64-bit hash of (chunk rowid, path, chunk_index, embed_sha256):
SQLite may hand a deleted chunk's rowid to a new chunk, so a rowid alone cannot tell
whether a cached row still describes the chunk that now has that rowid.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rifflux.search.semantic import cosine_scores

MANIFEST_NAME = "current.json"
LOCK_NAME = "publish.lock"
TMP_PREFIX = ".tmp-"
FORMAT_VERSION = 1

# Columns of ``<sid>.meta.npy``.
META_ROWID, META_IDENT, META_PATH, META_INDEX = range(4)
META_COLUMNS = 4

# Candidates within this much of a segment's k-th float32 score are rescored exactly.
# A float32 dot product of two unit vectors of dimension d is off by at most ~d * 2**-24
# (2.3e-5 at d = 384), so no row that belongs in the top k is ever left out.
SCORE_MARGIN = 1e-4


class CacheUnusable(Exception):
    """The manifest or a file it names is missing, truncated or inconsistent."""


def vectors_dir(db_path: Path | str) -> Path:
    db = Path(db_path)
    return db.with_name(db.name + ".vectors")


def row_ident(rowid: int, path: str, chunk_index: int, embed_sha256: str) -> int:
    """The identity of one cached row (see the module docstring)."""
    key = f"{rowid}\x00{path}\x00{chunk_index}\x00{embed_sha256}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little", signed=True)


# Rows normalised per float64 pass: the float64 temporaries of a whole 9,101-row matrix
# made a worker's vector-cache publish peak at 88 MB (BENCHMARKS.md, Small ONNX workers).
NORMALIZE_BLOCK_ROWS = 1024


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32.

    The norm is taken in float64: products of float32 values are exact there, so equal
    rows get bit-identical normalised rows wherever they sit in a matrix. Each row is
    computed on its own, so working in blocks of rows changes no result.
    """
    out = np.empty(matrix.shape, dtype=np.float32)
    for start in range(0, matrix.shape[0], NORMALIZE_BLOCK_ROWS):
        wide = np.asarray(matrix[start : start + NORMALIZE_BLOCK_ROWS], dtype=np.float64)
        norms = np.sqrt(np.einsum("ij,ij->i", wide, wide))[:, None]
        block = np.divide(wide, norms, out=np.zeros_like(wide), where=norms > 0)
        out[start : start + NORMALIZE_BLOCK_ROWS] = block
    return out


@dataclass(frozen=True, slots=True)
class SegmentRef:
    id: str
    rows: int
    dead: str | None = None
    dead_rows: int = 0


@dataclass(frozen=True, slots=True)
class Manifest:
    index_uid: str
    generation: int
    model: str | None
    dim: int
    source: str
    segments: tuple[SegmentRef, ...] = ()
    published_at: float = 0.0

    @property
    def rows(self) -> int:
        return sum(s.rows - s.dead_rows for s in self.segments)

    @property
    def tombstones(self) -> int:
        return sum(s.dead_rows for s in self.segments)

    def files(self) -> set[str]:
        names: set[str] = set()
        for seg in self.segments:
            names.update(segment_files(seg.id))
            if seg.dead:
                names.add(seg.dead)
        return names

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "index_uid": self.index_uid,
            "generation": self.generation,
            "model": self.model,
            "dim": self.dim,
            "source": self.source,
            "published_at": self.published_at,
            "rows": self.rows,
            "segments": [
                {"id": s.id, "rows": s.rows, "dead": s.dead, "dead_rows": s.dead_rows}
                for s in self.segments
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        try:
            if data["format"] != FORMAT_VERSION:
                raise CacheUnusable(f"manifest format {data['format']!r} is not supported")
            return cls(
                index_uid=str(data["index_uid"]),
                generation=int(data["generation"]),
                model=data["model"],
                dim=int(data["dim"]),
                source=str(data["source"]),
                published_at=float(data["published_at"]),
                segments=tuple(
                    SegmentRef(str(s["id"]), int(s["rows"]), s["dead"], int(s["dead_rows"]))
                    for s in data["segments"]
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CacheUnusable(f"manifest is malformed: {exc!r}") from None


def segment_files(segment_id: str) -> tuple[str, str, str]:
    return (f"{segment_id}.vec.npy", f"{segment_id}.meta.npy", f"{segment_id}.paths.json")


def new_segment_id(generation: int) -> str:
    return f"{generation:010d}-{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class Segment:
    """One immutable block of rows: memory-mapped from disk, or plain arrays in memory."""

    vectors: np.ndarray
    meta: np.ndarray
    paths: tuple[str, ...]
    dead: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

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


@dataclass(frozen=True, slots=True)
class Candidate:
    row_id: int
    ident: int
    key: tuple[str, int]
    cosine: float


# -- writing -------------------------------------------------------------------------


def _write_atomically(directory: Path, name: str, write: Any) -> None:
    """Write ``name`` through a temporary file: fsync, then os.replace."""
    tmp = directory / f"{TMP_PREFIX}{secrets.token_hex(6)}-{name}"
    try:
        with tmp.open("wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, directory / name)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _save_npy(directory: Path, name: str, array: np.ndarray) -> None:
    _write_atomically(directory, name, lambda fh: np.save(fh, array, allow_pickle=False))


def _save_json(directory: Path, name: str, data: Any) -> None:
    payload = json.dumps(data, separators=(",", ":")).encode()
    _write_atomically(directory, name, lambda fh: fh.write(payload))


def write_segment(
    directory: Path,
    generation: int,
    vectors: np.ndarray,
    rowids: np.ndarray,
    idents: np.ndarray,
    paths: Sequence[str],
    chunk_indexes: np.ndarray,
) -> SegmentRef:
    """Write rows (already sorted by (path, chunk_index), vectors already normalised)."""
    distinct, ordinals = np.unique(np.asarray(paths, dtype=object), return_inverse=True)
    meta = np.empty((len(rowids), META_COLUMNS), dtype=np.int64)
    meta[:, META_ROWID] = rowids
    meta[:, META_IDENT] = idents
    meta[:, META_PATH] = ordinals
    meta[:, META_INDEX] = chunk_indexes
    segment_id = new_segment_id(generation)
    vec_name, meta_name, paths_name = segment_files(segment_id)
    _save_npy(directory, vec_name, np.ascontiguousarray(vectors, dtype=np.float32))
    _save_npy(directory, meta_name, meta)
    _save_json(directory, paths_name, [str(p) for p in distinct])
    return SegmentRef(segment_id, len(rowids))


def write_dead(directory: Path, segment_id: str, positions: np.ndarray) -> str:
    name = f"{segment_id}.dead-{secrets.token_hex(4)}.npy"
    _save_npy(directory, name, np.unique(np.asarray(positions, dtype=np.int64)))
    return name


def write_manifest(directory: Path, manifest: Manifest) -> None:
    _save_json(directory, MANIFEST_NAME, manifest.to_json())


# -- reading -------------------------------------------------------------------------


def manifest_stat_key(directory: Path) -> tuple[int, int, int] | None:
    """(inode, mtime_ns, size) of the manifest: every publish changes the inode."""
    try:
        st = os.stat(directory / MANIFEST_NAME)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def read_manifest(directory: Path) -> tuple[Manifest, tuple[int, int, int]] | None:
    """The manifest and the stat key of the very file read; None if there is none."""
    try:
        with (directory / MANIFEST_NAME).open("rb") as fh:
            st = os.fstat(fh.fileno())
            raw = fh.read()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise CacheUnusable(f"manifest is not JSON: {exc}") from None
    return Manifest.from_json(data), (st.st_ino, st.st_mtime_ns, st.st_size)


def _load_npy(path: Path, dtype: str, shape: tuple[int, ...], mmap: bool) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        raise CacheUnusable(f"{path.name} is unreadable: {exc}") from None
    if array.dtype != np.dtype(dtype) or array.shape != shape:
        raise CacheUnusable(
            f"{path.name} holds {array.dtype}{array.shape}, expected {dtype}{shape}"
        )
    return array


def load_segment(directory: Path, ref: SegmentRef, dim: int) -> Segment:
    """Memory-map one segment (raises FileNotFoundError if it was garbage-collected)."""
    vec_name, meta_name, paths_name = segment_files(ref.id)
    vectors = _load_npy(directory / vec_name, "float32", (ref.rows, dim), mmap=True)
    meta = _load_npy(directory / meta_name, "int64", (ref.rows, META_COLUMNS), mmap=True)
    try:
        paths = tuple(json.loads((directory / paths_name).read_bytes()))
    except ValueError as exc:
        raise CacheUnusable(f"{paths_name} is not JSON: {exc}") from None
    dead = np.zeros(0, np.int64)
    if ref.dead:
        dead = _load_npy(directory / ref.dead, "int64", (ref.dead_rows,), mmap=False)
    return Segment(vectors, meta, paths, dead)


# -- searching -----------------------------------------------------------------------


def _segment_candidates(segment: Segment, q32: np.ndarray, limit: int) -> np.ndarray:
    """Positions that may hold one of the segment's ``limit`` best live rows."""
    n = segment.size
    k = min(limit, segment.live)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    # einsum runs on the calling thread; BLAS's own threads (``@``) cost milliseconds of
    # wake-up on a busy 2-core machine, more than the whole product at 20k rows.
    scores = np.einsum("ij,j->i", segment.vectors, q32)
    if segment.dead.shape[0]:
        scores[segment.dead] = -np.inf
    if k < n:
        kth = np.partition(scores, n - k)[n - k]
        return np.flatnonzero(scores >= kth - SCORE_MARGIN)
    return np.flatnonzero(scores > -np.inf)


def search_segments(segments: Sequence[Segment], query: np.ndarray, limit: int) -> list[Candidate]:
    """The ``limit`` live rows most similar to ``query``, over every segment.

    Best first; equal scores by (path, chunk_index) ascending. Each segment contributes
    its own candidates (one matrix-vector product, tombstones masked, argpartition-style
    selection); candidates are rescored exactly and merged. [] for a zero-norm query.
    """
    if limit <= 0:
        return []
    q = np.asarray(query, dtype=np.float32)
    norm = float(np.linalg.norm(q))
    if norm == 0.0:
        return []
    q32 = q / norm
    merged: list[Candidate] = []
    for segment in segments:
        positions = _segment_candidates(segment, q32, limit)
        if positions.shape[0] == 0:
            continue
        scores = cosine_scores(segment.vectors[positions], q)
        meta = segment.meta[positions]
        merged.extend(
            Candidate(
                int(row[META_ROWID]),
                int(row[META_IDENT]),
                (segment.paths[int(row[META_PATH])], int(row[META_INDEX])),
                float(score),
            )
            for row, score in zip(meta, scores, strict=True)
        )
    merged.sort(key=lambda c: (-c.cosine, c.key))
    return merged[:limit]
