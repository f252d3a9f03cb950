"""Every path a tool returns passes one check: the allowed roots and the deny list.

An index built with ``RIFFLUX_ALLOW_SECRET_PATHS=1`` (or before the deny list existed)
holds credentials; a server without that setting refused ``get_file`` on them, but
``multi_get(["**/credentials.md"])`` returned their text, and searches, the knowledge
searches and ``get_chunk`` answered with them. Here such an index is served, over a real
stdio session, by a server without the setting: no tool returns a secret file, searches
still fill ``top_k`` with the files they may return, and a server with the setting (the
control) returns every secret, so the corpus does match what is looked for.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    call_error,
    call_ok,
    stdio_session,
    write_docs,
)

from rifflux.index.denied import secret_reason
from rifflux.index.indexer import Indexer

pytestmark = pytest.mark.anyio

CALL_TIMEOUT_S = 60
WORD = "zebracorn"
SECRET_TEXT = f"# Key\n\n{WORD} {WORD} {WORD} quokkafish aws_secret_access_key\n"
ADR = f"""---
type: adr
status: accepted
---

# Rotate the {WORD} keys

## Status

Accepted

## Context

The {WORD} credentials leak when copied by hand.

## Decision

We rotate every {WORD} key monthly with quokkafish.
"""
ERRORS = f"""# Troubleshooting {WORD}

## ECONNREFUSED while fetching {WORD} keys

The {WORD} agent is not running.

### Solution

