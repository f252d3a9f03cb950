"""HNSW graphs beside the exact segments: approximate candidates for large indexes.

An exact scan reads every row (~40-70 ms at 1M int8 rows on this machine); an HNSW
graph visits a few thousand. So a segment with many rows may carry one graph file:

    <sid>.hnsw-<token>.usearch   a usearch index (int8 rows, cosine, keys = row positions)

Invariants:

* **Writer-side only.** A graph is built by the publisher (:func:`attach_hnsw`, called
  from :mod:`rifflux.vectors.publish`) for a segment it writes or keeps, never by a
  search. It is written through a temporary file and ``os.replace``, named in the
  manifest with its sha256 like every segment file, and never written twice: it is as
  immutable as the segment whose rows it indexes, so a search during a publish sees one
  consistent generation (the manifest it loaded names the rows, tombstones and graph).
* **Measured where it is used.** A graph checks its own recall@10 against the exact scan
  when it is built (:func:`measure_recall`): ``CHECK_QUERIES`` rows of the segment, drawn
  with a fixed seed (``CHECK_SEED``), each used as a query, searched as a reader does
  (``DEFAULT_EF`` candidates rescored exactly). The query row itself is excluded from
  both sides: it is its own nearest neighbour, found trivially, and would add up to 0.1
  to every query's recall. Rows tied with the exact 10th score count as found. (The
  sample is fixed, the multi-threaded build is not: two builds of the same rows may
  measure a little apart, e.g. 0.637 and 0.659 for 2,000 random rows.) The
  measure goes into the manifest (``hnsw_recall`` of the segment entry); a graph below
  ``RECALL_FLOOR`` is not written at all, even under ``RIFFLUX_VECTOR_INDEX=hnsw``: the
  segment is scanned exactly and the manifest keeps the refused recall, so ``index_status``
  can say why (:func:`search_verdict`) and the next publish does not build it again (rows
  are immutable; a rewritten segment is a new one, checked anew). A graph named by a
  manifest written before these checks (no ``hnsw_recall``) is *unchecked*: readers scan
  its segment exactly (they neither verify nor map it), and the next publish that wants
  a graph there measures the existing one (no rebuild) and records its recall, or drops
  it. The check cost 2.2 s of CPU at 200k rows, ~0.5 % of the build (400-550 s).
* **A sample first** (:func:`sample_recall`). The build is the cost (~1 ms of CPU a row),
  and a graph that will be refused costs it all for nothing: a job of 100k generated
  files spent ~10 of its 14 minutes building three graphs of hash vectors, each refused.
  So a segment of more than ``2 * SAMPLE_ROWS`` rows is first checked with a graph of
  ``SAMPLE_ROWS`` of its rows (fixed seed): recall at a fixed ``ef`` falls as a graph
  grows (hash vectors of generated text: 0.998 / 0.976 / 0.933 / 0.833 on samples of
  2k / 5k / 10k / 20k of 200k rows, 0.361 on all of them), so a sample below
  ``RECALL_FLOOR`` refuses the segment's graph unbuilt, with the sample's recall
  recorded. A sample that passes proves nothing for the whole: the whole graph is then
  built and checked as above.
* **Deleted chunks never come back.** A graph indexes its segment's rows as they were
  written; tombstones are applied to its candidates exactly as to a scan, and a full
  rewrite builds a new graph for each new base segment.
* **Exact scores.** The graph only proposes candidates (``max(limit, ef)`` of them);
  they are rescored with the exact int8 cosine (:mod:`rifflux.vectors.quantize`) and
  ordered with the (path, chunk_index) tie-break, so a reported ``cosine`` is exact and
  the order deterministic for a given index. If tombstones leave fewer live candidates
  than asked for, the search widens, and finally scans the segment exactly.
* **Which segments get one** (``RIFFLUX_VECTOR_INDEX``): ``auto`` builds a graph for a
  segment of at least ``HNSW_MIN_ROWS`` rows, ``hnsw`` for every segment, ``exact`` for
  none; a reader set to ``exact`` ignores graphs (it neither verifies nor maps them).
  In every mode a graph is only used if its measured recall reaches ``RECALL_FLOOR``.
* **Small front process.** A reader memory-maps the saved graph (usearch ``view``), so
  its pages are file-backed and shared, not anonymous memory of the search process.

Measured (BENCHMARKS.md, "Approximate vector search"): usearch chosen over hnswlib
(int8 storage, one file, ``view``); connectivity 16, expansion_add 128, ef 200 reach
recall@10 0.997 against the exact scan on 1M clustered synthetic rows (ef 50, CFS-012's
value, only 0.934: some queries end in the wrong cluster). ``HNSW_MIN_ROWS`` is where an
exact scan stops being a few milliseconds; whether a graph is used is the measured
recall's call, not the size's: at 200k rows, noisy copies of real ONNX vectors measured
0.895 (held-out real queries 0.814) and hash vectors of generated text 0.361, both
refused, while real ONNX rows measured 0.996 (BENCHMARKS.md, "HNSW measured where it is
used (issue 22)").
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path
from typing import Any

import numkong
import numpy as np

from rifflux.vectors.pages import gather_rows

# Graph settings (BENCHMARKS.md, "Approximate vector search").
CONNECTIVITY = 16
EXPANSION_ADD = 128
# Search breadth (RIFFLUX_HNSW_EF overrides it per reader). CFS-012 uses 50, which
# measured recall@10 0.934 (some queries 0.0) on 1M clustered rows; 100: 0.967; 200:
# 0.997 (min 0.9) at 2.6 ms p50 (BENCHMARKS.md, "Approximate vector search").
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
    return threads or (os.cpu_count() or 1)


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
