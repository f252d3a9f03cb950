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
* **Deleted chunks never come back.** A graph indexes its segment's rows as they were
  written; tombstones are applied to its candidates exactly as to a scan, and a full
  rewrite builds a new graph for the new base segment.
* **Exact scores.** The graph only proposes candidates (``max(limit, ef)`` of them);
  they are rescored with the exact int8 cosine (:mod:`rifflux.vectors.quantize`) and
  ordered with the (path, chunk_index) tie-break, so a reported ``cosine`` is exact and
  the order deterministic for a given index. If tombstones leave fewer live candidates
  than asked for, the search widens, and finally scans the segment exactly.
* **Which segments get one** (``RIFFLUX_VECTOR_INDEX``): ``auto`` builds a graph for a
  segment of at least ``HNSW_MIN_ROWS`` rows, ``hnsw`` for every segment, ``exact`` for
  none; a reader set to ``exact`` ignores graphs (it neither verifies nor maps them).
* **Small front process.** A reader memory-maps the saved graph (usearch ``view``), so
  its pages are file-backed and shared, not anonymous memory of the search process.

Measured (BENCHMARKS.md, "Approximate vector search"): usearch chosen over hnswlib
(int8 storage, one file, ``view``); connectivity 16, expansion_add 128, ef 200 reach
recall@10 0.997 against the exact scan on 1M clustered synthetic rows (ef 50, CFS-012's
value, only 0.934: some queries end in the wrong cluster). ``HNSW_MIN_ROWS`` is where an
exact scan stops being a few milliseconds.
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path
from typing import Any

import numpy as np

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


def wants_graph(mode: str, rows: int) -> bool:
    """Does a segment of ``rows`` rows get a graph under ``RIFFLUX_VECTOR_INDEX=mode``?"""
    if mode == "hnsw":
        return rows > 0
    return mode == "auto" and rows >= HNSW_MIN_ROWS


def graph_name(segment_id: str) -> str:
    return f"{segment_id}.hnsw-{secrets.token_hex(4)}{SUFFIX}"


def build_graph(vectors: np.ndarray, path: Path, threads: int = 0) -> None:
    """Index int8 ``vectors`` (keys: row positions) and save the graph to ``path``."""
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
        index.add(keys, np.ascontiguousarray(vectors), threads=threads or (os.cpu_count() or 1))
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
