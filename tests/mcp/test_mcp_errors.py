"""Finding 9 of issue 20, the smaller error defects, over a real MCP stdio session.

Unknown arguments, a malformed glob or date, a NUL byte or a 5,000-character path, a text
file as ``db_path`` and a read-only index folder: each is one line that names the problem
and what to do, never the raw OS text with the whole input, never "damaged; rebuild".
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    build_tree,
    call_error,
    stdio_session,
)

from rifflux.index.indexer import Indexer

pytestmark = pytest.mark.anyio

CALL_TIMEOUT_S = 60
LONG = "a" * 5000
MAX_LINE = 400  # ~200 characters of echoed input plus the words (and roots) around them


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    text = await call_error(session, tool, timeout=CALL_TIMEOUT_S, **arguments)
    assert "internal error" not in text, text
    return text


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    tree = build_tree(tmp_path_factory.mktemp("errors") / "work")
    (tree.root / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n" * 40)
    return tree


@pytest.fixture(scope="module")
async def session(tree: IndexedTree) -> AsyncIterator[ClientSession]:
    async with stdio_session(tree) as client:
        yield client


@pytest.mark.parametrize(
    ("tool", "arguments", "valid"),
    [
        ("search_rifflux", {"query": "x", "limt": 3}, "valid arguments: query, top_k, mode"),
        ("get_file", {"path": "docs/install.md", "heading ": "Linux"}, "path, heading, max_tokens"),
        ("reindex", {"pth": "docs", "background": True}, "valid arguments: path, paths, force"),
        ("index_status", {"verbose": True}, "valid arguments: "),
    ],
)
async def test_unknown_arguments_are_one_line_listing_the_valid_ones(
    session: ClientSession, tool: str, arguments: dict[str, Any], valid: str
) -> None:
    message = await refused(session, tool, **arguments)
    unknown = [k for k in arguments if k not in ("query", "path", "background")]
    assert message.startswith(f"unknown argument for {tool}: {unknown[0]!r}; "), message
    assert valid in message or (tool == "index_status" and "takes no arguments" in message)


async def test_a_malformed_glob_or_date_is_an_error_not_zero_results(
    session: ClientSession,
) -> None:
    message = await refused(session, "search_rifflux", query="install", path_glob="[")
    assert message == (
        "path_glob '[' is not a valid glob: the [ at character 1 is never closed; "
        "write [[] for a literal ["
    )
    message = await refused(session, "search_rifflux", query="install", modified_after="1e308")
    assert message.startswith("modified_after must be an ISO 8601 date or datetime")


@pytest.mark.parametrize(
    ("tool", "arguments", "problem"),
    [
        ("reindex", {"path": "docs\x00evil"}, "a path contains a NUL byte"),
        ("reindex", {"path": LONG}, "File name too long: "),
        ("reindex", {"paths": ["docs", "x/" + "b" * 300]}, "path to index does not exist: "),
        ("reindex", {"paths": ["docs", "/" + "b" * 300]}, "is outside the allowed roots"),
        ("get_file", {"path": "docs\x00x.md"}, "is not an indexed file"),
        ("get_file", {"path": LONG}, "is not an indexed file"),
        ("search_rifflux", {"query": "x", "db_path": "idx\x00.db"}, "a path contains a NUL byte"),
        ("search_rifflux", {"query": "x", "db_path": LONG}, "File name too long: "),
    ],
)
async def test_a_nul_byte_or_a_huge_path_is_one_short_line(
    session: ClientSession, tool: str, arguments: dict[str, Any], problem: str
) -> None:
    message = await refused(session, tool, **arguments)
    assert problem in message, message
    assert len(message) <= MAX_LINE, (len(message), message)
    assert "a" * 250 not in message and "b" * 250 not in message


async def test_a_text_file_as_db_path_is_not_an_index_never_damaged(
    session: ClientSession, tree: IndexedTree
) -> None:
    before = (tree.root / "passwd").read_bytes()
    message = await refused(session, "search_rifflux", query="root", db_path="passwd")
    assert message == (
        f"{tree.root / 'passwd'} is not a Rifflux index: it is not an SQLite database at all; "
        "name an index database (such as .rifflux/index.db) with --db, RIFFLUX_DB_PATH or "
        "db_path"
    )
    assert (tree.root / "passwd").read_bytes() == before


@pytest.fixture(scope="module")
def read_only_index(tree: IndexedTree) -> Iterator[Path]:
    """An index in a folder on a read-only tmpfs inside the tree (skipped where the test
    may not mount, as root cannot be refused a write by permissions alone)."""
    folder = tree.root / "ro"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "rifflux-test", str(folder)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        docs = folder / "docs"
        shutil.copytree(tree.root / "docs", docs)
        Indexer(tree.settings().with_overrides(db_path=folder / "index.db")).run([docs])
        assert not (folder / "index.db-wal").exists()
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder / "index.db"
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


async def test_a_read_only_index_folder_says_why(
    session: ClientSession, tree: IndexedTree, read_only_index: Path
) -> None:
    message = await refused(session, "search_rifflux", query="linux", db_path="ro/index.db")
    assert message.startswith(
        f"cannot open the index at {read_only_index}: its folder is not writable, and SQLite "
        "must create index.db-wal and index.db-shm there, even to read an index in WAL mode ("
    ), message
    assert message.endswith(
        f"make {read_only_index.parent} writable, or copy the index to a writable folder"
    )
    cli = subprocess.run(
        [sys.executable, "-m", "rifflux.cli", "search", "linux", "--db", str(read_only_index)],
        capture_output=True,
        text=True,
        env=tree.env(),
        cwd=tree.root,
        timeout=60,
    )
    assert cli.returncode == 1
    assert cli.stderr.startswith(f"rifflux: error: cannot open the index at {read_only_index}")
    assert cli.stderr.count("\n") == 1
