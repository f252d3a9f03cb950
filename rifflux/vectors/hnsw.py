"""HNSW graphs beside the exact segments: approximate candidates for large indexes.

A segment with many rows may carry one graph file, ``<sid>.hnsw-<token>.usearch`` (a
usearch index: int8 rows, cosine, keys = row positions). Invariants:

* **Writer-side only.** The publisher builds a graph (:func:`attach_hnsw`), never a
  search; it is written through a temporary file and ``os.replace``, named in the
  manifest with its sha256, and as immutable as its segment.
* **Measured where it is used.** A graph checks its own recall@10 against the exact scan
  when built (:func:`measure_recall`; a large segment first on a sample,
  :func:`sample_recall`); below ``RECALL_FLOOR`` it is not written, in any mode, and the
  manifest keeps the refused recall so the next publish does not build it again. A graph
  without a recorded recall is unchecked: readers scan its segment exactly.
* **Exact scores.** A graph only proposes candidates; tombstones are applied to them as
  to a scan, and they are rescored with the exact int8 cosine and ordered with the
  (path, chunk_index) tie-break.
* **Which segments get one** (``RIFFLUX_VECTOR_INDEX``): ``auto`` those of at least
  ``HNSW_MIN_ROWS`` rows, ``hnsw`` every one, ``exact`` none (and a reader set to
  ``exact`` ignores graphs).

Measurements behind the settings: docs/architecture.md, "HNSW graphs".
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path
from typing import Any

import numkong
import numpy as np

from rifflux.config import usable_cpus
from rifflux.vectors.pages import gather_rows

# Graph settings: recall@10 0.997 on 1M clustered rows with DEFAULT_EF.
CONNECTIVITY = 16
EXPANSION_ADD = 128
# Search breadth (RIFFLUX_HNSW_EF overrides it per reader). On 1M clustered rows, ef 50
# measured recall@10 0.934 (some queries 0.0); 100: 0.967; 200: 0.997 (min 0.9) at
# 2.6 ms p50.
DEFAULT_EF = 200
# ``auto`` builds a graph for segments of at least this many rows.
HNSW_MIN_ROWS = 200_000
SUFFIX = ".usearch"
# A graph whose measured recall@10 (:func:`measure_recall`) is below this is not used.
RECALL_FLOOR = 0.95
# Recall@K is measured on this many of the segment's rows, drawn with this seed.
CHECK_QUERIES = 100
CHECK_SEED = 22
CHECK_K = 10
# Rows scored at a time by the check's exact scan (x CHECK_QUERIES float64 scores, a few
# copies of them: 65,536 rows made ~200 MB of a graph publish's peak; each row's score is
# its own, so the block changes no kth score).
CHECK_BLOCK_ROWS = 8_192
# Rows of the sample graph a large segment is checked with before its own is built.
SAMPLE_ROWS = 20_000
SAMPLE_SEED = 23
# Rows whose squared norms are taken at a time (an int64 copy of 1,024 x 384: 3 MB).
NORM_BLOCK_ROWS = 1_024


def wants_graph(mode: str, rows: int) -> bool:
    """Does a segment of ``rows`` rows get a graph under ``RIFFLUX_VECTOR_INDEX=mode``?"""
    if mode == "hnsw":
        return rows > 0
    return mode == "auto" and rows >= HNSW_MIN_ROWS


def recall_passes(recall: float | None) -> bool:
    """May a graph of this measured recall be searched? (None: never measured.)"""
    return recall is not None and recall >= RECALL_FLOOR


def search_verdict(
    mode: str, rows: int, has_graph: bool, recall: float | None
) -> tuple[str, str | None]:
    """How a reader under ``RIFFLUX_VECTOR_INDEX=mode`` searches a segment of ``rows``
    rows: ``("hnsw", None)``, or ``("exact", why not approximately)``."""
    if mode == "exact":
        return "exact", "RIFFLUX_VECTOR_INDEX=exact"
    if has_graph and recall_passes(recall):
        return "hnsw", None
    if recall is not None:
        return "exact", f"recall {recall:.3f} < {RECALL_FLOOR}"
    if has_graph:
        return "exact", "graph unchecked (no measured recall); the next publish measures it"
    if rows < HNSW_MIN_ROWS:
        return "exact", f"below HNSW_MIN_ROWS ({HNSW_MIN_ROWS})"
    return "exact", "no graph yet (a job's last publish builds it) or published exact"


def graph_name(segment_id: str) -> str:
    return f"{segment_id}.hnsw-{secrets.token_hex(4)}{SUFFIX}"


def _threads(threads: int) -> int:
    return threads or usable_cpus()


def build_graph(vectors: np.ndarray, threads: int = 0) -> Any:
    """An in-memory usearch index of int8 ``vectors`` (keys: row positions)."""
    from usearch.index import Index

    index = Index(
        ndim=int(vectors.shape[1]),
        metric="cos",
        dtype="i8",
        connectivity=CONNECTIVITY,
        expansion_add=EXPANSION_ADD,
        expansion_search=DEFAULT_EF,
    )
    if vectors.shape[0]:
        keys = np.arange(vectors.shape[0], dtype=np.uint64)
        index.add(keys, np.ascontiguousarray(vectors), threads=_threads(threads))
    return index


def check_positions(rows: int) -> np.ndarray:
    """The rows a segment of ``rows`` rows is checked with (fixed seed, sorted)."""
    rng = np.random.default_rng(CHECK_SEED)
    return np.sort(rng.choice(rows, size=min(rows, CHECK_QUERIES), replace=False))


def _row_scores(vectors: np.ndarray, inv: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """[rows, queries] cosines up to each query's norm: exact integer dots x 1/|row|."""
    rows = np.ascontiguousarray(vectors, dtype=np.int8)
    dots = np.asarray(numkong.cdist(rows, queries, metric="dot", threads=1), dtype=np.float64)
    return dots.reshape(rows.shape[0], queries.shape[0]) * inv[:, None]


