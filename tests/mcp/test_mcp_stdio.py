"""The tool contracts through a real MCP client session with a spawned stdio server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    TOOL_NAMES,
    IndexedTree,
    anyio_backend_fixture,
    call_ok,
    plain_words,
    server_command,
    shared_tree_fixture,
    stdio_session,
)
from mcp_types import CallToolResult

pytestmark = pytest.mark.anyio

TOOLS = set(TOOL_NAMES)
RESULT_KEYS = {"chunk_id", "path", "heading_path", "chunk_index", "content", "score_breakdown"}
BREAKDOWN_KEYS = {
    "lexical": {"bm25"},
    "semantic": {"cosine"},
    "hybrid": {"rrf", "lexical_rank", "semantic_rank"},
}


@pytest.fixture(scope="module")
def server_stderr(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IO[str]]:
    with (tmp_path_factory.mktemp("stderr") / "server.err").open("w+") as log:
        yield log


def read_stderr(log: IO[str]) -> str:
    log.flush()
    return Path(log.name).read_text()


@pytest.fixture(scope="module")
async def session(shared_tree: IndexedTree, server_stderr: IO[str]) -> AsyncIterator[ClientSession]:
    async with stdio_session(shared_tree, errlog=server_stderr) as client:
        yield client


async def call(session: ClientSession, tool: str, **arguments: Any) -> CallToolResult:
    return await session.call_tool(tool, arguments)


async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await call(session, tool, **arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def error(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await call(session, tool, **arguments)
    assert result.is_error
    text = result.content[0].text
    assert "\n" not in text
    assert "Traceback" not in text
    return text


async def test_lists_exactly_the_nine_tools_with_a_strict_search_schema(
    session: ClientSession,
) -> None:
    listed = (await session.list_tools()).tools
    assert {tool.name for tool in listed} == TOOLS
    assert all(tool.description for tool in listed)
    schema = next(t for t in listed if t.name == "search_rifflux").input_schema
    props = schema["properties"]
    assert schema["required"] == ["query"]
    assert props["top_k"]["type"] == "integer"
    assert (props["top_k"]["minimum"], props["top_k"]["maximum"]) == (1, 100)
    assert props["top_k"]["default"] == 10
    assert props["mode"]["enum"] == ["lexical", "semantic", "hybrid"]
    assert props["mode"]["default"] == "hybrid"
    assert all(field.get("description") for field in props.values())
    reindex = next(t for t in listed if t.name == "reindex").input_schema["properties"]
    assert set(reindex) == {"path", "paths", "force", "prune_missing", "background"}
    assert all(field.get("description") for field in reindex.values())


async def test_search_answers_the_contract_object(session: ClientSession) -> None:
    mode = "hybrid"  # Every mode's contract is the core's (tests/search).
    response = await ok(session, "search_rifflux", query="basil tomatoes", top_k=2, mode=mode)
    assert set(response) == {"query", "mode", "count", "embedding_model", "results"}
    assert (response["query"], response["mode"]) == ("basil tomatoes", mode)
    assert response["embedding_model"] == "hash:384"
    assert 0 < response["count"] == len(response["results"]) <= 2
    for result in response["results"]:
        assert set(result) == RESULT_KEYS
        assert set(result["score_breakdown"]) == BREAKDOWN_KEYS[mode]


@pytest.mark.parametrize(
    "query",
    ['"', 'say "hello', "tomato*", "basil AND", "NEAR(basil sun", "path:docs", "-sun", "(a OR b"],
)
@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
async def test_fts_syntax_is_searched_as_plain_text(
    session: ClientSession, query: str, mode: str
) -> None:
    response = await ok(session, "search_rifflux", query=query, mode=mode)
    words_only = await ok(session, "search_rifflux", query=plain_words(query), mode=mode)
    assert response["results"] == words_only["results"]
    assert response["count"] == len(words_only["results"])


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        # Values are checked by SearchRequest: the core's messages, unchanged.
        ({"mode": "fuzzy"}, "mode must be one of lexical, semantic, hybrid (got 'fuzzy')"),
        ({"top_k": 101}, "top_k must be an integer between 1 and 100 (got 101)"),
        ({"top_k": True}, "top_k must be an integer between 1 and 100 (got True)"),
        # Types the schema rules out are the SDK's, one line naming the field.
        ({"query": 3}, "invalid arguments for search_rifflux: query: Input should be a valid"),
    ],
)
async def test_bad_search_arguments_are_one_line_tool_errors(
    session: ClientSession, arguments: dict[str, Any], expected: str
) -> None:
    message = await error(session, "search_rifflux", **{"query": "basil", **arguments})
    assert message.startswith(expected)


async def test_a_quoted_number_is_read_as_the_number(session: ClientSession) -> None:
    response = await ok(session, "search_rifflux", query="basil", top_k="1")
    assert len(response["results"]) == 1


async def test_missing_query_names_the_field(session: ClientSession) -> None:
    assert await error(session, "search_rifflux") == (
        "invalid arguments for search_rifflux: query: Field required"
    )


async def test_server_keeps_serving_after_errors(session: ClientSession) -> None:
    await error(session, "search_rifflux", query="basil", top_k=0)
    await error(session, "get_chunk", chunk_id="nope")
    assert (await ok(session, "search_rifflux", query="basil"))["count"] > 0


async def test_get_chunk_returns_a_search_hit_in_full(session: ClientSession) -> None:
    hit = (await ok(session, "search_rifflux", query="Windows forward slashes", top_k=1))[
        "results"
    ][0]
    chunk = (await ok(session, "get_chunk", chunk_id=hit["chunk_id"]))["chunk"]
    # A search hit in full, and the headings that start in it (search results have none):
    # this short file is one chunk, named by its first heading.
    assert [h["heading_path"] for h in chunk.pop("headings")] == [
        "Installing Rifflux",
        "Installing Rifflux > Linux",
        "Installing Rifflux > Windows",
    ]
    assert chunk == {k: v for k, v in hit.items() if k != "score_breakdown"}


async def test_unknown_chunk_id_is_a_tool_error(session: ClientSession) -> None:
    assert await error(session, "get_chunk", chunk_id="feed") == (
        "no chunk with id 'feed' in the index"
    )


async def test_get_file_returns_an_indexed_files_chunks(session: ClientSession) -> None:
    served = (await ok(session, "get_file", path="docs/search.md"))["file"]
    assert set(served) == {"path", "sha256", "chunks"}
    assert served["path"] == "docs/search.md"
    assert {c["path"] for c in served["chunks"]} == {"docs/search.md"}
    assert [c["chunk_index"] for c in served["chunks"]] == list(range(len(served["chunks"])))


async def test_a_text_file_as_db_path_is_not_an_index_not_an_internal_error(
    session: ClientSession,
) -> None:
    # A text file is no SQLite database: one line that names the problem and the fix,
    # never "damaged; rebuild" (issue 20, finding 9).
    message = await error(session, "search_rifflux", query="basil", db_path="docs/install.md")
    assert message.endswith(
        "install.md is not a Rifflux index: it is not an SQLite database at all; name an "
        "index database (such as .rifflux/index.db) with --db, RIFFLUX_DB_PATH or db_path"
    )


async def test_index_status_reports_the_index(
    session: ClientSession, shared_tree: IndexedTree
) -> None:
    status = await ok(session, "index_status")
    # One in-process index run of one batch: its rows, then its vectors (lexical first).
    assert (status["files"], status["generation"]) == (3, 2)
    assert status["chunks"] == status["embeddings"] > 0
    assert status["db_path"] == str(shared_tree.db_path)
    assert (status["embedding_backend"], status["embedding_model"]) == ("hash", "hash:384")
    # No test in this module submits a job, so the server never started a worker pool.
    assert status["live_workers"] == {"count": 0, "workers": []}
    assert isinstance(status["queue_depths"], dict)
    assert status["recent_jobs"] == []
    assert status["watcher"] == {"running": False}


async def test_logs_go_to_stderr_as_json_and_stdout_carries_only_protocol(
    session: ClientSession, server_stderr: IO[str]
) -> None:
    # Every call above parsed as JSON-RPC, so stdout held nothing else; the logs went
    # to stderr, one JSON object a line.
    assert (await ok(session, "search_rifflux", query="sun"))["count"] > 0
    events = [
        json.loads(line) for line in read_stderr(server_stderr).splitlines() if line.startswith("{")
    ]
    assert {"mcp.server_starting", "mcp.tool_error"} <= {e["event"] for e in events}


async def test_search_options_of_issue_12_over_stdio(session: ClientSession) -> None:
    # Filters before ranking: only the text file is admitted, whatever ranks first.
    only_txt = await ok(
        session,
        "search_rifflux",
        query="index windows",
        mode="semantic",
        file_types=["txt"],
        path_glob="notes/**",
        modified_after="2000-01-01T00:00:00Z",
    )
    assert {r["path"] for r in only_txt["results"]} == {"notes/gardening.txt"}
    # minmax with its breakdown, one result per file, a quoted phrase first.
    response = await ok(
        session,
        "search_rifflux",
        query='"reciprocal rank fusion" index',
        fusion="minmax",
        alpha="0.4",
        candidate_k=5,
        group_by="file",
        min_cosine=-1,
    )
    paths = [r["path"] for r in response["results"]]
    assert paths[0] == "docs/search.md" and len(set(paths)) == len(paths)
    assert set(response["results"][0]["score_breakdown"]) == {
        "minmax",
        "lexical_norm",
        "semantic_norm",
        "lexical_rank",
        "semantic_rank",
    }
    weighted = await ok(
        session, "search_rifflux", query="basil", lexical_weight=0.4, semantic_weight=0.6
    )
    assert weighted["count"] > 0
    message = await error(session, "search_rifflux", query="basil", group_by="page")
    assert message == "group_by must be one of chunk, file (got 'page')"
    assert (await error(session, "search_rifflux", query="basil", alpha=2)).startswith(
        "alpha must be a number from 0 to 1"
    )
    # null is "not given", as a client that sends every key does.
    nulls = await ok(session, "search_rifflux", query="basil", content_contains=None, alpha=None)
    assert nulls["results"] == (await ok(session, "search_rifflux", query="basil"))["results"]
