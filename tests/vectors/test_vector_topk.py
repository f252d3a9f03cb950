"""Segment search with tombstones equals the naive cosine over live rows."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rifflux.vectors.cosine import cosine_scores
from rifflux.vectors.segments import Segment, normalize_rows, search_segments

# Ties closer than this are not ordered by the naive float32 cosine with any certainty.
TOLERANCE = 1e-6


def make_segment(
    rows: np.ndarray, keys: list[tuple[str, int]], rowids: list[int], dead: list[int]
) -> Segment:
    """A segment as the publisher writes it: rows sorted by key, normalised."""
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    paths = sorted({keys[i][0] for i in order})
    meta = np.array(
        [[rowids[i], rowids[i], paths.index(keys[i][0]), keys[i][1]] for i in order],
        dtype=np.int64,
    ).reshape(-1, 4)
    position = {i: p for p, i in enumerate(order)}
    return Segment(
        normalize_rows(rows[order].astype(np.float32)),
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
    naive = cosine_scores(rows[live], query)
    naive_by_row = {i: float(s) for i, s in zip(live, naive, strict=True)}
    assert len(hits) == min(limit, len(live))
    returned = [h.row_id for h in hits]
    assert len(set(returned)) == len(returned)
    assert set(returned) <= set(live), "a tombstoned row was returned"
    for hit in hits:
        assert hit.key == keys[hit.row_id]
        assert abs(hit.cosine - naive_by_row[hit.row_id]) <= TOLERANCE
    # Best first, equal scores by (path, chunk_index).
    assert [(-h.cosine, h.key) for h in hits] == sorted((-h.cosine, h.key) for h in hits)
    # Nothing left out scores better than the last row returned.
    worst = min(naive_by_row[r] for r in returned)
    assert all(naive_by_row[i] <= worst + TOLERANCE for i in live if i not in set(returned))
    # Equal vectors tie exactly, wherever they are stored.
    for a in returned:
        for b in live:
            if np.array_equal(rows[a], rows[b]) and b in returned:
                assert hits[returned.index(a)].cosine == hits[returned.index(b)].cosine


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
