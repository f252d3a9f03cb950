"""``rifflux serve --http-workers 2``: two HTTP worker processes serve one index on one
port, answer exactly as one process does, leave the watcher and the pool to their
supervisor, and a worker killed with -9 is replaced while the port keeps answering;
clients that trickle their request bodies do not lock the others out, and heads over
the limits are refused as by one process.

Real processes throughout: a supervisor spawned as the CLI is, its spawned workers, a
real MCP client over streamable HTTP; the reference is a single-process server on the
same index (issue 22).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from http_support import (
    HEAD_WITHIN_THE_LIMITS,
    HEADS_OVER_THE_LIMITS,
    INITIALIZE,
    MCP_HEADERS,
    free_port,
    http_session,
    slow_bodies,
    still_waiting,
    wait_until_listening,
)
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    TOOL_NAMES,
    IndexedTree,
    anyio_backend_fixture,
    call_ok,
    server_command,
    shared_tree_fixture,
    tree_fixture,
    worker_children,
)

pytestmark = pytest.mark.anyio

BOOT_S = 60.0
"""Generous bound for workers to boot (spawned interpreters) on a loaded machine."""
CALL_S = 30.0
SEARCHES = [
    {"query": "basil", "top_k": 3},
    {"query": "pesto sauce recipe", "mode": "lexical"},
    {"query": "garden herbs", "mode": "semantic", "top_k": 4},
    {"query": "python testing", "mode": "hybrid", "max_tokens": 200},
]

CAP = 3
"""Requests in flight per worker in the slow-body test (``RIFFLUX_HTTP_MAX_SESSIONS``)."""
SLOW_BODIES = 10 * 2 * CAP
"""Connections trickling their bodies: ten times what both workers' caps hold together."""
SLOW_REQUEST_TIMEOUT_S = 300
"""The request deadline while the slow bodies attack: longer than the test can take, so
that no slow request is cut off (freeing its place) before the honest client is served."""

INDEX_KEYS = ("files", "chunks", "embeddings", "roots", "generation", "embedding_model")
"""The part of ``index_status`` about the index (the rest is about the process)."""


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            if name in line:
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
        return found

    def serving_pids(self) -> list[int]:
        """Pids of the HTTP workers that said they serve, oldest first."""
        return [event["pid"] for event in self.events("mcp.http_serving")]

    def wait_for_serving(self, count: int) -> list[int]:
        deadline = time.monotonic() + BOOT_S
        while len(self.serving_pids()) < count:
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)
        return self.serving_pids()


def start(tree: IndexedTree, log: Path, *args: str, **env: str) -> Server:
    port = free_port()
    command = server_command("--transport", "http", "--port", str(port), *args)
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            command,
            env=tree.env(**env),
            cwd=tree.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    return Server(proc, f"http://127.0.0.1:{port}/mcp", log)


