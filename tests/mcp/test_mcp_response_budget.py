"""Every answer fits an agent: RIFFLUX_MAX_RESPONSE_TOKENS bounds each tool's answer as
sent (compact JSON), and ``max_tokens`` is the size of the whole answer; through a real
MCP client session over stdio, on an index whose plain answers are far larger."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp import ClientSession
from mcp.types import CallToolResult
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    build_tree,
    call_error,
    stdio_session,
    write_docs,
)

from rifflux.search.budget import estimate_tokens

pytestmark = pytest.mark.anyio

TIMEOUT = 60
DEFAULT_LIMIT = 20_000
"""RIFFLUX_MAX_RESPONSE_TOKENS when the environment does not set it."""


def paragraph(file: int, index: int) -> str:
    words = " ".join(f"topic{file}x{index}w{j}" for j in range(60))
    return f"Common ground for every note, paragraph {index} of note {file}: {words}."


def note(file: int, paragraphs: int = 5) -> str:
    sections = [f"## Part {i}\n\n{paragraph(file, i)}" for i in range(paragraphs)]
    return f"# Note {file}\n\n" + "\n\n".join(sections) + "\n"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    """120 notes of five sections (a top_k 100 search of "common" is ~40k tokens) and
    one long file (~80k tokens)."""
    docs = {f"notes/note{i:03d}.md": note(i) for i in range(120)}
    docs["long/manual.md"] = note(999, paragraphs=300)
    return build_tree(tmp_path_factory.mktemp("answers") / "work", docs)


@pytest.fixture(scope="module")
async def session(tree: IndexedTree) -> AsyncIterator[ClientSession]:
    async with stdio_session(tree) as client:
        yield client


async def answer(session: ClientSession, tool: str, **arguments: Any) -> tuple[dict[str, Any], str]:
    """(structured content, text content) of a call that must succeed."""
    result: CallToolResult = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    text = result.content[0].text  # type: ignore[union-attr]
    return result.structured_content, text


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def test_text_content_is_compact_json(session: ClientSession) -> None:
    found, text = await answer(session, "search_rifflux", query="topic3x1w5", mode="lexical")
    assert text == compact(found)
    status, text = await answer(session, "index_status")
    assert text == compact(status) and "\n" not in text


async def test_a_top_k_100_search_keeps_to_the_default_limit_and_says_so(
    session: ClientSession,
) -> None:
    query = "common ground"
    found, text = await answer(session, "search_rifflux", query=query, mode="lexical", top_k=100)
    size = estimate_tokens(text)
    assert size <= DEFAULT_LIMIT
    budget = found["budget"]
    assert budget["max_tokens"] == DEFAULT_LIMIT and budget["used_tokens"] == size
    assert (
        budget["dropped"] > 0 and found["count"] == len(found["results"]) == 100 - budget["dropped"]
    )
    assert all({"tokens", "truncated"} <= set(r) for r in found["results"])
    # Trimmed as max_tokens trims: the same answer as asking for the limit outright.
    asked, _ = await answer(
        session, "search_rifflux", query=query, mode="lexical", top_k=100, max_tokens=DEFAULT_LIMIT
    )
    assert asked == found
    # An answer under the limit is untouched: no budget, no tokens per result.
    small, _ = await answer(session, "search_rifflux", query=query, mode="lexical", top_k=5)
    assert "budget" not in small and all("tokens" not in r for r in small["results"])


async def test_max_tokens_is_the_size_of_the_whole_answer(session: ClientSession) -> None:
    found, text = await answer(
        session, "search_rifflux", query="common ground", mode="lexical", top_k=100, max_tokens=800
    )
    assert estimate_tokens(text) == found["budget"]["used_tokens"] <= 800
    assert found["count"] >= 1
    # The contents alone are well under it: the rest is the answer around them.
    assert sum(r["tokens"] for r in found["results"]) < 800 * 0.8


async def test_get_file_and_multi_get_keep_to_the_default_limit(session: ClientSession) -> None:
    whole_file, text = await answer(session, "get_file", path="long/manual.md")
    assert estimate_tokens(text) == whole_file["file"]["budget"]["used_tokens"] <= DEFAULT_LIMIT
    chunks = whole_file["file"]["chunks"]
    assert whole_file["file"]["budget"]["dropped"] > 0
    assert [c["chunk_index"] for c in chunks] == list(range(len(chunks)))
    section, _ = await answer(session, "get_file", path="long/manual.md", heading="Part 7")
    assert "budget" not in section["file"]
    files, text = await answer(session, "multi_get", paths=["notes/*.md"])
    assert estimate_tokens(text) == files["budget"]["used_tokens"] <= DEFAULT_LIMIT
    assert files["not_included"] and files["budget"]["dropped"] == len(files["not_included"])
    fitted, text = await answer(session, "multi_get", paths=["notes/*.md"], max_tokens=1000)
    assert estimate_tokens(text) == fitted["budget"]["used_tokens"] <= 1000


async def test_knowledge_searches_take_top_k_as_limit(session: ClientSession) -> None:
    by_limit, _ = await answer(session, "search_errors", query="common", limit=3)
    by_top_k, _ = await answer(session, "search_errors", query="common", top_k=3)
    assert by_limit == by_top_k
    same, _ = await answer(session, "search_decisions", query="common", limit=2, top_k=2)
    assert same["count"] <= 2
    message = await call_error(
        session, "search_decisions", timeout=TIMEOUT, query="common", limit=2, top_k=5
    )
    assert message == (
        "limit and top_k name the same argument; give one of them (got limit 2 and top_k 5)"
    )


async def test_an_answer_with_nothing_to_cut_over_the_limit_is_one_line(
    tree: IndexedTree,
) -> None:
    async with stdio_session(tree, RIFFLUX_MAX_RESPONSE_TOKENS="400") as small:
        found, text = await answer(small, "search_rifflux", query="common ground", top_k=20)
        assert estimate_tokens(text) <= 400 and found["budget"]["max_tokens"] == 400
        manual = await answer(small, "get_file", path="long/manual.md")
        chunk_id = manual[0]["file"]["chunks"][0]["chunk_id"]
        message = await call_error(
            small, "get_chunk", timeout=TIMEOUT, chunk_id=chunk_id, neighbors=5
        )
        assert message.startswith("the answer of get_chunk is ~")
        assert "over this server's limit of 400 (RIFFLUX_MAX_RESPONSE_TOKENS)" in message
        # A larger max_tokens asked outright is the caller's choice.
        asked, text = await answer(
            small, "search_rifflux", query="common ground", top_k=20, max_tokens=1500
        )
        assert 400 < estimate_tokens(text) == asked["budget"]["used_tokens"] <= 1500
