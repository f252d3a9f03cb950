"""Semantic scores are the same bits however they are computed (issue 14, CFS-012):
across BLAS thread counts and CPU kernels, across one matrix and the same rows in
segments, and against a scalar reference in plain Python integers."""

from __future__ import annotations

import itertools

import numkong
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from rifflux.store.vector_blobs import MAX_EXACT_DIM
from rifflux.vectors.quantize import (
    integer_dots,
    quantize_query,
    quantize_rows,
    scalar_cosine,
    squared_norms,
)
from rifflux.vectors.scan import Candidate, search_segments
from rifflux.vectors.segments import Segment, segment_meta

DIM = 384
ROWS = 3000
LIMIT = 50


def corpus(seed: int = 14) -> tuple[np.ndarray, np.ndarray]:
    """Unit rows drawn around a few centroids (near-ties are common), and a query."""
    rng = np.random.default_rng(seed)
    centroids = rng.standard_normal((12, DIM))
    rows = centroids[rng.integers(0, 12, ROWS)] + 0.35 * rng.standard_normal((ROWS, DIM))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows.astype(np.float32), (centroids[3] + 0.3 * rng.standard_normal(DIM))


def segments_of(vectors: np.ndarray, bounds: list[int]) -> list[Segment]:
    """Consecutive slices of the rows as segments; row i has rowid i and key (d{i//5}, i%5)."""
    out = []
    for start, stop in itertools.pairwise(bounds):
        ids = np.arange(start, stop, dtype=np.int64)
        paths = sorted({f"d{i // 5:04d}.md" for i in range(start, stop)})
        ordinals = np.array([paths.index(f"d{i // 5:04d}.md") for i in ids], dtype=np.int64)
        part = vectors[start:stop]
        out.append(Segment(part, segment_meta(ids, ids, ordinals, ids % 5, part), tuple(paths)))
    return out


def bits(hits: list[Candidate]) -> list[tuple[int, bytes]]:
    return [(h.row_id, np.float32(h.cosine).tobytes()) for h in hits]


def test_integer_dots_are_exact_under_any_blas_thread_count_and_summation_order() -> None:
    rows, query = corpus()
    matrix, q8 = quantize_rows(rows), quantize_query(query)
    exact = matrix.astype(np.int64) @ q8.astype(np.int64)  # integer arithmetic: the truth
    as_float = matrix.astype(np.float32)
    for threads in (1, 2):
        with threadpool_limits(limits=threads):
            blas = as_float @ q8.astype(np.float32)  # sgemv: BLAS's own summation order
            ours = integer_dots(matrix, q8)
        assert np.array_equal(blas.astype(np.int64), exact), f"BLAS, {threads} threads"
        assert np.array_equal(ours.astype(np.int64), exact), f"scan, {threads} threads"
    # Reversed and pairwise summation orders give the same bits too.
    assert np.array_equal(as_float[:, ::-1] @ q8[::-1].astype(np.float32), exact)
    assert np.array_equal(np.sum(as_float * q8.astype(np.float32), axis=1), exact)


def test_the_scan_is_exact_with_every_cpu_kernel_down_to_the_serial_one() -> None:
    """The scan's SIMD kernels (one per instruction set) all give the exact integers:
    a machine without AVX-512 (or without AVX2) scores exactly as this one does."""
    rows, query = corpus()
    matrix, q8 = quantize_rows(rows), quantize_query(query)
    exact = matrix.astype(np.int64) @ q8.astype(np.int64)
    simd = [name for name, on in numkong.get_capabilities().items() if on and name != "serial"]
    disabled: list[str] = []
    try:
        # Newest first, so each step falls back to an older kernel, finally the serial one.
        for name in [
            c for c in ("genoa", "sapphire", "icelake", "skylake", "haswell") if c in simd
        ]:
            numkong.disable_capability(name)
            disabled.append(name)
            got = integer_dots(matrix, q8)
            assert np.array_equal(got.astype(np.int64), exact), f"without {disabled}"
    finally:
        for name in disabled:
            numkong.enable_capability(name)


def test_scores_and_ranks_are_bit_identical_across_blas_thread_counts() -> None:
    rows, query = corpus()
    segments = segments_of(quantize_rows(rows), [0, ROWS])
    with threadpool_limits(limits=1):
        one = search_segments(segments, query, LIMIT)
    with threadpool_limits(limits=2):
        two = search_segments(segments, query, LIMIT)
    assert bits(one) == bits(two) and len(one) == LIMIT


@pytest.mark.parametrize("bounds", [[0, 1000, 2000, ROWS], [0, 7, 1500, 2999, ROWS]])
def test_scores_and_ranks_are_bit_identical_whole_and_in_segments(bounds: list[int]) -> None:
    rows, query = corpus()
    vectors = quantize_rows(rows)
    whole = search_segments(segments_of(vectors, [0, ROWS]), query, LIMIT)
    split = search_segments(segments_of(vectors, bounds), query, LIMIT)
    assert bits(whole) == bits(split)


def test_scores_and_ranks_equal_a_scalar_reference_in_python_integers() -> None:
    rows, query = corpus()
    vectors = quantize_rows(rows)
    hits = search_segments(segments_of(vectors, [0, 1200, ROWS]), query, LIMIT)

    q8 = quantize_query(query).tolist()
    scores = {i: scalar_cosine(vectors[i].tolist(), q8) for i in range(ROWS)}
    expected = sorted(range(ROWS), key=lambda i: (-scores[i], f"d{i // 5:04d}.md", i % 5))
    assert [h.row_id for h in hits] == expected[:LIMIT]
    assert [h.cosine for h in hits] == [scores[i] for i in expected[:LIMIT]]


@pytest.mark.parametrize("dim", [1, 384, MAX_EXACT_DIM, MAX_EXACT_DIM + 1])
def test_squared_norms_are_the_exact_integers_at_every_dimension(dim: int) -> None:
    rng = np.random.default_rng(dim)
    rows = rng.integers(-127, 128, size=(50, dim), dtype=np.int8)
    rows[0] = -127  # the largest sum a row can have
    rows[1] = 0
    expected = [sum(int(v) * int(v) for v in row) for row in rows]
    norms = squared_norms(rows)
    assert norms.dtype == np.int64
    assert norms.tolist() == expected


def test_quantization_is_per_row_whatever_the_blocks() -> None:
    rows, _ = corpus()
    whole = quantize_rows(rows)
    one_by_one = np.vstack([quantize_rows(rows[i : i + 1]) for i in range(0, ROWS, 97)])
    assert np.array_equal(whole[::97], one_by_one)
    # The largest component of every row is exactly ±127; the scale is per row.
    assert np.all(np.abs(whole.astype(np.int16)).max(axis=1) == 127)
    # Scale-invariant: a row and a multiple of it quantize alike.
    assert np.array_equal(quantize_rows(rows[:10] * 3.5), whole[:10])
