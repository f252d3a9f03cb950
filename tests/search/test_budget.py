"""Token budgets: the estimator, the fitting of search results, get_file's budget and
heading, get_chunk's neighbours."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rifflux_testing import make_settings

from rifflux.errors import InvalidQueryError, NotFoundError
from rifflux.index.indexer import Indexer
from rifflux.search.budget import (
    ELLIPSIS,
    MIN_EXCERPT_TOKENS,
    budget_response,
    estimate_tokens,
    excerpt,
    fit_results,
    response_tokens,
)
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("hello world", 2),  # one token per word of up to 8 letters
        ("internationalization", 3),  # 20 letters: 8 + 8 + 4
        ("12345", 2),  # digits by threes
        ("a --> b", 4),  # "-->" is 2 punctuation tokens
        ("line\nbreak", 3),
        ("数据库", 3),  # one per CJK character
        ("", 0),
    ],
)
def test_estimate_counts_the_documented_pieces(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def filler(n: int, word: str = "lorem") -> str:
    return " ".join(f"{word}{i}" for i in range(n))


def result(i: int, content: str) -> dict[str, object]:
    return {"chunk_id": f"c{i}", "path": f"p{i}.md", "content": content, "score_breakdown": {}}


def unmarked(text: str) -> str:
    return text.removeprefix(ELLIPSIS).removesuffix(ELLIPSIS)


def test_results_that_fit_stay_whole_and_are_counted() -> None:
    results = [result(i, filler(10)) for i in range(3)]
    kept, budget = fit_results(results, "anything", 1000)
    assert [r["content"] for r in kept] == [r["content"] for r in results]
    assert all(r["truncated"] is False for r in kept)
    assert [r["tokens"] for r in kept] == [estimate_tokens(filler(10))] * 3
    assert budget == {
        "max_tokens": 1000,
        "used_tokens": 3 * estimate_tokens(filler(10)),
        "dropped": 0,
    }


def test_a_result_that_does_not_fit_is_cut_around_the_query_words_never_mid_word() -> None:
    long_text = filler(200) + " the budget keyword sits here " + filler(200, "ipsum")
    results = [result(0, filler(20)), result(1, long_text)]
    kept, budget = fit_results(results, "budget keyword", 80)
    assert kept[0]["truncated"] is False and kept[0]["content"] == filler(20)
    cut = kept[1]
    assert cut["truncated"] is True
    assert "budget keyword" in cut["content"]
    assert cut["content"].startswith(ELLIPSIS) and cut["content"].endswith(ELLIPSIS)
    inner = unmarked(cut["content"])
    start = long_text.index(inner)
    # Whole words: the cut begins after a space and ends before one.
    assert long_text[start - 1] == " " and long_text[start + len(inner)] == " "
    assert cut["tokens"] == estimate_tokens(cut["content"])
    assert budget["used_tokens"] == kept[0]["tokens"] + cut["tokens"] <= 80


def test_results_that_cannot_fit_are_dropped_and_order_is_kept() -> None:
    results = [result(i, filler(60)) for i in range(10)]
    kept, budget = fit_results(results, "lorem3", 100)
    ids = [r["chunk_id"] for r in kept]
    assert ids == sorted(ids, key=lambda c: int(c[1:]))  # rank order
    assert len(kept) < 10 and budget["dropped"] == 10 - len(kept)
    assert sum(r["tokens"] for r in kept) == budget["used_tokens"] <= 100
    assert all(r["tokens"] >= MIN_EXCERPT_TOKENS for r in kept)


def test_a_cjk_result_is_cut_around_the_cjk_word() -> None:
    text = "天气很好。" * 60 + "我们在花园里种番茄。" + "明天会下雨。" * 60
    (cut,) = fit_results([result(0, filler(45)), result(1, text)], "番茄", 80)[0][1:]
    assert "番茄" in cut["content"] and cut["truncated"] is True
    assert unmarked(cut["content"]) in text


words = st.text(alphabet="abcdefgh数据库검색", min_size=1, max_size=12)
texts = st.lists(words, min_size=0, max_size=300).map(" ".join)


@given(contents=st.lists(texts, min_size=1, max_size=8), budget=st.integers(50, 600), query=texts)
@settings(max_examples=60, deadline=None)
def test_a_budgeted_response_is_at_most_max_tokens_as_sent(
    contents: list[str], budget: int, query: str
) -> None:
    response = {"query": query, "count": len(contents), "results": []}
    response["results"] = [result(i, c) for i, c in enumerate(contents)]
    fitted = budget_response(response, query, budget)
    frame = budget_response({**response, "results": []}, query, budget)
    if response_tokens(frame) <= budget:  # Else the query echoed alone is over it.
        assert response_tokens(fitted) == fitted["budget"]["used_tokens"] <= budget
    assert fitted["count"] == len(fitted["results"]) == len(contents) - fitted["budget"]["dropped"]
    positions = [int(r["chunk_id"][1:]) for r in fitted["results"]]
    assert positions == sorted(positions)


@settings(max_examples=60, deadline=None)
@given(contents=st.lists(texts, min_size=1, max_size=8), budget=st.integers(50, 400), query=texts)
def test_any_results_fit_any_budget(contents: list[str], budget: int, query: str) -> None:
    results = [result(i, c) for i, c in enumerate(contents)]
    kept, info = fit_results(results, query, budget)
    assert sum(estimate_tokens(r["content"]) for r in kept) == info["used_tokens"] <= budget
    assert info["dropped"] == len(contents) - len(kept)
    positions = [int(r["chunk_id"][1:]) for r in kept]
    assert positions == sorted(positions)
    for r in kept:
        original = contents[int(r["chunk_id"][1:])]
        assert (
            (unmarked(r["content"]) in original) if r["truncated"] else (r["content"] == original)
        )


def test_excerpt_of_a_text_that_fits_is_the_text() -> None:
    one = excerpt("short text", "text", 50)
    assert one is not None and (one.text, one.truncated) == ("short text", False)


GUIDE = """# Guide