Start the {WORD} agent with quokkafish and retry.
"""
SECRETS = {
    "kb/.aws/credentials.md": SECRET_TEXT,
    "kb/.aws/config.md": SECRET_TEXT,
    "kb/.ssh/id_rsa.md": SECRET_TEXT,
    "kb/.ssh/known_hosts.md": SECRET_TEXT,
    "kb/.env.md": SECRET_TEXT,
    "kb/.env.production.md": SECRET_TEXT,
    "sec/id_ed25519.md": SECRET_TEXT,
    "sec/.kube/config.md": SECRET_TEXT,
    "kb/.aws/adr/0001-rotate-keys.md": ADR,
    "kb/.ssh/troubleshooting.md": ERRORS,
}
PUBLIC = {
    f"kb/notes/public-{i}.md": (
        f"# Public {i}\n\nA note that names the {WORD} once among many other words about "
        f"gardening, tomatoes, basil and the weather in spring, number {i}.\n"
    )
    for i in range(4)
}
PUBLIC_ADR = ADR.replace("Rotate", "Publish").replace("monthly", "yearly")
PUBLIC_ERRORS = ERRORS.replace("Troubleshooting", "Help")
PUBLIC |= {"kb/adr/0002-publish-keys.md": PUBLIC_ADR, "kb/help/troubleshooting.md": PUBLIC_ERRORS}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    """Secrets and public notes, indexed with the deny list lifted."""
    root = tmp_path_factory.mktemp("served") / "work"
    write_docs(root, SECRETS | PUBLIC)
    tree = IndexedTree(root=root, db_path=root / ".rifflux" / "index.db")
    report = Indexer(tree.settings(RIFFLUX_ALLOW_SECRET_PATHS="1")).run([root])
    assert report.files_indexed == len(SECRETS) + len(PUBLIC), report.skipped
    return tree


@pytest.fixture(scope="module")
async def session(tree: IndexedTree) -> AsyncIterator[ClientSession]:
    async with stdio_session(tree) as client:
        yield client


def chunk_ids(tree: IndexedTree, paths: set[str]) -> list[str]:
    with sqlite3.connect(tree.db_path) as conn:
        rows = conn.execute(
            "SELECT c.chunk_id, f.path FROM chunks c JOIN files f ON f.id = c.file_id"
        ).fetchall()
    return [chunk_id for chunk_id, path in rows if path in paths]


async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    return await call_ok(session, tool, timeout=CALL_TIMEOUT_S, **arguments)


async def returned_paths(session: ClientSession) -> set[str]:
    """Every path any tool returns for queries and globs that match the secrets."""
    paths: set[str] = set()
    for query in (WORD, "quokkafish aws_secret_access_key", f"rotate the {WORD} keys"):
        for mode in ("lexical", "semantic", "hybrid"):
            for group_by in ("chunk", "file"):
                found = await ok(
                    session,
                    "search_rifflux",
                    query=query,
                    mode=mode,
                    group_by=group_by,
                    top_k=100,
                )
                paths |= {hit["path"] for hit in found["results"]}
        for tool in ("search_decisions", "search_errors"):
            found = await ok(session, tool, query=query, limit=100)
            paths |= {hit["path"] for hit in found["results"]}
    for globs in (["**/credentials.md"], ["sec/**"], ["**/id_rsa.md"], ["**/.env.md"], ["**"]):
        found = await ok(session, "multi_get", paths=globs)
        paths |= {file["path"] for file in found["files"]}
    found = await ok(session, "grep_rifflux", pattern=WORD, max_matches=1000)
    paths |= {match["path"] for match in found["matches"]}
    return paths


async def test_a_server_without_the_setting_returns_no_secret_from_any_tool(
    tree: IndexedTree, session: ClientSession
) -> None:
    assert await returned_paths(session) == set(PUBLIC)


async def test_a_server_with_the_setting_returns_them_all(tree: IndexedTree) -> None:
    """The control: the same calls do match every secret file."""
    async with stdio_session(tree, RIFFLUX_ALLOW_SECRET_PATHS="1") as lifted:
        assert await returned_paths(lifted) == set(SECRETS) | set(PUBLIC)


async def test_searches_fill_top_k_with_the_files_they_may_return(session: ClientSession) -> None:
    """Eight secret files outrank the four public notes; the public ones still fill top_k."""
    for mode in ("lexical", "hybrid"):
        found = await ok(session, "search_rifflux", query=WORD, mode=mode, top_k=4)
        assert found["count"] == 4, found
        assert {hit["path"] for hit in found["results"]} <= set(PUBLIC)
    lexical = await ok(session, "search_rifflux", query=WORD, mode="lexical", top_k=100)
    assert {hit["path"] for hit in lexical["results"]} == set(PUBLIC)


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("kb/.aws/credentials.md", ".aws"),
        ("kb/.ssh/id_rsa.md", ".ssh"),
        ("kb/.env.md", ".env*"),
        ("sec/id_ed25519.md", "id_*"),
    ],
)
async def test_a_secret_named_outright_is_refused_by_every_tool(
    tree: IndexedTree, session: ClientSession, path: str, rule: str
) -> None:
    refusal = f"{path!r} is not served: {secret_reason(rule, 'serve')}"
    for tool, arguments in (("get_file", {"path": path}), ("multi_get", {"paths": [path]})):
        assert await call_error(session, tool, timeout=CALL_TIMEOUT_S, **arguments) == refusal
    for chunk_id in chunk_ids(tree, {path}):
        for neighbors in (0, 2):
            text = await call_error(
                session, "get_chunk", timeout=CALL_TIMEOUT_S, chunk_id=chunk_id, neighbors=neighbors
            )
            assert text == refusal


async def test_public_chunks_and_files_are_still_served(
    tree: IndexedTree, session: ClientSession
) -> None:
    for chunk_id in chunk_ids(tree, set(PUBLIC)):
        assert (await ok(session, "get_chunk", chunk_id=chunk_id, neighbors=1))["chunk"]
    found = await ok(session, "multi_get", paths=["kb/notes/*.md"])
    assert [file["path"] for file in found["files"]] == sorted(
        p for p in PUBLIC if p.startswith("kb/notes/")
    )
    decisions = await ok(session, "search_decisions", query=f"rotate the {WORD} keys")
    assert [hit["path"] for hit in decisions["results"]] == ["kb/adr/0002-publish-keys.md"]
    errors = await ok(session, "search_errors", query=f"ECONNREFUSED {WORD}")
    assert [hit["path"] for hit in errors["results"]] == ["kb/help/troubleshooting.md"]


async def test_a_search_outside_the_client_s_roots_returns_nothing_there(
    tree: IndexedTree,
) -> None:
    """The roots half of the same check: a client root narrows what searches return."""
    async with stdio_session(tree, client_roots=[tree.root / "kb" / "adr"]) as narrowed:
        found = await ok(narrowed, "search_rifflux", query=WORD, top_k=100)
        assert {hit["path"] for hit in found["results"]} == {"kb/adr/0002-publish-keys.md"}
        assert (await ok(narrowed, "search_errors", query=f"ECONNREFUSED {WORD}"))["count"] == 0
