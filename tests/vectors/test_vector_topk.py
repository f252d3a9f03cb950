"""Segment search with tombstones equals the naive scan over live rows: the same rows, in
the same order, with the same int8 cosine bits as the scalar reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rifflux.vectors.quantize import quantize_query, quantize_rows, scalar_cosine
from rifflux.vectors.scan import search_segments
from rifflux.vectors.segments import Segment, segment_meta


def make_segment(
    rows: np.ndarray, keys: list[tuple[str, int]], rowids: list[int], dead: list[int]
) -> Segment:
    """A segment as the publisher writes it: rows sorted by key, quantized to int8."""
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    paths = sorted({keys[i][0] for i in order})
    vectors = quantize_rows(rows[order])
    meta = segment_meta(
        np.array([rowids[i] for i in order], dtype=np.int64),
        np.array([rowids[i] for i in order], dtype=np.int64),
        np.array([paths.index(keys[i][0]) for i in order], dtype=np.int64),
        np.array([keys[i][1] for i in order], dtype=np.int64),
        vectors,
    )
    position = {i: p for p, i in enumerate(order)}
    return Segment(
        vectors,
        meta,
        tuple(paths),
        np.array(sorted(position[i] for i in dead), dtype=np.int64),
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, list[int], list[int], list[bool], np.ndarray, int]:
    dim = draw(st.integers(2, 6))
    n = draw(st.integers(1, 40))
    # Few distinct small integer values: duplicate and parallel rows, hence exact ties.
    flat = draw(st.lists(st.integers(-2, 2), min_size=n * dim, max_size=n * dim))
    rows = np.array(flat, dtype=np.float64).reshape(n, dim)
    segment_of = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    order = draw(st.permutations(list(range(n))))
    dead = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    query = np.array(draw(st.lists(st.integers(-2, 2), min_size=dim, max_size=dim)), np.float64)
    limit = draw(st.integers(1, n + 3))
    return rows, segment_of, order, dead, query, limit


@settings(max_examples=300, deadline=None)
@given(cases())
def test_segment_search_equals_naive_cosine_over_live_rows(
    case: tuple[np.ndarray, list[int], list[int], list[bool], np.ndarray, int],
) -> None:
    rows, segment_of, order, dead, query, limit = case
    n = rows.shape[0]
    # Keys: a shuffled (path, chunk_index) for every row, a few rows per path.
    keys = [(f"docs/{order[i] // 3:02d}.md", order[i] % 3) for i in range(n)]
    segments = []
    for s in range(4):
        members = [i for i in range(n) if segment_of[i] == s]
        if not members:
            continue
        dead_local = [j for j, i in enumerate(members) if dead[i]]
        segments.append(
            make_segment(rows[members], [keys[i] for i in members], members, dead_local)
        )

    hits = search_segments(segments, query, limit)

    live = [i for i in range(n) if not dead[i]]
    if not np.any(query) or not live:
        assert hits == []
        return
    q8 = quantize_query(query).tolist()
    naive = {i: scalar_cosine(quantize_rows(rows[i : i + 1])[0].tolist(), q8) for i in live}
    expected = sorted(live, key=lambda i: (-naive[i], keys[i]))[:limit]
    assert [h.row_id for h in hits] == expected, "rows or order differ from the naive scan"
    assert [h.cosine for h in hits] == [naive[i] for i in expected]
    assert all(hit.key == keys[hit.row_id] for hit in hits)


def test_equal_vectors_in_different_segments_order_by_path_then_chunk_index() -> None:
    rng = np.random.default_rng(7)
    twin = rng.standard_normal(384)
    others = rng.standard_normal((300, 384))
    first = np.vstack([others[:150], twin])
    second = np.vstack([twin, others[150:], twin])
    seg_a = make_segment(first, [("b.md", i) for i in range(151)], list(range(151)), [])
    keys_b = [("a.md", 5)] + [("c.md", i) for i in range(150)] + [("b.md", 999)]
    seg_b = make_segment(second, keys_b, list(range(1000, 1152)), [])

    hits = search_segments([seg_a, seg_b], twin, 3)

    assert [h.key for h in hits] == [("a.md", 5), ("b.md", 150), ("b.md", 999)]
    assert hits[0].cosine == hits[1].cosine == hits[2].cosine


def test_tombstoned_rows_are_never_returned_even_when_limit_exceeds_live_rows() -> None:
    rows = np.eye(4)
    segment = make_segment(rows, [("a.md", i) for i in range(4)], [10, 11, 12, 13], [0, 2])

    hits = search_segments([segment], np.ones(4), 10)

    assert sorted(h.row_id for h in hits) == [11, 13]


def test_zero_query_and_empty_segments_return_nothing() -> None:
    segment = make_segment(np.eye(3), [("a.md", i) for i in range(3)], [1, 2, 3], [])
    assert search_segments([segment], np.zeros(3), 5) == []
    assert search_segments([], np.ones(3), 5) == []
    assert search_segments([segment], np.ones(3), 0) == []
