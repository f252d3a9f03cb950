"""A query longer than ``MAX_QUERY_CHARS`` is one line over a real MCP session.

A 900 KB query used to be searched and repeated twice in the response (its text and its
structured content): over 1 MiB, which the MCP client drops, so the caller saw no answer
at all. Now every tool that takes a query refuses it with one line naming the limit, and
the server keeps answering.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from http_support import HttpServer, http_session, start_http_server
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    call_error,
    call_ok,
    shared_tree_fixture,
    stdio_session,
)

from rifflux.search.request import MAX_QUERY_CHARS

pytestmark = pytest.mark.anyio

CALL_TIMEOUT_S = 60
HUGE = "basil tomatoes " * 60_000  # 900,000 characters
REFUSAL = (
    f"query must be at most {MAX_QUERY_CHARS:,} characters (got {len(HUGE):,}); "
    "shorten it to the words that matter"
)


@pytest.fixture(scope="module")
async def session(shared_tree: IndexedTree) -> AsyncIterator[ClientSession]:
    async with stdio_session(shared_tree) as client:
        yield client


@pytest.fixture(scope="module")
def http_server(shared_tree: IndexedTree) -> Iterator[HttpServer]:
    yield from start_http_server(shared_tree)


@pytest.mark.parametrize("tool", ["search_rifflux", "search_decisions", "search_errors"])
async def test_a_900_kb_query_is_one_line_naming_the_limit(
    session: ClientSession, tool: str
) -> None:
    assert len(HUGE) == 900_000
    assert await call_error(session, tool, timeout=CALL_TIMEOUT_S, query=HUGE) == REFUSAL
    found = await call_ok(session, "search_rifflux", timeout=CALL_TIMEOUT_S, query="basil")
    assert found["results"][0]["path"] == "notes/gardening.txt"


async def test_over_http_the_answer_is_the_line_not_a_dropped_event(
    http_server: HttpServer,
) -> None:
    """Over streamable HTTP the client dropped the 1.8 MB answer ("Server-sent event
    exceeded the 1048576 byte limit"); the 900 KB request itself fits the 1 MiB body."""
    async with http_session(http_server.url) as client:
        assert await call_error(client, "search_rifflux", timeout=CALL_TIMEOUT_S, query=HUGE) == (
            REFUSAL
        )
        found = await call_ok(client, "search_rifflux", timeout=CALL_TIMEOUT_S, query="basil")
        assert found["results"][0]["path"] == "notes/gardening.txt"


async def test_a_query_at_the_limit_is_searched(session: ClientSession) -> None:
    query = ("basil " * MAX_QUERY_CHARS)[:MAX_QUERY_CHARS]
    found = await call_ok(session, "search_rifflux", timeout=CALL_TIMEOUT_S, query=query)
    assert found["query"] == query
    assert found["results"][0]["path"] == "notes/gardening.txt"


async def test_the_limit_is_in_the_input_schemas(session: ClientSession) -> None:
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    for name in ("search_rifflux", "search_decisions", "search_errors"):
        assert tools[name].input_schema["properties"]["query"]["maxLength"] == MAX_QUERY_CHARS
