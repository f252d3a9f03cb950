"""Another process holds the index's write lock (``BEGIN EXCLUSIVE``): a ``reindex``
gives up with one line naming that process, and no other call waits for it meanwhile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from http_support import free_port, http_session, wait_until_listening
from mcp_support import build_tree, server_command

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


@pytest.fixture(name="anyio_backend")
def anyio_backend_fixture() -> str:
    return "asyncio"


async def wait_for_line(log: Path, text: str, timeout: float = 60.0) -> None:
    with anyio.fail_after(timeout):
        while not log.exists() or text not in log.read_text(errors="replace"):
            await anyio.sleep(0.05)


async def test_reindex_under_an_external_lock_names_its_holder_and_blocks_no_other_call(
    tmp_path: Path,
) -> None:
    tree = build_tree(tmp_path / "work")
    log = tmp_path / "server.log"
    port = free_port()
    server = subprocess.Popen(
        server_command("--transport", "http", "--port", str(port)),
        env=tree.env(),
        cwd=tree.root,
        stdin=subprocess.DEVNULL,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tree.db_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        wait_until_listening(server, port)
        url = f"http://127.0.0.1:{port}/mcp"
        outcome: dict[str, object] = {}
        reindex_done = anyio.Event()
        async with http_session(url) as first, http_session(url) as second:

            async def reindex() -> None:
                outcome["reindex"] = await first.call_tool("reindex", {"background": True})
                reindex_done.set()

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(reindex)
                # The reindex is waiting for the lock (it says so, naming the holder)...
                await wait_for_line(log, "job.waiting_for_index_lock")
                # ...and another session's call answers meanwhile.
                status = await second.call_tool("index_status", {})
                answered_while_waiting = not reindex_done.is_set()
            locked = outcome["reindex"]
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        holder.wait(timeout=30)
        server.terminate()
        server.wait(timeout=60)
    assert not status.is_error
    assert json.loads(status.content[0].text)["files"] == 3
    assert answered_while_waiting
    assert locked.is_error  # type: ignore[attr-defined]
    message = locked.content[0].text  # type: ignore[attr-defined]
    assert "\n" not in message and "internal error" not in message
    assert f"is locked (held by pid {holder.pid} (" in message
    assert "let that process finish or stop it, then try again" in message
