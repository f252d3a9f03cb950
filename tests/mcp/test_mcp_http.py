"""Streamable HTTP: a spawned server on a free local port, with and without a bearer token."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest
from http_support import (
    INITIALIZE,
    MCP_HEADERS,
    HttpServer,
    http_session,
    start_http_server,
)
from mcp_support import (  # noqa: F401  (fixtures)
    TOOL_NAMES,
    IndexedTree,
    anyio_backend_fixture,
    shared_tree_fixture,
)

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def token_server(shared_tree: IndexedTree) -> Iterator[HttpServer]:
    yield from start_http_server(shared_tree, RIFFLUX_HTTP_TOKEN=TOKEN)


@pytest.fixture(scope="module")
def open_server(shared_tree: IndexedTree) -> Iterator[HttpServer]:
    yield from start_http_server(shared_tree)


def post_initialize(url: str, headers: dict[str, str]) -> httpx2.Response:
    return httpx2.post(url, json=INITIALIZE, headers=MCP_HEADERS | headers, timeout=10)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "bearer wrong"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": ""},
    ],
    ids=["none", "wrong-token", "wrong-token-lower", "longer", "no-scheme", "basic", "empty"],
)
def test_requests_without_the_bearer_token_get_401(
    token_server: HttpServer, headers: dict[str, str]
) -> None:
    response = post_initialize(token_server.url, headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_bearer_scheme_is_matched_in_any_case(token_server: HttpServer, scheme: str) -> None:
    response = post_initialize(token_server.url, {"Authorization": f"{scheme} {TOKEN}"})
    assert response.status_code == 200
    assert '"name":"rifflux"' in response.text


def test_the_token_is_checked_on_every_path(token_server: HttpServer) -> None:
    base = token_server.url.removesuffix("/mcp")
    assert httpx2.get(f"{base}/anything", timeout=10).status_code == 401


async def test_session_with_the_bearer_token_works(token_server: HttpServer) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with http_session(token_server.url, auth) as session:
        tools = {tool.name for tool in (await session.list_tools()).tools}
        assert tools == set(TOOL_NAMES)
        result = await session.call_tool("search_rifflux", {"query": "basil", "top_k": 2})
        assert not result.is_error
        assert result.structured_content is not None
        assert 0 < result.structured_content["count"] <= 2
        bad = await session.call_tool("search_rifflux", {"query": "basil", "top_k": 0})
        assert bad.is_error
        assert bad.content[0].text == "top_k must be an integer between 1 and 100 (got 0)"


async def test_search_options_of_issue_12_over_http(open_server: HttpServer) -> None:
    async with http_session(open_server.url) as session:
        result = await session.call_tool(
            "search_rifflux",
            {
                "query": "sun water",
                "path_glob": ["docs/*.md", "notes/*.txt"],
                "content_contains": "TOMATOES",
                "fusion": "minmax",
                "alpha": 0.6,
                "group_by": "file",
                "modified_before": 4102444800,
            },
        )
        assert not result.is_error, result.content
        response = result.structured_content
        assert response is not None
        assert [r["path"] for r in response["results"]] == ["notes/gardening.txt"]
        assert "minmax" in response["results"][0]["score_breakdown"]
        bad = await session.call_tool(
            "search_rifflux", {"query": "sun", "lexical_weight": 0, "semantic_weight": 0}
        )
        assert bad.is_error
        assert bad.content[0].text.startswith("lexical_weight and semantic_weight must not")


async def test_without_a_token_no_authorization_is_needed(open_server: HttpServer) -> None:
    async with http_session(open_server.url) as session:
        status = (await session.call_tool("index_status", {})).structured_content
        assert status is not None
        assert status["files"] == 3


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Host": "evil.example"}, 421),
        ({"Origin": "http://evil.example"}, 403),
    ],
    ids=["foreign-host", "foreign-origin"],
)
def test_dns_rebinding_protection_rejects_foreign_host_and_origin(
    open_server: HttpServer, headers: dict[str, str], status: int
) -> None:
    assert post_initialize(open_server.url, headers).status_code == status


def test_local_host_header_is_accepted(open_server: HttpServer) -> None:
    response = post_initialize(open_server.url, {"Host": f"localhost:{open_server.port}"})
    assert response.status_code == 200
    assert '"name":"rifflux"' in response.text
