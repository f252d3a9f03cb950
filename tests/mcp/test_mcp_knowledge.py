"""Issue 23's "done when", through a real MCP client session with a spawned stdio server over
the written corpus of ADRs, troubleshooting pages and notes (tests/corpus/knowledge)."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from knowledge_corpus import CORPUS, load_expected
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    call_error,
    call_ok,
    stdio_session,
)

from rifflux.index.chunker import normalize_text
from rifflux.index.indexer import Indexer
from rifflux.search.budget import response_tokens

pytestmark = pytest.mark.anyio

EXPECTED = load_expected()
TIMEOUT = 60.0
# The real model: "which database did we choose" must find the ADR by meaning, and the
# hash embedder's arbitrary ranks tie the decisions' fused scores (RRF 1/61 + 1/62 both).
ONNX = "onnx"
ONNX_MODEL = "onnx:all-MiniLM-L6-v2-int8"
DECISIONS = {p for p, j in EXPECTED.items() if j["kind"] == "decision"}


@pytest.fixture(scope="module")
def knowledge_tree(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    root = tmp_path_factory.mktemp("mcp-knowledge") / "work"
    shutil.copytree(CORPUS, root, ignore=shutil.ignore_patterns("expected.json"))
    tree = IndexedTree(root=root, db_path=root / ".rifflux" / "index.db")
    Indexer(tree.settings(RIFFLUX_EMBEDDING_BACKEND=ONNX)).run([root])
    return tree


@pytest.fixture(scope="module")
async def session(knowledge_tree: IndexedTree) -> AsyncIterator[ClientSession]:
    async with stdio_session(knowledge_tree, RIFFLUX_EMBEDDING_BACKEND=ONNX) as client:
        yield client


async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    return await call_ok(session, tool, timeout=TIMEOUT, **arguments)


async def error(session: ClientSession, tool: str, **arguments: Any) -> str:
    return await call_error(session, tool, timeout=TIMEOUT, **arguments)


async def test_the_knowledge_tools_are_listed_with_their_arguments(session: ClientSession) -> None:
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    schemas = {
        name: tools[name].input_schema
        for name in ("search_decisions", "search_errors", "context_stats", "multi_get")
    }
    assert set(schemas["search_decisions"]["properties"]) == {
        "query",
        "limit",
        "decision_type",
        "status",
        "max_tokens",
        "top_k",
    }
    assert schemas["search_decisions"]["required"] == ["query"]
    assert "default 10" in schemas["search_decisions"]["properties"]["limit"]["description"]
    assert set(schemas["search_errors"]["properties"]) == {"query", "limit", "max_tokens", "top_k"}
    assert schemas["context_stats"]["properties"] == {}
    assert set(schemas["multi_get"]["properties"]) == {"paths", "max_tokens"}
    assert schemas["multi_get"]["required"] == ["paths"]
    search = tools["search_rifflux"].input_schema["properties"]
    assert search["kinds"]["anyOf"][1]["items"]["enum"] == ["decision", "error", "note"]
    assert {"tags", "status"} <= set(search)
    assert all(tools[name].annotations.read_only_hint for name in schemas)


async def test_search_decisions_returns_the_accepted_adr_first_and_not_the_superseded_one(
    session: ClientSession,
) -> None:
    response = await ok(
        session, "search_decisions", query="which database did we choose", status="accepted"
    )
    assert set(response) == {"query", "count", "embedding_model", "results"}
    assert response["embedding_model"] == ONNX_MODEL
    first = response["results"][0]
    assert first["path"] == "docs/adr/0005-use-postgresql-as-the-primary-database.md"
    assert first["title"] == "Use PostgreSQL as the primary database"
    assert (first["status"], first["date"], first["decision_type"]) == (
        "accepted",
        "2024-01-15",
        "architectural",
    )
    assert first["decision"].startswith('Chosen option: "PostgreSQL"')
    assert set(first["score_breakdown"]) == {"rrf", "lexical_rank", "semantic_rank"}
    chunk = await ok(session, "get_chunk", chunk_id=first["chunk_id"])
    assert chunk["chunk"]["path"] == first["path"]
    paths = [r["path"] for r in response["results"]]
    assert "docs/adr/0002-use-mongodb-for-persistence.md" not in paths
    assert response["count"] == len(paths)


async def test_search_errors_answers_a_pasted_error_line_with_its_fix(
    session: ClientSession,
) -> None:
    pasted = (
        "Error: error:0308010C:digital envelope routines::unsupported\n"
        "    at new Hash (node:internal/crypto/hash:71:19)"
    )
    response = await ok(session, "search_errors", query=pasted, limit=2)
    first = response["results"][0]
    assert set(first) == {
        "signature",
        "solution",
        "path",
        "heading_path",
        "score_breakdown",
        "chunk_id",
    }
    assert first["path"] == "docs/troubleshooting/node-openssl.md"
    assert first["signature"] == "Error: error:0308010C:digital envelope routines::unsupported"
    assert "NODE_OPTIONS=--openssl-legacy-provider" in first["solution"]
    assert response["count"] == len(response["results"]) <= 2
    budgeted = await ok(session, "search_errors", query=pasted, limit=5, max_tokens=300)
    assert response_tokens(budgeted) == budgeted["budget"]["used_tokens"] <= 300


async def test_kinds_and_tags_pre_filter_search_rifflux_exactly(session: ClientSession) -> None:
    async def chunks(**arguments: Any) -> list[tuple[str, int]]:
        response = await ok(
            session, "search_rifflux", query="decision", top_k=100, mode="semantic", **arguments
        )
        return sorted((r["path"], r["chunk_index"]) for r in response["results"])

    every_chunk = {}
    for path in EXPECTED:
        indexed = (await ok(session, "get_file", path=path))["file"]["chunks"]
        every_chunk[path] = [(path, c["chunk_index"]) for c in indexed]
    decisions = sorted(c for p in DECISIONS for c in every_chunk[p])
    assert await chunks(kinds=["decision"]) == decisions
    tagged = sorted(every_chunk["docs/adr/0005-use-postgresql-as-the-primary-database.md"])
    assert await chunks(tags=["database", "persistence"]) == tagged
    accepted = sorted(
        c for p, j in EXPECTED.items() if j.get("status") == "accepted" for c in every_chunk[p]
    )
    assert await chunks(kinds="decision", status="accepted") == accepted
    message = await error(session, "search_rifflux", query="x", kinds=["decision", "howto"])
    assert message == (
        "kinds must be one of decision, error, note, or a list of them (got ['decision', 'howto'])"
    )


def front_matter_lines(path: Path) -> list[str]:
    lines = normalize_text(path.read_text()).split("\n")
    if lines[0] not in ("---", "+++") or lines[0] not in lines[1:]:
        return []
    return [line for line in lines[1 : lines.index(lines[0], 1)] if line.strip()]


async def test_front_matter_never_appears_in_a_chunk(
    session: ClientSession, knowledge_tree: IndexedTree
) -> None:
    files = (await ok(session, "multi_get", paths=["**/*.md"]))["files"]
    assert {f["path"] for f in files} == {p for p in EXPECTED if p.endswith(".md")}
    stripped = 0
    for entry in files:
        block = front_matter_lines(knowledge_tree.root / entry["path"])
        if entry["path"] == "notes/broken-front-matter.md":
            assert all(line in entry["content"] for line in block)  # malformed: kept as text
            continue
        stripped += bool(block)
        assert not [line for line in block if line in entry["content"]], entry["path"]
    assert stripped >= 10


async def test_multi_get_keeps_the_order_asked_under_one_budget(session: ClientSession) -> None:
    asked = ["docs/faq.md", "docs/adr/000[12]-*.md", "docs/troubleshooting/git.md"]
    whole = await ok(session, "multi_get", paths=asked)
    order = [
        "docs/faq.md",
        "docs/adr/0001-record-architecture-decisions.md",
        "docs/adr/0002-use-mongodb-for-persistence.md",
        "docs/troubleshooting/git.md",
    ]
    assert [f["path"] for f in whole["files"]] == order
    assert (whole["count"], whole["not_included"]) == (4, [])
    assert all(set(f) == {"path", "content", "tokens", "truncated"} for f in whole["files"])
    # Room for the first two files whole, a cut of the third and the answer around them.
    two = {**whole, "files": whole["files"][:2], "not_included": order[2:]}
    budget = response_tokens(two) + 120
    fitted = await ok(session, "multi_get", paths=asked, max_tokens=budget)
    assert [f["path"] for f in fitted["files"]] == order[:3]
    assert [f["truncated"] for f in fitted["files"]] == [False, False, True]
    assert response_tokens(fitted) == fitted["budget"]["used_tokens"] <= budget
    assert fitted["not_included"] == order[3:] and fitted["budget"]["dropped"] == 1
    message = await error(session, "multi_get", paths=["docs/missing.md"])
    assert message.startswith("'docs/missing.md' is not an indexed file")
    assert (await error(session, "multi_get", paths=[])).startswith("paths must be a list of 1")


async def test_multi_get_serves_only_inside_the_client_s_roots(
    knowledge_tree: IndexedTree,
) -> None:
    adr = knowledge_tree.root / "docs" / "adr"
    async with stdio_session(knowledge_tree, client_roots=[adr]) as narrowed:
        found = await call_ok(narrowed, "multi_get", timeout=TIMEOUT, paths=["**/*.md"])
        assert {f["path"] for f in found["files"]} == {
            p for p in EXPECTED if p.startswith("docs/adr/")
        }
        result = await narrowed.call_tool("multi_get", {"paths": ["docs/faq.md"]})
        assert result.is_error
        assert "'docs/faq.md' is indexed but lies outside the allowed roots" in (
            result.content[0].text
        )


async def test_context_stats_and_index_status_report_the_knowledge_bases(
    session: ClientSession,
) -> None:
    stats = await ok(session, "context_stats")
    status = await ok(session, "index_status")
    assert stats["knowledge"] == status["knowledge"]
    assert (stats["files"], stats["chunks"], stats["embedding_coverage"]) == (
        status["files"],
        status["chunks"],
        status["embedding_coverage"],
    )
    block = stats["knowledge"]
    assert block["decisions"]["by_status"] == {
        "accepted": 6,
        "deprecated": 1,
        "proposed": 1,
        "rejected": 1,
        "superseded": 2,
    }
    assert block["error_pairs"] == sum(len(j.get("errors", [])) for j in EXPECTED.values())
    assert json.dumps(block["tags"][0]) == '{"tag": "database", "files": 3}'
