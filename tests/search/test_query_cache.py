"""The query cache: LRU, TTL and byte bound as pure behaviour, and invalidation on a
real reindex."""

from __future__ import annotations

import json
import sys
import tracemalloc
from pathlib import Path

import pytest
from rifflux_testing import make_settings

from rifflux.index.indexer import Indexer
from rifflux.search.query_cache import QueryCache
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService
from rifflux.vectors.publish import publish


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def remember(cache: QueryCache, key: str, state: object, response: dict[str, object]) -> None:
    """As the service does: a lookup that misses, then the answer computed at that state."""
    assert cache.get(key, state) is None
    cache.put(key, state, response)


def test_lru_keeps_the_most_recently_used_entries() -> None:
    cache = QueryCache(2, 300)
    remember(cache, "a", 1, {"k": "a"})
    remember(cache, "b", 1, {"k": "b"})
    assert cache.get("a", 1) == {"k": "a"}  # a is now the most recent
    remember(cache, "c", 1, {"k": "c"})
    assert cache.get("b", 1) is None  # evicted
    assert cache.get("a", 1) == {"k": "a"} and cache.get("c", 1) == {"k": "c"}


def test_entries_expire_after_the_ttl() -> None:
    clock = Clock()
    cache = QueryCache(10, 300, clock=clock)
    remember(cache, "q", 1, {"r": 1})
    clock.now += 300
    assert cache.get("q", 1) == {"r": 1}
    clock.now += 0.5
    assert cache.get("q", 1) is None


def test_a_new_state_empties_the_cache_and_an_old_answer_is_never_stored() -> None:
    cache = QueryCache(10, 300)
    remember(cache, "q", "g1", {"r": 1})
    assert cache.get("q", "g1") == {"r": 1}
    assert cache.get("other", "g2") is None  # The state moved: everything is gone.
    assert len(cache) == 0
    cache.put("q", "g1", {"r": "late"})  # Computed at g1, arrives after g2 was seen.
    assert len(cache) == 0
    assert cache.get("q", "g2") is None


def test_hits_are_copies_and_size_zero_turns_the_cache_off() -> None:
    cache = QueryCache(10, 300)
    remember(cache, "q", 1, {"results": [{"a": 1}]})
    hit = cache.get("q", 1)
    assert hit is not None
    hit["results"].clear()
    assert cache.get("q", 1) == {"results": [{"a": 1}]}
    off = QueryCache(0, 300)
    remember(off, "q", 1, {"r": 1})
    assert off.get("q", 1) is None and len(off) == 0


def big_response(key: str, kib: int) -> dict[str, object]:
    """A response shaped as a search's, about ``kib`` KiB of JSON, every text its own
    string (as texts read from the index are)."""
    results = [
        {"chunk_id": f"{key}-{i}", "path": f"docs/{key}.md", "content": f"{key} {i} " * 100}
        for i in range(kib)
    ]
    return {"query": key, "mode": "hybrid", "count": len(results), "results": results}


def entry_bytes(key: str, response: dict[str, object]) -> int:
    """What the cache accounts for an entry: its stored JSON and its key."""
    return sys.getsizeof(json.dumps(response, separators=(",", ":"))) + len(repr(key))


def test_the_byte_bound_holds_and_evicts_the_least_recently_used() -> None:
    bound = 256 * 1024
    cache = QueryCache(1000, 300, max_bytes=bound)
    sizes = {f"q{i}": 10 + (i * 7) % 40 for i in range(60)}  # 10-49 KiB each
    recency: list[str] = []  # Oldest first: the reference LRU.
    accounted: dict[str, int] = {}
    for i, (key, kib) in enumerate(sizes.items()):
        response = big_response(key, kib)
        remember(cache, key, 1, response)
        recency.append(key)
        accounted[key] = entry_bytes(key, response)
        if i % 3 == 0 and len(recency) > 2:
            # Touch the oldest live entry: it becomes the most recently used.
            oldest = next(k for k in recency if k in kept(recency, accounted, bound))
            assert cache.get(oldest, 1) == big_response(oldest, sizes[oldest])
            recency.remove(oldest)
            recency.append(oldest)
        survivors = kept(recency, accounted, bound)
        assert cache.bytes == sum(accounted[k] for k in survivors) <= bound
        assert len(cache) == len(survivors)
    survivors = kept(recency, accounted, bound)
    assert 4 < len(survivors) < len(sizes)
    for key in recency:  # Oldest first, so a hit's move to the end evicts nothing.
        hit = cache.get(key, 1)
        assert (hit is not None) == (key in survivors), key


def kept(recency: list[str], accounted: dict[str, int], bound: int) -> set[str]:
    """The entries an LRU bounded by ``bound`` bytes holds: the most recent ones whose
    sizes add up to at most the bound."""
    total, held = 0, set()
    for key in reversed(recency):
        if total + accounted[key] > bound:
            break
        total += accounted[key]
        held.add(key)
    return held


def test_a_response_larger_than_the_bound_is_not_kept_and_evicts_nothing() -> None:
    cache = QueryCache(10, 300, max_bytes=64 * 1024)
    remember(cache, "small", 1, big_response("small", 4))
    remember(cache, "huge", 1, big_response("huge", 100))
    assert cache.get("huge", 1) is None
    assert cache.get("small", 1) == big_response("small", 4)