def _inverse_norms(vectors: np.ndarray) -> np.ndarray:
    """float64 ``1/|v|`` per int8 row (0 for a zero row), from exact int64 squared norms
    taken ``NORM_BLOCK_ROWS`` at a time (two int64 copies of a whole 65,536-row check
    block were 400 MB: a graph publish's peak, 318 MiB at 40k rows)."""
    wide = np.empty(vectors.shape[0], dtype=np.int64)
    for start in range(0, vectors.shape[0], NORM_BLOCK_ROWS):
        block = np.asarray(vectors[start : start + NORM_BLOCK_ROWS], dtype=np.int64)
        wide[start : start + NORM_BLOCK_ROWS] = np.einsum("ij,ij->i", block, block)
    return np.divide(1.0, np.sqrt(wide), out=np.zeros(wide.shape[0]), where=wide > 0)


def exact_kth_scores(vectors: np.ndarray, positions: np.ndarray, k: int = CHECK_K) -> np.ndarray:
    """Per query row at ``positions``: the k-th best score over the other rows (exact)."""
    queries = np.ascontiguousarray(vectors[positions], dtype=np.int8)
    best = np.full((k, positions.shape[0]), -np.inf)
    columns = np.arange(positions.shape[0])
    for start in range(0, vectors.shape[0], CHECK_BLOCK_ROWS):
        block = np.asarray(vectors[start : start + CHECK_BLOCK_ROWS])
        scores = _row_scores(block, _inverse_norms(block), queries)
        own = (positions >= start) & (positions < start + block.shape[0])
        scores[positions[own] - start, columns[own]] = -np.inf
        both = np.concatenate([best, scores])
        best = -np.partition(-both, k - 1, axis=0)[:k]
    return np.min(best, axis=0)


def sample_recall(vectors: np.ndarray, ef: int | None = None) -> float | None:
    """Recall of a graph of ``SAMPLE_ROWS`` of the int8 ``vectors`` (fixed seed),
    measured as :func:`measure_recall`; None for a segment of at most ``2 * SAMPLE_ROWS``
    rows (its own graph costs little more). See the module docstring."""
    rows = int(vectors.shape[0])
    if rows <= 2 * SAMPLE_ROWS:
        return None
    rng = np.random.default_rng(SAMPLE_SEED)
    positions = np.sort(rng.choice(rows, size=SAMPLE_ROWS, replace=False))
    sample = gather_rows(vectors, positions)
    return measure_recall(build_graph(sample), sample, ef)


def measure_recall(index: Any, vectors: np.ndarray, ef: int | None = None) -> float:
    """Recall@CHECK_K of the usearch ``index`` of int8 ``vectors`` against the exact
    scan, searched as a reader does: ``ef`` (default ``DEFAULT_EF``, the readers')
    candidates rescored exactly (module docstring: which rows are the queries, and why
    the query row is left out)."""
    ef = DEFAULT_EF if ef is None else ef
    n = int(vectors.shape[0])
    k = min(CHECK_K, n - 1)
    if k <= 0:
        return 1.0
    positions = check_positions(n)
    kth = exact_kth_scores(vectors, positions, k)
    queries = np.ascontiguousarray(vectors[positions], dtype=np.int8)
    index.expansion_search = ef
    matches = index.search(queries, max(ef, k + 1), threads=1)
    keys = np.asarray(matches.keys).reshape(positions.shape[0], -1)
    found = 0
    for column, (position, candidates) in enumerate(zip(positions, keys, strict=True)):
        candidates = candidates[(candidates < n) & (candidates != position)].astype(np.int64)
        if candidates.shape[0] == 0:
            continue
        rows = np.asarray(vectors[candidates])
        scores = _row_scores(rows, _inverse_norms(rows), queries[column : column + 1])[:, 0]
        top = -np.sort(-scores)[:k]
        found += int(np.count_nonzero(top >= kth[column] - 1e-9))
    return round(found / (k * positions.shape[0]), 4)


def save_graph(index: Any, path: Path) -> None:
    index.save(str(path))


class Graph:
    """A memory-mapped graph, searched by one thread at a time: usearch keeps per-thread
    search state by thread slot, and every call here uses slot 0."""

    def __init__(self, index: Any, ef: int) -> None:
        self._index = index
        self._lock = threading.Lock()
        self.ef = ef

    def positions(self, q8: np.ndarray, count: int) -> np.ndarray:
        """Row positions of the ``count`` approximate nearest rows to int8 ``q8``."""
        with self._lock:
            matches = self._index.search(q8, count, threads=1)
        return np.asarray(matches.keys, dtype=np.int64)

    def recall(self, vectors: np.ndarray) -> float:
        """:func:`measure_recall` of this graph over its segment's int8 ``vectors``."""
        with self._lock:
            return measure_recall(self._index, vectors, self.ef)


def open_graph(path: Path, rows: int, ef: int) -> Graph:
    """Memory-map a saved graph; raises ValueError if it is not one of ``rows`` rows."""
    from usearch.index import Index

    # Without the key lookup table (keys are row positions, never looked up): ~33 MiB
    # less anonymous memory per 1M rows; search results still carry their keys.
    index: Any = Index.restore(str(path), view=True, enable_key_lookups=False)
    if index is None or len(index) != rows:
        found = "nothing" if index is None else f"{len(index)} rows"
        raise ValueError(f"{path.name} holds {found}, expected {rows} rows")
    index.expansion_search = ef
    return Graph(index, ef)
