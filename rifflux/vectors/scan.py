"""The scan kernel: the ``limit`` rows of a set of segments most similar to a query.

Pure computation over loaded :class:`~rifflux.vectors.segments.Segment` values (memory-
mapped from a published generation, or plain arrays in memory): no file, no database,
no lock. The format those segments come from is :mod:`rifflux.vectors.segments`; the
score arithmetic is :mod:`rifflux.vectors.quantize`.

Invariants:

* **The same bits everywhere.** A query is quantized to int8 like the rows; each segment
  ranks its live rows by a selection score (an exact integer dot times two correctly
  rounded float32 products) and hands over every row within ``SCORE_MARGIN`` of its
  k-th; the candidates are rescored with the exact int8 cosine and merged. So scores and
  order are identical on every machine, with any thread count, and however the rows are
  split into segments (``tests/vectors/test_vector_determinism.py``).
* **No row that belongs in the top k is left out.** A selection score is the exact
  cosine up to two float32 roundings (~1.2e-7), far inside ``SCORE_MARGIN``.
* **One order.** Best first; equal cosines by (path, chunk_index) ascending.
* **Tombstones never come back.** A segment's dead rows are masked before selection,
  on the exact scan, the filtered scan and a graph's candidates alike.
* **Filters are exact.** With ``admitted`` rowids (a search filter's) only those rows are
  scored, by an exact scan: a filtered search never goes through a graph, so a filter
  never empties the results.
* **Graphs only propose.** A segment with an HNSW graph (:mod:`rifflux.vectors.hnsw`)
  asks it for ``max(limit, ef)`` candidates, widens while tombstones leave too few, and
  falls back to the exact scan; every reported cosine is exact.
* **Bounded by a deadline.** ``check`` runs before each segment and may raise.
* **On the calling thread.** The integer dots never wake other threads: on a busy
  2-core machine that costs milliseconds, more than the whole scan at 20k rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rifflux.vectors.quantize import exact_cosines, integer_dots, quantize_query
from rifflux.vectors.segments import (
    META_IDENT,
    META_INDEX,
    META_PATH,
    META_ROWID,
    META_SQNORM,
    Segment,
)

# Candidates within this much of a segment's k-th selection score are rescored exactly.
# A selection score (``rifflux.vectors.quantize``) is the exact cosine up to two float32
# roundings (~1.2e-7), so no row that belongs in the top k is ever left out.
SCORE_MARGIN = 1e-4


@dataclass(frozen=True, slots=True)
class Candidate:
    row_id: int
    ident: int
    key: tuple[str, int]
    cosine: float


def _admitted_candidates(
    segment: Segment, q8: np.ndarray, inv_q: np.float32, limit: int, admitted: np.ndarray
) -> np.ndarray:
    """Positions that may hold one of the ``limit`` best live rows whose rowid is in
    ``admitted`` (sorted): only those rows are scored, with the same selection scores
    as :func:`_segment_candidates`."""
    mask = np.isin(np.asarray(segment.meta[:, META_ROWID]), admitted)
    if segment.dead.shape[0]:
        mask[segment.dead] = False
    positions = np.flatnonzero(mask)
    if positions.shape[0] <= limit:
        return positions
    scores = integer_dots(segment.vectors[positions], q8)
    scores *= segment.inv_norms[positions]
    scores *= inv_q
    kth = np.partition(scores, positions.shape[0] - limit)[positions.shape[0] - limit]
    return positions[scores >= kth - SCORE_MARGIN]


def _segment_candidates(
    segment: Segment, q8: np.ndarray, inv_q: np.float32, limit: int
) -> np.ndarray:
    """Positions that may hold one of the segment's ``limit`` best live rows."""
    n = segment.size
    k = min(limit, segment.live)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    # Exact integer dots, then two correctly rounded float32 products: the selection
    # scores are the same bits on every machine (rifflux.vectors.quantize). The dots run
    # on the calling thread: waking other threads costs milliseconds on a busy 2-core
    # machine, more than the whole scan at 20k rows.
    scores = integer_dots(segment.vectors, q8)
    scores *= segment.inv_norms
    scores *= inv_q
    if segment.dead.shape[0]:
        scores[segment.dead] = -np.inf
    if k < n:
        kth = np.partition(scores, n - k)[n - k]
        return np.flatnonzero(scores >= kth - SCORE_MARGIN)
    return np.flatnonzero(scores > -np.inf)


def search_segments(
    segments: Sequence[Segment],
    query: np.ndarray,
    limit: int,
    admitted: np.ndarray | None = None,
    check: Callable[[], None] | None = None,
) -> list[Candidate]:
    """The ``limit`` live rows most similar to ``query``, over every segment.

    Best first; equal scores by (path, chunk_index) ascending. Each segment contributes
    its own candidates (one matrix-vector product, tombstones masked, argpartition-style
    selection); candidates are rescored exactly (int8 cosine, :mod:`rifflux.vectors.
    quantize`) and merged, so scores and order are the same bits on every machine and
    however the rows are split into segments. [] for a zero-norm query.
    ``admitted`` (sorted rowids, a search filter's): only those rows are scored, exactly
    (a filtered search never goes through a graph). ``check`` (a search's deadline) is
    called before each segment and may raise to stop the scan.
    """
    if limit <= 0:
        return []
    q8 = quantize_query(np.asarray(query, dtype=np.float64))
    qq = int(np.dot(q8.astype(np.int64), q8.astype(np.int64)))
    if qq == 0:
        return []
    inv_q = np.float32(1.0 / np.sqrt(float(qq)))
    merged: list[Candidate] = []
    for segment in segments:
        if check is not None:
            check()
        if admitted is not None:
            positions = _admitted_candidates(segment, q8, inv_q, limit, admitted)
            merged.extend(rescore(segment, positions, q8))
        elif segment.graph is not None and limit < segment.live:
            merged.extend(_graph_candidates(segment, q8, inv_q, limit))
        else:
            positions = _segment_candidates(segment, q8, inv_q, limit)
            merged.extend(rescore(segment, positions, q8))
    merged.sort(key=lambda c: (-c.cosine, c.key))
    return merged[:limit]


def _graph_candidates(
    segment: Segment, q8: np.ndarray, inv_q: np.float32, limit: int
) -> list[Candidate]:
    """The segment's ``limit`` best live rows among its graph's candidates, rescored
    exactly; wider searches while tombstones leave too few, then an exact scan."""
    assert segment.graph is not None
    count = max(limit, segment.graph.ef)
    while count < segment.size:
        positions = segment.graph.positions(q8, count)
        if segment.dead.shape[0]:
            positions = positions[np.isin(positions, segment.dead, invert=True)]
        if positions.shape[0] >= limit:
            found = rescore(segment, positions, q8)
            found.sort(key=lambda c: (-c.cosine, c.key))
            return found[:limit]
        count *= 4
    return rescore(segment, _segment_candidates(segment, q8, inv_q, limit), q8)


def rescore(segment: Segment, positions: np.ndarray, q8: np.ndarray) -> list[Candidate]:
    """Candidates of a segment's rows at ``positions``, with their exact cosines."""
    if positions.shape[0] == 0:
        return []
    meta = np.asarray(segment.meta[positions])
    scores = exact_cosines(segment.vectors[positions], meta[:, META_SQNORM], q8)
    return list(
        Candidate(
            int(row[META_ROWID]),
            int(row[META_IDENT]),
            (segment.paths[int(row[META_PATH])], int(row[META_INDEX])),
            float(score),
        )
        for row, score in zip(meta, scores, strict=True)
    )