def test_the_memory_a_full_cache_holds_is_its_byte_bound() -> None:
    """Measured by tracemalloc (every Python allocation), not by the cache's own count:
    200 responses of ~100 KiB through a 4 MiB cache hold ~4 MiB, not 20 MiB."""
    bound = 4 * 2**20
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cache = QueryCache(1000, 300, max_bytes=bound)
        for i in range(200):
            remember(cache, f"q{i}", 1, big_response(f"q{i}", 100))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(cache) < 200
    assert held < bound * 1.05, f"{held / 2**20:.1f} MiB for a {bound / 2**20:.0f} MiB cache"


def build(tmp_path: Path, **overrides: object) -> tuple[SearchService, Path]:
    docs = tmp_path / "docs"
    docs.mkdir(parents=True)
    (docs / "a.md").write_text("# A\n\nThe walrus sleeps on the ice floe.\n")
    (docs / "b.md").write_text("# B\n\nPenguins swim under the ice.\n")
    settings = make_settings(tmp_path, min_chunk_chars=0, **overrides)
    Indexer(settings).run([docs])
    return SearchService(settings), docs


def test_a_reindex_invalidates_cached_answers_at_once(tmp_path: Path) -> None:
    service, docs = build(tmp_path)
    request = SearchRequest("walrus ice", mode="hybrid")
    first = service.search_response(request)
    assert service.search_response(request) == first
    assert service._query_cache.hits == 1

    (docs / "c.md").write_text("# C\n\nA walrus colony on the ice, walrus after walrus.\n")
    Indexer(service.settings).run([docs])

    after = service.search_response(request)
    assert "docs/c.md" in [r["path"] for r in after["results"]]
    assert after["count"] == first["count"] + 1
    # A fresh service (no cache) agrees with what the cached one answers now.
    fresh = SearchService(service.settings)
    assert fresh.search_response(request) == after
    fresh.close()
    service.close()


def test_a_publish_at_the_same_generation_invalidates_too(tmp_path: Path) -> None:
    service, _docs = build(tmp_path)
    request = SearchRequest("penguins", mode="semantic", top_k=1)
    service.search_response(request)
    publish(service.db_path, source="repair", full=True)
    service.search_response(request)
    assert service._query_cache.hits == 0
    service.close()


def test_query_cache_size_zero_searches_every_time(tmp_path: Path) -> None:
    service, _docs = build(tmp_path, query_cache_size=0)
    request = SearchRequest("walrus")
    assert service.search_response(request) == service.search_response(request)
    assert service._query_cache.hits == 0 and len(service._query_cache) == 0
    service.close()


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"mode": "lexical", "top_k": 1},
        {"mode": "semantic"},
        {"fusion": "minmax", "alpha": 0.3},
        {"group_by": "file"},
        {"lexical_weight": 2.0, "candidate_k": 20},
        {"max_tokens": 300},
        {"path_glob": ["docs/*.md"], "content_contains": "walrus"},
    ],
)
def test_a_hit_is_exactly_the_response_the_search_computed(
    tmp_path: Path, arguments: dict[str, object]
) -> None:
    """A hit is decoded from the stored JSON: every type and key survives it."""
    service, _docs = build(tmp_path)
    request = SearchRequest.from_arguments({"query": "walrus ice", **arguments})
    computed = service.search_response(request)
    assert computed["results"]
    hit = service.search_response(request)
    assert service._query_cache.hits == 1
    assert hit == computed and repr(hit) == repr(computed)
    service.close()


def test_services_sharing_a_cache_keep_each_index_apart(tmp_path: Path) -> None:
    one, docs = build(tmp_path / "one")
    other, other_docs = build(tmp_path / "two")
    (other_docs / "d.md").write_text("# D\n\nWalrus and penguins, only in the second index.\n")
    Indexer(other.settings).run([other_docs])
    two = SearchService(other.settings, query_cache=one.query_cache)
    request = SearchRequest("walrus penguins")
    answers = [one.search_response(request), two.search_response(request)]
    assert (answers[0]["count"], answers[1]["count"]) == (2, 3)
    (docs / "c.md").write_text("# C\n\nA walrus colony.\n")
    Indexer(one.settings).run([docs])  # Moves the first index only.
    assert two.search_response(request) == answers[1]
    assert one.search_response(request) != answers[0]
    assert one.query_cache.hits == 1 and len(one.query_cache) == 2
    for service in (one, other, two):
        service.close()


def test_every_argument_is_part_of_the_key(tmp_path: Path) -> None:
    service, _docs = build(tmp_path)
    plain = service.search_response(SearchRequest("walrus ice"))
    narrowed = service.search_response(SearchRequest("walrus ice", path_glob="docs/b.md"))
    assert [r["path"] for r in narrowed["results"]] == ["docs/b.md"]
    assert narrowed != plain
    same = service.search_response(SearchRequest("walrus ice", path_glob=["docs/b.md"]))
    assert same == narrowed and service._query_cache.hits == 1
    service.close()