Intro paragraph about the guide and what it covers for new readers.

## Install

### Linux

Install on Linux with the package manager, then run the setup command once.

### Windows

Install on Windows with the installer from the website and restart.

## Usage

Run the tool with a directory of notes and read the results it prints.

# Admin

## Install

Administrators install the server component on a shared host.
"""


@pytest.fixture(scope="module")
def guide(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchService]:
    tmp = tmp_path_factory.mktemp("guide")
    (tmp / "docs").mkdir()
    (tmp / "docs" / "guide.md").write_text(GUIDE, encoding="utf-8")
    (tmp / "docs" / "long.md").write_text(
        "# Long\n\n" + "\n\n".join(f"## Part {i}\n\n" + filler(150) for i in range(8)),
        encoding="utf-8",
    )
    settings_ = make_settings(tmp, min_chunk_chars=10)
    Indexer(settings_).run([tmp / "docs"])
    service = SearchService(settings_)
    yield service
    service.close()


def headings(found: dict[str, object]) -> list[str]:
    return [c["heading_path"] for c in found["chunks"]]  # type: ignore[attr-defined,index]


def test_get_file_heading_returns_the_section_and_its_subsections(
    guide: SearchService,
) -> None:
    found = guide.get_file("docs/guide.md", heading="guide > install")
    assert found["heading"] == "Guide > Install"
    assert headings(found) == [
        "Guide > Install",
        "Guide > Install > Linux",
        "Guide > Install > Windows",
    ]
    assert guide.get_file("docs/guide.md", heading="WINDOWS")["heading"] == (
        "Guide > Install > Windows"
    )
    assert headings(guide.get_file("docs/guide.md", heading="Usage")) == ["Guide > Usage"]
    # A suffix must start at a word: "stall" names no section.
    with pytest.raises(NotFoundError, match=r"close headings: Guide > Install"):
        guide.get_file("docs/guide.md", heading="stall")


def test_an_ambiguous_suffix_lists_the_sections_it_matches(guide: SearchService) -> None:
    with pytest.raises(InvalidQueryError, match=r"Guide > Install; Admin > Install"):
        guide.get_file("docs/guide.md", heading="install")


def test_an_unknown_heading_is_one_line_listing_close_headings(guide: SearchService) -> None:
    with pytest.raises(NotFoundError) as info:
        guide.get_file("docs/guide.md", heading="Instal > Linx")
    message = str(info.value)
    assert "\n" not in message and message.startswith("no heading 'Instal > Linx' in docs/guide.md")
    listed = message.split("close headings: ")[1].split("; ")
    assert listed[0] == "Guide > Install > Linux" and len(listed) <= 10


def test_get_file_max_tokens_keeps_chunks_in_order_and_cuts_the_next(
    guide: SearchService,
) -> None:
    whole = guide.get_file("docs/long.md")
    fitted = guide.get_file("docs/long.md", max_tokens=500)
    chunks = fitted["chunks"]
    # The budget is the whole answer's, as the MCP tool and get-file --json send it.
    used = fitted["budget"]["used_tokens"]
    assert used == response_tokens({"file": fitted}) <= 500
    assert sum(c["tokens"] for c in chunks) < used
    assert fitted["budget"]["dropped"] == len(whole["chunks"]) - len(chunks) > 0
    assert [c["chunk_index"] for c in chunks] == list(range(len(chunks)))
    assert all(not c["truncated"] for c in chunks[:-1]) and chunks[-1]["truncated"]
    assert whole["chunks"][len(chunks) - 1]["content"].startswith(
        chunks[-1]["content"].removesuffix(ELLIPSIS)
    )
    with pytest.raises(InvalidQueryError, match=r"max_tokens must be an integer between 50"):
        guide.get_file("docs/long.md", max_tokens=10)


def test_get_chunk_neighbors_are_the_chunks_around_it_in_file_order(
    guide: SearchService,
) -> None:
    chunks = guide.get_file("docs/long.md")["chunks"]
    middle = chunks[4]
    found = guide.chunk_with_neighbors(middle["chunk_id"], 2)
    assert found["chunk"] == middle
    assert found["before"] == chunks[2:4] and found["after"] == chunks[5:7]
    edge = guide.chunk_with_neighbors(chunks[0]["chunk_id"], 5)
    assert edge["before"] == [] and edge["after"] == chunks[1:6]
    assert guide.chunk_with_neighbors(middle["chunk_id"]) == {"chunk": middle}
    with pytest.raises(InvalidQueryError, match=r"neighbors must be an integer between 0 and 5"):
        guide.chunk_with_neighbors(middle["chunk_id"], 6)


def test_search_without_max_tokens_is_unchanged_and_with_it_fits(guide: SearchService) -> None:
    plain = guide.search_response(SearchRequest(query="lorem5 notes", mode="lexical", top_k=10))
    assert "budget" not in plain and all("tokens" not in r for r in plain["results"])
    fitted = guide.search_response(
        SearchRequest(query="lorem5 notes", mode="lexical", top_k=10, max_tokens=120)
    )
    assert list(fitted) == ["query", "mode", "count", "embedding_model", "budget", "results"]
    assert fitted["count"] == len(fitted["results"]) == plain["count"] - fitted["budget"]["dropped"]
    assert fitted["budget"]["used_tokens"] <= 120
    kept_ids = [r["chunk_id"] for r in fitted["results"]]
    assert kept_ids == [r["chunk_id"] for r in plain["results"] if r["chunk_id"] in kept_ids]
    # Every field but content (and the two added) is the unbudgeted result's.
    by_id = {r["chunk_id"]: r for r in plain["results"]}
    for r in fitted["results"]:
        rest = {k: v for k, v in r.items() if k not in ("content", "tokens", "truncated")}
        assert rest == {k: v for k, v in by_id[r["chunk_id"]].items() if k != "content"}
    assert json.dumps(plain) == json.dumps(
        guide.search_response(SearchRequest(query="lorem5 notes", mode="lexical", top_k=10))
    )


@pytest.mark.parametrize("bad", [49, 100_001, True, 1.5, "many"])
def test_max_tokens_outside_its_range_names_the_argument(bad: object) -> None:
    with pytest.raises(
        InvalidQueryError,
        match=r"^max_tokens must be an integer between 50 and "
        r"100000 \(got ",
    ):
        SearchRequest(query="x", max_tokens=bad)  # type: ignore[arg-type]


def test_cut_text_boundaries_are_word_boundaries() -> None:
    text = filler(400)
    cut = excerpt(text, "lorem200", 60)
    assert cut is not None and cut.truncated
    inner = unmarked(cut.text)
    assert re.fullmatch(r"lorem\d+( lorem\d+)*", inner)
    assert "lorem200" in inner.split()
