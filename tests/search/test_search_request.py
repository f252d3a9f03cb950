"""SearchRequest: validated once, with one message per field, and the field specs the
MCP schema and the CLI flags are generated from."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from rifflux_testing import make_settings

from rifflux.errors import InvalidQueryError, NotFoundError
from rifflux.index.indexer import Indexer
from rifflux.search.request import (
    MAX_TOP_K,
    MODES,
    REQUIRED,
    SearchRequest,
    as_integer,
    request_fields,
)
from rifflux.search.service import SearchService


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"mode": "fuzzy"}, "mode must be one of lexical, semantic, hybrid (got 'fuzzy')"),
        ({"mode": None}, "mode must be one of lexical, semantic, hybrid (got None)"),
        ({"top_k": 0}, "top_k must be an integer between 1 and 100 (got 0)"),
        ({"top_k": -3}, "top_k must be an integer between 1 and 100 (got -3)"),
        ({"top_k": 101}, "top_k must be an integer between 1 and 100 (got 101)"),
        ({"top_k": 2.5}, "top_k must be an integer between 1 and 100 (got 2.5)"),
        ({"top_k": True}, "top_k must be an integer between 1 and 100 (got True)"),
        ({"top_k": "10"}, "top_k must be an integer between 1 and 100 (got '10')"),
        ({"query": 3}, "query must be a string (got 3)"),
        ({"query": ["a"] * 40}, "query must be a string (got ['a', 'a', "),
        (
            {"query": "q" * 10_001},
            "query must be at most 10,000 characters (got 10,001); shorten it to the words "
            "that matter",
        ),
    ],
)
def test_a_bad_field_is_one_line_naming_it_what_it_accepts_and_the_value(
    arguments: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidQueryError) as caught:
        SearchRequest(**{"query": "basil", **arguments})  # type: ignore[arg-type]
    text = str(caught.value)
    assert text.startswith(message)
    assert "\n" not in text and len(text) < 160


def test_defaults_are_hybrid_top_10_and_bounds_are_inclusive() -> None:
    assert SearchRequest("x") == SearchRequest("x", top_k=10, mode="hybrid")
    assert SearchRequest("x", top_k=1).top_k == 1
    assert SearchRequest("x", top_k=MAX_TOP_K).top_k == 100
    assert {SearchRequest("x", mode=m).mode for m in MODES} == {"lexical", "semantic", "hybrid"}


def test_a_request_is_frozen() -> None:
    request = SearchRequest("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.top_k = 500  # type: ignore[misc]


def test_from_arguments_takes_the_fields_and_ignores_other_keys() -> None:
    request = SearchRequest.from_arguments(
        {"query": "q", "top_k": 3, "mode": "lexical", "db": "x", "json": True}
    )
    assert request == SearchRequest("q", top_k=3, mode="lexical")


def test_as_integer_reads_what_means_an_integer_and_leaves_the_rest_to_the_check() -> None:
    assert as_integer("10") == 10
    assert as_integer(" 7 ") == 7
    assert as_integer(10.0) == 10 and isinstance(as_integer(10.0), int)
    assert as_integer("ten") == "ten"
    assert as_integer(2.5) == 2.5
    assert as_integer(True) is True


def test_every_field_has_a_spec_whose_schema_accepts_its_default() -> None:
    specs = {name: (default, spec) for name, default, spec in request_fields()}
    assert list(specs) == [f.name for f in dataclasses.fields(SearchRequest)]
    assert specs["query"][0] is REQUIRED
    for name, (default, spec) in specs.items():
        assert spec.description
        if default is not REQUIRED:
            assert spec.check(default) == default, name
    top_k = specs["top_k"][1].json_schema
    assert (top_k["type"], top_k["minimum"], top_k["maximum"]) == ("integer", 1, MAX_TOP_K)
    assert specs["mode"][1].json_schema["enum"] == list(MODES)


DOCS = {
    "guide.md": "# Guide\n\n## Install\n\nInstall the package with apt on Linux.\n",
    "cooking.md": "# Cooking\n\nThe recipe needs two eggs, flour and sugar for the cake.\n",
}


@pytest.fixture
def service(tmp_path: Path) -> SearchService:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text)
    settings = make_settings(tmp_path, min_chunk_chars=0)
    Indexer(settings).run([root])
    return SearchService(settings)


@pytest.mark.parametrize("mode", MODES)
def test_search_response_is_the_request_and_the_results_of_search(
    service: SearchService, mode: str
) -> None:
    request = SearchRequest("install the package", top_k=2, mode=mode)  # type: ignore[arg-type]

    response = service.search_response(request)

    expected = service.search("install the package", top_k=2, mode=mode)
    assert 0 < len(expected) <= 2
    assert response == {
        "query": "install the package",
        "mode": mode,
        "count": len(expected),
        "embedding_model": "hash:384",
        "results": expected,
    }


def test_in_process_search_may_rank_deeper_than_a_request(service: SearchService) -> None:
    assert len(service.search("install eggs", top_k=MAX_TOP_K + 1, mode="lexical")) == 2
    with pytest.raises(InvalidQueryError, match=r"^top_k must be an integer of at least 1 \(got 0"):
        service.search("x", top_k=0)


def test_unknown_chunk_ids_and_non_indexed_paths_are_not_found(service: SearchService) -> None:
    with pytest.raises(NotFoundError, match=r"^no chunk with id 'feed' in the index$"):
        service.get_chunk("feed")
    for path in ("../etc/passwd", "/etc/passwd", "docs/../nothing.md", "docs", "nothing.md"):
        with pytest.raises(NotFoundError) as caught:
            service.get_file(path)
        assert str(caught.value) == (
            f"{path!r} is not an indexed file; pass a path as search results show it, "
            "or its absolute path"
        )


def test_an_indexed_file_is_found_by_its_absolute_path_and_other_spellings(
    service: SearchService, tmp_path: Path
) -> None:
    """Agents in IDE hosts hold absolute paths; results show paths relative to the base."""
    for spelling in (
        str(tmp_path / "docs" / "guide.md"),
        "./docs/guide.md",
        "docs/../docs/guide.md",
        f"{tmp_path}/docs/./guide.md",
    ):
        assert service.get_file(spelling)["path"] == "docs/guide.md", spelling
