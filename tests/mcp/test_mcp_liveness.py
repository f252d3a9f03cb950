"""One hostile search never holds the server (issue 20, finding 1), over real transports.

The hostile call is the issue's glob, ``HOSTILE_VARIANTS`` variants of
``"**/" * 100 + "*b"``, over 2,000 files 120 folders deep. The backtracking regex of
before held the GIL for hours on the first of those paths (C(100, 120) ways to place the
``**/``s), so the server answered nothing, not even ``initialize``. The automaton costs
about 0.14 s of CPU per variant on this tree, so the call runs for seconds of CPU and
ends by itself (the search deadline is set far beyond it). Once a server thread has
spent ``IN_HAND_CPU_S`` of CPU on it (the call is in the server's hands), another HTTP
session initializes, reads ``index_status`` and searches, and all three answers arrive
while the hostile call is still unanswered: the proof is the order of the answers, not
a clock, so a loaded machine slows both sides alike and only makes the test longer.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from http_support import HttpServer, start_http_server
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_support import IndexedTree, anyio_backend_fixture, server_command  # noqa: F401

from rifflux.index.indexer import Indexer

pytestmark = pytest.mark.anyio

HOSTILE_VARIANTS = 30
HOSTILE_GLOBS = ["**/" * 100 + f"*b{i}" for i in range(HOSTILE_VARIANTS)]
LONG_DEADLINE_S = 3600
"""Far beyond the hostile call's work: it ends when its work is done, not on a clock."""
IN_HAND_CPU_S = 0.3
"""CPU one server thread spends on the hostile call before the others call: a few
percent of its work, so most of the hostile call is still ahead of them."""
WAIT_BOUND_S = 300
"""Generous bound on each wait: it only ends a test whose server never answers."""
TINY_DEADLINE_S = 0.000001
TIMEOUT_MESSAGE = (
    f"search timed out after {TINY_DEADLINE_S:g} s (RIFFLUX_SEARCH_TIMEOUT_SECONDS); "
    "narrow the query or filters"
)


@pytest.fixture(scope="module")
def deep_tree(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    root = tmp_path_factory.mktemp("liveness") / "work"
    deep = root / ("b/" * 120)
    deep.mkdir(parents=True)
    for i in range(2000):
        (deep / f"n{i}.md").write_text(f"# Note {i}\n\nbasil tomatoes {i}\n")
    (root / "docs").mkdir()
    (root / "docs" / "garden.md").write_text("# Garden\n\nbasil grows next to tomatoes\n")
    tree = IndexedTree(root=root, db_path=root / ".rifflux" / "index.db")
    Indexer(tree.settings()).run([root])
    return tree


@pytest.fixture(scope="module")
def server(deep_tree: IndexedTree) -> Iterator[HttpServer]:
    yield from start_http_server(deep_tree, RIFFLUX_SEARCH_TIMEOUT_SECONDS=str(LONG_DEADLINE_S))


@pytest.fixture(scope="module")
def impatient_server(deep_tree: IndexedTree) -> Iterator[HttpServer]:
    yield from start_http_server(deep_tree, RIFFLUX_SEARCH_TIMEOUT_SECONDS=str(TINY_DEADLINE_S))


@asynccontextmanager
async def http_session(url: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(timeout=WAIT_BOUND_S) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds (user and system) spent by each thread of process ``pid`` (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    spent = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # The thread ended meanwhile.
        spent[task.name] = (int(fields[11]) + int(fields[12])) / tick
    return spent


async def test_other_sessions_answer_while_a_hostile_search_runs(server: HttpServer) -> None:
    hostile: dict[str, object] = {}

    async def attack(session: ClientSession) -> None:
        hostile["result"] = await session.call_tool(
            "search_rifflux", {"query": "basil", "path_glob": HOSTILE_GLOBS}
        )

    async def in_the_servers_hands(before: dict[str, float]) -> None:
        while not any(
            spent - before.get(thread, 0.0) >= IN_HAND_CPU_S
            for thread, spent in thread_cpu_s(server.pid).items()
        ):
            assert "result" not in hostile, "the hostile call ended before it was seen running"
            await anyio.sleep(0.02)

    with anyio.fail_after(WAIT_BOUND_S):
        async with http_session(server.url) as attacker, anyio.create_task_group() as tasks:
            before = thread_cpu_s(server.pid)
            tasks.start_soon(attack, attacker)
            await in_the_servers_hands(before)
            async with http_session(server.url) as other:
                status = await other.call_tool("index_status", {})
                found = await other.call_tool(
                    "search_rifflux", {"query": "basil tomatoes", "path_glob": "docs/*.md"}
                )
            # A server blocked by the hostile call answers the others only after it.
            assert "result" not in hostile, "the hostile search was answered first"
    assert not status.is_error and status.structured_content["files"] == 2001  # type: ignore[index]
    assert [r["path"] for r in found.structured_content["results"]] == ["docs/garden.md"]  # type: ignore[index]
    result = hostile["result"]
    assert not result.is_error, result  # type: ignore[attr-defined]
    assert result.structured_content["results"] == []  # type: ignore[attr-defined]


async def test_the_deadline_ends_a_hostile_search_with_one_line(
    impatient_server: HttpServer,
) -> None:
    """Past its deadline (1 µs: passed at the search's first check) the hostile call is
    answered with the one line, over HTTP."""
    async with http_session(impatient_server.url) as session:
        result = await session.call_tool(
            "search_rifflux", {"query": "basil", "path_glob": HOSTILE_GLOBS[:1]}
        )
    assert result.is_error, result
    assert result.content[0].text == TIMEOUT_MESSAGE  # type: ignore[union-attr]


def test_the_cli_answers_the_hostile_glob_promptly(tmp_path: Path) -> None:
    """``rifflux search agent --path-glob "**/"*100+"*b"``: the old regex never returned
    on paths a few folders deep; now it answers (no match) well within the limit."""
    root = tmp_path / "work"
    deep = root / "a" / "b" / "c" / "d" / "e" / "f"
    deep.mkdir(parents=True)
    (deep / "agent.md").write_text("# Agent\n\nan agent file\n")
    (root / "agent.md").write_text("# Agent\n\nanother agent\n")
    tree = IndexedTree(root=root, db_path=root / ".rifflux" / "index.db")
    Indexer(tree.settings()).run([root])
    result = subprocess.run(
        [sys.executable, "-m", "rifflux.cli", "search", "agent", "--path-glob", "**/" * 100 + "*b"],
        capture_output=True,
        text=True,
        env=tree.env(),
        cwd=root,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("0 results for 'agent'")
