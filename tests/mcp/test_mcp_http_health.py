"""``GET /health``: a small JSON status that needs no token and holds nothing private."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest
from http_support import HttpServer, start_http_server
from mcp_support import IndexedTree, shared_tree_fixture  # noqa: F401  (fixture)

from rifflux import __version__

TOKEN = "s3cret-token"


@pytest.fixture(scope="module", params=["1", "2"], ids=["sessions", "two-workers"])
def token_server(shared_tree: IndexedTree, request: pytest.FixtureRequest) -> Iterator[HttpServer]:
    yield from start_http_server(
        shared_tree, RIFFLUX_HTTP_TOKEN=TOKEN, RIFFLUX_HTTP_WORKERS=request.param
    )


def test_health_answers_without_the_token_and_says_nothing_private(
    token_server: HttpServer, shared_tree: IndexedTree
) -> None:
    base = token_server.url.removesuffix("/mcp")
    response = httpx2.get(f"{base}/health", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "status": "ok",
        "name": "rifflux",
        "version": __version__,
        "mcp_path": "/mcp",
    }
    assert str(shared_tree.root) not in response.text and TOKEN not in response.text
    assert httpx2.head(f"{base}/health", timeout=10).status_code == 200
    refused = httpx2.post(f"{base}/health", timeout=10)
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"


def test_every_other_path_still_needs_the_token(token_server: HttpServer) -> None:
    base = token_server.url.removesuffix("/mcp")
    for path in ("/health/", "/healthz", "/mcp", "/"):
        assert httpx2.get(f"{base}{path}", timeout=10).status_code == 401, path