def stop(server: Server) -> None:
    server.proc.terminate()
    server.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def servers(
    shared_tree: IndexedTree, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    """(two HTTP workers watching the tree, one process): booted side by side."""
    logs = tmp_path_factory.mktemp("logs")
    watch = str(shared_tree.root)
    pair = start(shared_tree, logs / "two.log", "--watch", watch, RIFFLUX_HTTP_WORKERS="2")
    single = start(shared_tree, logs / "one.log", RIFFLUX_HTTP_WORKERS="1")
    try:
        wait_until_listening(single.proc, int(single.url.split(":")[2].split("/")[0]))
        pair.wait_for_serving(2)
        yield pair, single
    finally:
        stop(pair)
        stop(single)
    # SIGTERM to the supervisor stopped every HTTP worker it started.
    assert not [pid for pid in pair.serving_pids() if Path(f"/proc/{pid}").exists()]


@pytest.fixture(scope="module")
def capped_pair(
    shared_tree: IndexedTree, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """Two HTTP workers with a small in-flight cap and a long request deadline."""
    pair = start(
        shared_tree,
        tmp_path_factory.mktemp("logs") / "capped.log",
        RIFFLUX_HTTP_WORKERS="2",
        RIFFLUX_HTTP_MAX_SESSIONS=str(CAP),
        RIFFLUX_HTTP_REQUEST_TIMEOUT_SECONDS=str(SLOW_REQUEST_TIMEOUT_S),
    )
    try:
        pair.wait_for_serving(2)  # Both accept, so the attack reaches both.
        yield pair
    finally:
        stop(pair)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


async def answers(session: ClientSession) -> list[str]:
    """The JSON of every read-only tool an agent uses, in one session."""
    tools = sorted(tool.name for tool in (await session.list_tools()).tools)
    assert tools == sorted(TOOL_NAMES)
    found = [await call_ok(session, "search_rifflux", timeout=CALL_S, **s) for s in SEARCHES]
    chunk_id = found[0]["results"][0]["chunk_id"]
    chunk = await call_ok(session, "get_chunk", timeout=CALL_S, chunk_id=chunk_id, neighbors=1)
    status = await call_ok(session, "index_status", timeout=CALL_S)
    index = {key: status[key] for key in INDEX_KEYS}
    return [canonical(tools), *map(canonical, found), canonical(chunk), canonical(index)]


async def test_two_http_workers_answer_byte_identical_to_one_process(
    servers: tuple[Server, Server], shared_tree: IndexedTree
) -> None:
    pair, single = servers
    async with http_session(single.url) as session:
        expected = await answers(session)
    for _ in range(3):  # Each request may reach either worker.
        async with http_session(pair.url) as session:
            assert await answers(session) == expected
            status = await call_ok(session, "index_status", timeout=CALL_S)
            assert status["http_sessions"]["mode"] == "stateless"

    # Only the front processes multiply: one watcher, one pool, both the supervisor's.
    pids = pair.serving_pids()
    assert len(set(pids)) == 2 and pair.proc.pid not in pids
    assert len(pair.events('"watch.started"')) == 1
    deadline = time.monotonic() + BOOT_S
    while not worker_children(shared_tree.root):
        assert time.monotonic() < deadline, "the watcher's pool never booted"
        time.sleep(0.2)
    # At most the supervisor's one: its boot gives way to index-host workers already
    # alive (another process's pool on this tree), the only case in which it starts none;
    # an HTTP worker never starts one (the parent check below).
    assert len(pair.events("workers.local_pool_started")) <= 1
    pool = [e["pid"] for e in pair.events("workers.local_pool_started")]
    assert all(_parent(pid) == pair.proc.pid for pid in pool)


async def test_a_worker_killed_with_9_is_replaced_and_the_port_keeps_answering(
    servers: tuple[Server, Server],
) -> None:
    pair, _ = servers
    first, second = pair.wait_for_serving(2)[:2]
    os.kill(first, signal.SIGKILL)
    await search_answers(pair)  # The second worker alone answers.
    replacement = pair.wait_for_serving(3)[-1]
    assert replacement not in (first, second)
    assert _parent(replacement) == pair.proc.pid
    assert len(pair.events("mcp.http_worker_replaced")) == 1
    # The replacement answers on its own too (the second, stopped, accepts nothing).
    os.kill(second, signal.SIGSTOP)
    try:
        await search_answers(pair)
    finally:
        os.kill(second, signal.SIGCONT)
    assert pair.proc.poll() is None


async def search_answers(server: Server) -> None:
    async with http_session(server.url) as session:
        found = await call_ok(session, "search_rifflux", timeout=CALL_S, query="basil")
        assert found["count"] >= 1


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


async def test_a_reindex_reaching_an_http_worker_gets_the_supervisors_pool(
    tree: IndexedTree, tmp_path: Path
) -> None:
    (tree.root / "notes" / "new.md").parent.mkdir(parents=True, exist_ok=True)
    (tree.root / "notes" / "new.md").write_text("# New\n\nThe wombatfjell plan.\n")
    pair = start(tree, tmp_path / "reindex.log", RIFFLUX_HTTP_WORKERS="2")
    try:
        pair.wait_for_serving(2)
        assert not pair.events("workers.local_pool_started")  # Nothing asked for one yet.
        async with http_session(pair.url) as session:
            done = await call_ok(session, "reindex", timeout=BOOT_S, path=str(tree.root))
            assert done["indexed_files"] == 1
            found = await call_ok(session, "search_rifflux", timeout=CALL_S, query="wombatfjell")
            assert found["results"][0]["path"].endswith("notes/new.md")
        pools = [e["pid"] for e in pair.events("workers.local_pool_started")]
        assert len(pools) == 1 and _parent(pools[0]) == pair.proc.pid
    finally:
        stop(pair)


async def test_bodies_sent_a_byte_at_a_time_leave_room_for_an_honest_client(
    capped_pair: Server,
) -> None:
    port = int(capped_pair.url.split(":")[2].split("/")[0])
    with slow_bodies(port, SLOW_BODIES) as attackers:
        with anyio.fail_after(BOOT_S):
            async with http_session(capped_pair.url) as session:  # initialize
                tools = (await session.list_tools()).tools
                found = await call_ok(session, "search_rifflux", timeout=CALL_S, query="basil")
        assert sorted(tool.name for tool in tools) == sorted(TOOL_NAMES)
        assert found["count"] >= 1
        # The attack was on throughout: no slow request was answered or cut off.
        assert all(still_waiting(conn) for conn in attackers)


@pytest.mark.parametrize("extra", HEADS_OVER_THE_LIMITS.values(), ids=HEADS_OVER_THE_LIMITS)
def test_a_head_over_the_limits_gets_431_from_every_worker(
    capped_pair: Server, extra: dict[str, str]
) -> None:
    with httpx2.Client(timeout=CALL_S) as client:
        for _ in range(4):  # Each request may reach either worker.
            response = client.post(capped_pair.url, json=INITIALIZE, headers=MCP_HEADERS | extra)
            assert response.status_code == 431, response.text
        within = client.post(
            capped_pair.url, json=INITIALIZE, headers=MCP_HEADERS | HEAD_WITHIN_THE_LIMITS
        )
        assert within.status_code == 200, within.text
