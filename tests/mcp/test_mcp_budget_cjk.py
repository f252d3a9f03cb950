"""Token budgets, neighbours, sections and CJK search through a real MCP client session
and through the ``rifflux`` command, on one small index with English and CJK documents."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cjk_docs import CJK_DOCS
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    DOCS,
    IndexedTree,
    anyio_backend_fixture,
    call_ok,
    stdio_session,
    write_docs,
)

from rifflux.index.indexer import Indexer
from rifflux.search.budget import estimate_tokens

pytestmark = pytest.mark.anyio

LONG = "# Manual\n\n" + "\n\n".join(
    f"## Step {i}\n\n" + " ".join(f"word{i}x{j}" for j in range(120)) for i in range(6)
)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    root = tmp_path_factory.mktemp("budget") / "work"
    write_docs(root, {**DOCS, **{f"cjk/{k}": v for k, v in CJK_DOCS.items()}, "manual.md": LONG})
    built = IndexedTree(root=root, db_path=root / ".rifflux" / "index.db")
    Indexer(built.settings()).run([root])
    return built


@pytest.fixture(scope="module")
async def session(tree: IndexedTree) -> AsyncIterator[ClientSession]:
    async with stdio_session(tree) as client:
        yield client


async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    return await call_ok(session, tool, timeout=60, **arguments)


async def error(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error
    text = result.content[0].text
    assert "\n" not in text and "Traceback" not in text
    return text


async def test_search_with_max_tokens_fits_the_whole_answer(session: ClientSession) -> None:
    query = "word2x100 word4x7"
    plain = await ok(session, "search_rifflux", query=query, mode="lexical", top_k=6)
    assert set(plain) == {"query", "mode", "count", "embedding_model", "results"}
    result = await session.call_tool(
        "search_rifflux", {"query": query, "mode": "lexical", "top_k": 6, "max_tokens": 400}
    )
    fitted = result.structured_content
    assert fitted is not None
    budget = fitted["budget"]
    assert budget["max_tokens"] == 400
    # max_tokens is the size of the answer as sent: compact JSON, metadata included.
    text = result.content[0].text  # type: ignore[union-attr]
    assert text == json.dumps(fitted, ensure_ascii=False, separators=(",", ":"))
    assert estimate_tokens(text) == budget["used_tokens"] <= 400
    assert sum(r["tokens"] for r in fitted["results"]) < budget["used_tokens"]
    assert fitted["count"] == len(fitted["results"]) == plain["count"] - budget["dropped"]
    assert all(r["tokens"] == estimate_tokens(r["content"]) for r in fitted["results"])
    assert any(r["truncated"] for r in fitted["results"])
    # The cut of the step-2 chunk keeps the query word it matched.
    step2 = next(r for r in fitted["results"] if r["heading_path"] == "Manual > Step 2")
    assert "word2x100" in step2["content"]


async def test_bad_max_tokens_and_neighbors_are_one_line_errors(session: ClientSession) -> None:
    text = await error(session, "search_rifflux", query="basil", max_tokens=10)
    assert text == "max_tokens must be an integer between 50 and 100000 (got 10)"
    hit = (await ok(session, "search_rifflux", query="basil", top_k=1))["results"][0]
    text = await error(session, "get_chunk", chunk_id=hit["chunk_id"], neighbors=9)
    assert text.startswith("neighbors must be an integer between 0 and 5")


async def test_get_chunk_neighbors_and_get_file_sections(session: ClientSession) -> None:
    whole = (await ok(session, "get_file", path="manual.md"))["file"]["chunks"]
    found = await ok(session, "get_chunk", chunk_id=whole[3]["chunk_id"], neighbors=2)
    assert found["chunk"] == whole[3]
    assert found["before"] == whole[1:3] and found["after"] == whole[4:6]
    section = (await ok(session, "get_file", path="manual.md", heading="step 4"))["file"]
    assert section["heading"] == "Manual > Step 4"
    assert {c["heading_path"] for c in section["chunks"]} == {"Manual > Step 4"}
    text = await error(session, "get_file", path="manual.md", heading="Stp 9")
    assert text.startswith("no heading 'Stp 9' in manual.md; close headings: ")
    fitted = (await ok(session, "get_file", path="manual.md", max_tokens=300))["file"]
    assert fitted["budget"]["used_tokens"] <= 300 and fitted["chunks"][-1]["truncated"]


@pytest.mark.parametrize(
    ("word", "path"),
    [("番茄", "cjk/zh/garden.md"), ("お弁当", "cjk/ja/travel.md"), ("양념", "cjk/ko/cooking.md")],
)
async def test_cjk_words_are_found_in_lexical_and_hybrid_mode(
    session: ClientSession, word: str, path: str
) -> None:
    for mode in ("lexical", "hybrid"):
        response = await ok(session, "search_rifflux", query=word, mode=mode, top_k=3)
        assert response["results"][0]["path"] == path, mode


def rifflux(tree: IndexedTree, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rifflux.cli", *args],
        cwd=tree.root,
        env=tree.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cli_has_the_same_options(tree: IndexedTree) -> None:
    searched = rifflux(
        tree, "search", "word2x100", "--mode", "lexical", "--max-tokens", "300", "--json"
    )
    assert searched.returncode == 0, searched.stderr
    response = json.loads(searched.stdout)
    assert response["budget"]["used_tokens"] <= 300
    cjk = json.loads(rifflux(tree, "search", "냉장고", "--mode", "lexical", "--json").stdout)
    assert cjk["results"][0]["path"] == "cjk/ko/cooking.md"
    chunk_id = response["results"][0]["chunk_id"]
    around = json.loads(rifflux(tree, "get-chunk", chunk_id, "--neighbors", "1").stdout)
    assert set(around) == {"chunk", "before", "after"}
    section = rifflux(tree, "get-file", "manual.md", "--heading", "Manual > Step 1")
    assert json.loads(section.stdout)["file"]["heading"] == "Manual > Step 1"
    bad = rifflux(tree, "get-file", "manual.md", "--heading", "nope")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1
    assert "no heading 'nope' in manual.md" in bad.stderr
