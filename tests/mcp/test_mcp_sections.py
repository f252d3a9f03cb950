"""``get_file`` ``heading`` finds every heading of a file, over a real MCP stdio session
(issue 20, finding 8): a short file merges into one chunk whose ``heading_path`` is its
first heading, and before the chunks recorded their headings, ``Install > Linux`` and
``Linux`` answered "no heading … close headings: Guide"."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    call_ok,
    stdio_session,
    write_docs,
)

from rifflux.index.indexer import Indexer

pytestmark = pytest.mark.anyio

GUIDE = """# Guide

Rifflux is a local search engine for markdown notes.

## Install

Install it with pip into a virtual environment.

### Linux

On Linux the system SQLite has FTS5 already.

### Windows

On Windows use the python.org installer.

## Usage

Run rifflux index, then rifflux search.
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    root: Path = tmp_path_factory.mktemp("sections") / "work"
    write_docs(root, {"guide/install.md": GUIDE})
    built = IndexedTree(root=root, db_path=root / ".rifflux" / "index.db")
    Indexer(built.settings()).run([root])
    return built


@pytest.fixture(scope="module")
async def session(tree: IndexedTree) -> AsyncIterator[ClientSession]:
    async with stdio_session(tree) as client:
        yield client


async def section(session: ClientSession, heading: str) -> dict[str, Any]:
    found = await call_ok(session, "get_file", timeout=60, path="guide/install.md", heading=heading)
    file: dict[str, Any] = found["file"]
    return file


def body(text: str, first: str, stop: str | None) -> str:
    """``GUIDE`` from the line ``first`` up to the line ``stop``, stripped."""
    start = text.index(first)
    return text[start : text.index(stop) if stop else None].strip()


async def test_the_file_is_one_chunk_named_by_its_first_heading(session: ClientSession) -> None:
    whole = (await call_ok(session, "get_file", timeout=60, path="guide/install.md"))["file"]
    [chunk] = whole["chunks"]
    assert chunk["heading_path"] == "Guide" and chunk["content"] == GUIDE.strip()
    assert [h["heading_path"] for h in chunk["headings"]] == [
        "Guide",
        "Guide > Install",
        "Guide > Install > Linux",
        "Guide > Install > Windows",
        "Guide > Usage",
    ]
    got = await call_ok(session, "get_chunk", timeout=60, chunk_id=chunk["chunk_id"])
    assert got["chunk"] == chunk


@pytest.mark.parametrize("heading", ["Install > Linux", "Linux", "guide > install > LINUX"])
async def test_a_heading_inside_a_merged_chunk_is_found(
    session: ClientSession, heading: str
) -> None:
    found = await section(session, heading)
    assert found["heading"] == "Guide > Install > Linux"
    [chunk] = found["chunks"]
    assert chunk["content"] == body(GUIDE, "### Linux", "### Windows")
    assert chunk["heading_path"] == "Guide > Install > Linux"
    assert chunk["headings"] == [{"offset": 0, "heading_path": "Guide > Install > Linux"}]
    assert chunk["chunk_index"] == 0 and found["path"] == "guide/install.md"


async def test_a_section_holds_its_subsections_and_stops_at_its_sibling(
    session: ClientSession,
) -> None:
    found = await section(session, "Install")
    assert found["heading"] == "Guide > Install"
    [chunk] = found["chunks"]
    assert chunk["content"] == body(GUIDE, "## Install", "## Usage")
    assert "### Linux" in chunk["content"] and "### Windows" in chunk["content"]
    assert "Usage" not in chunk["content"]
    assert [h["heading_path"] for h in chunk["headings"]] == [
        "Guide > Install",
        "Guide > Install > Linux",
        "Guide > Install > Windows",
    ]
    assert chunk["content"][chunk["headings"][1]["offset"] :].startswith("### Linux")


async def test_the_last_section_runs_to_the_end_of_the_file(session: ClientSession) -> None:
    found = await section(session, "Guide > Usage")
    assert found["heading"] == "Guide > Usage"
    assert [c["content"] for c in found["chunks"]] == [body(GUIDE, "## Usage", None)]


async def test_the_top_heading_is_the_whole_chunk(session: ClientSession) -> None:
    found = await section(session, "Guide")
    [chunk] = found["chunks"]
    assert chunk["content"] == GUIDE.strip() and len(chunk["headings"]) == 5


async def test_an_unknown_heading_lists_the_real_headings(session: ClientSession) -> None:
    result = await session.call_tool("get_file", {"path": "guide/install.md", "heading": "Linx"})
    assert result.is_error
    text = result.content[0].text
    assert "\n" not in text
    assert text.startswith("no heading 'Linx' in guide/install.md; close headings: ")
    listed = text.split("close headings: ")[1].split("; ")
    assert listed[0] == "Guide > Install > Linux"
    assert set(listed) == {
        "Guide",
        "Guide > Install",
        "Guide > Install > Linux",
        "Guide > Install > Windows",
        "Guide > Usage",
    }
