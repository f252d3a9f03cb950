"""The query cache: LRU and TTL as pure behaviour, and invalidation on a real reindex."""

from __future__ import annotations

from pathlib import Path

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


def build(tmp_path: Path, **overrides: object) -> tuple[SearchService, Path]:
    docs = tmp_path / "docs"
    docs.mkdir()
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


def test_every_argument_is_part_of_the_key(tmp_path: Path) -> None:
    service, _docs = build(tmp_path)
    plain = service.search_response(SearchRequest("walrus ice"))
    narrowed = service.search_response(SearchRequest("walrus ice", path_glob="docs/b.md"))
    assert [r["path"] for r in narrowed["results"]] == ["docs/b.md"]
    assert narrowed != plain
    same = service.search_response(SearchRequest("walrus ice", path_glob=["docs/b.md"]))
    assert same == narrowed and service._query_cache.hits == 1
    service.close()
