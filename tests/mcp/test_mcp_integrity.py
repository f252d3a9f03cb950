"""A damaged vector cache through a real stdio MCP session: index_status says corrupt,
searches answer lexically with a warning, and a no-op reindex job repairs the cache.

One server and its local worker pool serve the module; each damage is done to the cache
the previous repair published, while the server has it mapped.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cache_damage import DAMAGES
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    build_tree,
    call_ok,
    server_command,
    stdio_session,
)

from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService

pytestmark = pytest.mark.anyio

CALL_TIMEOUT_S = 120
QUERY = "installing on windows with forward slashes in paths"


@pytest.fixture(scope="module")
def damaged_tree(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    return build_tree(tmp_path_factory.mktemp("damaged") / "work")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Responses of a fresh in-process index of the same files, as JSON would carry them."""
    tree = build_tree(tmp_path_factory.mktemp("reference") / "work")
    service = SearchService(tree.settings())
    try:
        return {
            mode: json.loads(json.dumps(service.search_response(SearchRequest(QUERY, mode=mode))))
            for mode in ("lexical", "semantic", "hybrid")
        }
    finally:
        service.close()


@pytest.fixture(scope="module")
async def session(damaged_tree: IndexedTree) -> AsyncIterator[ClientSession]:
    async with stdio_session(damaged_tree) as client:
        yield client


async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    return await call_ok(session, tool, timeout=CALL_TIMEOUT_S, **arguments)


async def search(session: ClientSession, mode: str) -> dict[str, Any]:
    return await ok(session, "search_rifflux", query=QUERY, mode=mode)


@pytest.mark.parametrize("damage", sorted(DAMAGES))
async def test_damage_is_reported_contained_and_repaired_by_a_no_op_reindex(
    session: ClientSession,
    damaged_tree: IndexedTree,
    reference: dict[str, dict[str, Any]],
    damage: str,
) -> None:
    for mode in ("semantic", "hybrid"):
        assert await search(session, mode) == reference[mode]
    assert (await ok(session, "index_status"))["vector_cache"]["state"] == "fresh"

    damaged = DAMAGES[damage](Path(damaged_tree.db_path))

    cache = (await ok(session, "index_status"))["vector_cache"]
    assert cache["state"] == "corrupt"
    assert cache["reason"] == f"{damaged} does not match its sha256 checksum"
    for mode in ("semantic", "hybrid"):
        response = await search(session, mode)
        assert response["mode"] == mode
        assert damaged in response["warning"] and "rifflux index --repair" in response["warning"]
        assert response["results"] == reference["lexical"]["results"]
        assert response["count"] == reference["lexical"]["count"] > 0

    job = await ok(session, "reindex")
    assert (job["indexed_files"], job["deleted_files"]) == (0, 0)

    assert (await ok(session, "index_status"))["vector_cache"]["state"] == "fresh"
    for mode in ("semantic", "hybrid"):
        assert await search(session, mode) == reference[mode]
