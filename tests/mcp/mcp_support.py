"""Helpers and fixtures for the MCP tests: a small real index in a tmp directory.

The index is built in-process with :class:`~rifflux.index.indexer.Indexer` (hash
embeddings), so only the reindex tests need queue workers. Test modules import the
fixtures they use from here: a ``conftest.py`` in this directory would shadow
``tests/conftest.py`` for modules that ``from rifflux_testing import ...``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import stdio_client
from mcp_types import ListRootsResult, Root

from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.mcp.tools import ToolContext

REPO_ROOT = Path(__file__).resolve().parents[2]

DOCS = {
    "docs/install.md": """# Installing Rifflux

Rifflux runs on Python 3.11 and needs no server. Install it with pip into a virtual
environment, then point it at a directory of markdown files to build the index.

## Linux

On Linux the SQLite that ships with Python has FTS5 enabled, so nothing else is needed.
Create the index with `rifflux index docs/` and search it with `rifflux search`.

## Windows

On Windows use the python.org installer. Paths in the index always use forward slashes,
so an index built on Windows answers the same queries as one built on Linux.
""",
    "docs/search.md": """# Searching

Hybrid search fuses BM25 keyword ranking with embedding similarity using reciprocal
rank fusion. Lexical mode is best for exact identifiers such as error codes, semantic
mode for paraphrases and questions asked in other words.

## Query syntax

Queries are plain text: quotes, asterisks, AND, OR, NEAR and colons are searched as
ordinary words, never as FTS5 operators, so a stray quote never breaks a search.
""",
    "notes/gardening.txt": """Tomatoes want full sun and deep watering twice a week.
Basil grows well next to tomatoes and keeps some pests away. Harvest basil leaves from
the top so the plant branches out instead of flowering early in the summer heat.
""",
}


TOOL_NAMES = (
    "search_rifflux",
    "reindex",
    "index_status",
    "get_chunk",
    "get_file",
    "search_decisions",
    "search_errors",
    "context_stats",
    "multi_get",
    "grep_rifflux",
)
"""Every tool the server lists, in registration order."""


@dataclass(frozen=True)
class IndexedTree:
    """A directory with a few documents, indexed into ``db_path`` (paths relative to root)."""

    root: Path
    db_path: Path

    def env(self, **extra: str) -> dict[str, str]:
        """The environment a server subprocess over this index runs with."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RIFFLUX_", "RIFLUX_"))}
        env.update(
            RIFFLUX_DB_PATH=str(self.db_path),
            RIFFLUX_EMBEDDING_BACKEND="hash",
            RIFFLUX_BASE_DIR=str(self.root),
            RIFFLUX_WORKERS="1",
            # One HTTP front process (sessions), unless a test asks for more.
            RIFFLUX_HTTP_WORKERS="1",
            RIFFLUX_LOG_LEVEL="INFO",
            # No Procfile workers boot beside a test server: start its pool soon.
            RIFFLUX_STARTUP_WORKER_GRACE_SECONDS="2",
            PYTHONPATH=str(REPO_ROOT),
        )
        env.update(extra)
        return env

    def settings(self, **extra: str) -> Settings:
        return Settings.from_env(self.env(**extra))


def write_docs(root: Path, docs: dict[str, str] = DOCS) -> None:
    for rel, text in docs.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def build_tree(root: Path, docs: dict[str, str] = DOCS) -> IndexedTree:
    """``docs`` written under ``root`` and indexed in-process."""
    write_docs(root, docs)
    tree = IndexedTree(root=root, db_path=root / ".rifflux" / "index.db")
    Indexer(tree.settings()).run([root])
    return tree


def server_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "rifflux.mcp", *args]


@asynccontextmanager
async def stdio_session(
    tree: IndexedTree,
    *args: str,
    client_roots: Sequence[Path] | None = None,
    errlog: TextIO | None = None,
    **env: str,
) -> AsyncIterator[ClientSession]:
    """An initialised client session with ``rifflux serve`` over stdio on ``tree``.

    ``client_roots``: the roots the client declares (MCP roots capability); ``errlog``:
    where the server's stderr goes (default: this process's stderr).
    """
    command, *rest = server_command(*args)
    params = StdioServerParameters(command=command, args=rest, env=tree.env(**env), cwd=tree.root)

    async def list_roots(_context: ClientRequestContext) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=p.as_uri()) for p in client_roots or ()])

    callback = list_roots if client_roots is not None else None
    async with (
        stdio_client(params, errlog=errlog or sys.stderr) as (read, write),
        ClientSession(read, write, list_roots_callback=callback) as session,
    ):
        await session.initialize()
        yield session


async def call_ok(
    session: ClientSession, tool: str, *, timeout: float, **arguments: Any
) -> dict[str, Any]:
    """The structured result of a tool call that must succeed within ``timeout`` s."""
    with anyio.fail_after(timeout):
        result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def call_error(session: ClientSession, tool: str, *, timeout: float, **arguments: Any) -> str:
    """The one line of text of a tool call that must fail within ``timeout`` s: never a
    traceback, never more than one line."""
    with anyio.fail_after(timeout):
        result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    text = str(result.content[0].text)  # type: ignore[union-attr]
    assert "\n" not in text and "Traceback" not in text, text
    return text


def plain_words(query: str) -> str:
    """``query`` with every character that is not part of a word replaced by a space."""
    return re.sub(r"\W+", " ", query)


def worker_children(root: Path) -> set[int]:
    """PIDs of the worker processes (``workers.child``) under this test's server in ``root``.

    Read from ``/proc``: the server is a child of this process whose working directory is
    ``root``; its pool's arbiter starts the workers.
    """
    found: set[int] = set()
    pending = [pid for pid in _children(os.getpid()) if _cwd(pid) == root.resolve()]
    while pending:
        pid = pending.pop()
        if "workers.child" in _cmdline(pid):
            found.add(pid)
        pending.extend(_children(pid))
    return found


def _children(pid: int) -> set[int]:
    """Children started by any thread of ``pid`` (the server starts its pool from a worker
    thread, and ``/proc/PID/task/TID/children`` lists only that thread's)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.update(int(child) for child in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def _cwd(pid: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


# Fixtures are registered under their ``name``; a test module imports the ``*_fixture``
# functions it needs, so its parameters do not shadow the imported names.


@pytest.fixture(name="tree")
def tree_fixture(tmp_path: Path) -> IndexedTree:
    """A fresh indexed tree per test (for tests that change the index)."""
    return build_tree(tmp_path / "work")


@pytest.fixture(name="shared_tree", scope="module")
def shared_tree_fixture(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    """One indexed tree per module, for tests that only read it."""
    return build_tree(tmp_path_factory.mktemp("mcp") / "work")


@pytest.fixture(name="tool_context")
def tool_context_fixture(tree: IndexedTree) -> Iterator[ToolContext]:
    ctx = ToolContext.from_settings(tree.settings(), cwd=tree.root)
    yield ctx
    ctx.close()


@pytest.fixture(name="anyio_backend", scope="module")
def anyio_backend_fixture() -> str:
    """Module scope, so module-scoped async fixtures (one server per module) work."""
    return "asyncio"
