"""Streamable HTTP: a spawned server on a free local port, with and without a bearer token."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    server_command,
    shared_tree_fixture,
)

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token"
BOOT_TIMEOUT_S = 30.0
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@dataclass(frozen=True)
class HttpServer:
    url: str
    port: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_listening(proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"server did not listen on {port} within {BOOT_TIMEOUT_S}s")


def start_http_server(tree: IndexedTree, **env: str) -> Iterator[HttpServer]:
    port = free_port()
    proc = subprocess.Popen(
        server_command("--transport", "http", "--port", str(port)),
        env=tree.env(**env),
        cwd=tree.root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_listening(proc, port)
        yield HttpServer(url=f"http://127.0.0.1:{port}/mcp", port=port)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def token_server(shared_tree: IndexedTree) -> Iterator[HttpServer]:
    yield from start_http_server(shared_tree, RIFFLUX_HTTP_TOKEN=TOKEN)


@pytest.fixture(scope="module")
def open_server(shared_tree: IndexedTree) -> Iterator[HttpServer]:
    yield from start_http_server(shared_tree)


@asynccontextmanager
async def http_session(
    url: str, headers: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def post_initialize(url: str, headers: dict[str, str]) -> httpx2.Response:
    return httpx2.post(url, json=INITIALIZE, headers=MCP_HEADERS | headers, timeout=10)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": ""}],
    ids=["none", "wrong-token", "no-bearer-scheme", "empty"],
)
def test_requests_without_the_bearer_token_get_401(
    token_server: HttpServer, headers: dict[str, str]
) -> None:
    response = post_initialize(token_server.url, headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_the_token_is_checked_on_every_path(token_server: HttpServer) -> None:
    base = token_server.url.removesuffix("/mcp")
    assert httpx2.get(f"{base}/anything", timeout=10).status_code == 401


async def test_session_with_the_bearer_token_works(token_server: HttpServer) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with http_session(token_server.url, auth) as session:
        tools = {tool.name for tool in (await session.list_tools()).tools}
        assert tools == {
            "search_rifflux",
            "reindex",
            "index_status",
            "get_chunk",
            "get_file",
            "search_decisions",
            "search_errors",
            "context_stats",
            "multi_get",
        }
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
