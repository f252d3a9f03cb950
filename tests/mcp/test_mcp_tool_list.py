"""The tool list an agent reads: small, dedented, saying when to use each tool and which
search options fit which question, with every argument it ever had; through a real MCP
client session over stdio."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from mcp.types import ListToolsResult
from mcp_support import (  # noqa: F401  (fixtures)
    TOOL_NAMES,
    IndexedTree,
    anyio_backend_fixture,
    shared_tree_fixture,
    stdio_session,
)

from rifflux.search.budget import estimate_tokens

pytestmark = pytest.mark.anyio

MAX_TOOL_LIST_TOKENS = 2_500
"""The most estimated tokens the nine search-and-read tools of tools/list may cost every
client (they took ~3,800 with longer descriptions)."""

MAX_GREP_TOOL_TOKENS = 450
"""The most estimated tokens ``grep_rifflux``'s own entry may add to that."""

ARGUMENTS = {
    "search_rifflux": {
        "query", "top_k", "mode", "fusion", "alpha", "candidate_k", "group_by",
        "lexical_weight", "semantic_weight", "min_cosine", "path_glob", "modified_after",
        "modified_before", "file_types", "content_contains", "kinds", "tags", "status",
        "max_tokens", "db_path",
    },
    "reindex": {"path", "paths", "force", "prune_missing", "background"},
    "index_status": set(),
    "get_chunk": {"chunk_id", "neighbors"},
    "get_file": {"path", "heading", "max_tokens"},
    "search_decisions": {"query", "limit", "decision_type", "status", "max_tokens"},
    "search_errors": {"query", "limit", "max_tokens"},
    "context_stats": set(),
    "multi_get": {"paths", "max_tokens"},
}  # fmt: skip
"""Every tool's arguments as they were before the descriptions were shortened: none may go."""

INTERNAL_NAMES = ("CODITECT", "maxnorm", "RIFFLUX_FUSION", "the file is not read", "issue ")


@pytest.fixture(scope="module")
async def listed(shared_tree: IndexedTree) -> AsyncIterator[ListToolsResult]:
    async with stdio_session(shared_tree) as client:
        yield await client.list_tools()


async def test_the_tool_list_is_small(listed: ListToolsResult) -> None:
    grep = next(tool for tool in listed.tools if tool.name == "grep_rifflux")
    nine = listed.model_copy(update={"tools": [t for t in listed.tools if t is not grep]})
    assert estimate_tokens(nine.model_dump_json(by_alias=True, exclude_none=True)) <= (
        MAX_TOOL_LIST_TOKENS
    )
    assert estimate_tokens(grep.model_dump_json(by_alias=True, exclude_none=True)) <= (
        MAX_GREP_TOOL_TOKENS
    )


async def test_no_argument_was_lost(listed: ListToolsResult) -> None:
    tools = {tool.name: tool for tool in listed.tools}
    assert tuple(tools) == TOOL_NAMES
    for name, arguments in ARGUMENTS.items():
        assert arguments <= set(tools[name].input_schema.get("properties", {})), name


async def test_descriptions_are_dedented_and_plain(listed: ListToolsResult) -> None:
    for tool in listed.tools:
        description = tool.description or ""
        assert description == description.strip(), tool.name
        assert all(line == line.lstrip() for line in description.splitlines()), tool.name
        fields = [p.get("description", "") for p in tool.input_schema["properties"].values()]
        for text in [description, *fields]:
            assert not any(name in text for name in INTERNAL_NAMES), (tool.name, text)


async def test_search_says_which_options_fit_which_question(listed: ListToolsResult) -> None:
    search = next(tool for tool in listed.tools if tool.name == "search_rifflux")
    description = search.description or ""
    for advice in ('group_by "file"', "0.948", 'mode "lexical"', "error codes", 'fusion "minmax"'):
        assert advice in description
    assert "alpha 0.5" in description and "get_chunk" in description


async def test_path_arguments_say_an_indexed_files_absolute_path_is_taken(
    listed: ListToolsResult,
) -> None:
    """Agents in IDE hosts hold absolute paths: the schema must not send them away."""
    tools = {tool.name: tool for tool in listed.tools}
    for name, argument in (("get_file", "path"), ("multi_get", "paths")):
        assert "absolute" in tools[name].input_schema["properties"][argument]["description"]
