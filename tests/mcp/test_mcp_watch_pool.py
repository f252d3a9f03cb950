"""``rifflux serve --watch`` with no other workers: its local pool boots at startup, not
after the startup grace and not on the first event (issue 22).

A real server over stdio, a real pool, a real file written into the watched root. The
grace is set far beyond the liveness bounds: a pool seen before it ends was started at
startup, before any event.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    call_ok,
    stdio_session,
    tree_fixture,
    worker_children,
)

pytestmark = pytest.mark.anyio

GRACE_S = "120"
"""The startup grace: longer than the whole test may take."""
LIVENESS_S = 30.0
"""Generous bounds for the pool's boot and for the edit, on a loaded machine."""


async def live_workers(session: ClientSession) -> int:
    status = await call_ok(session, "index_status", timeout=LIVENESS_S)
    return int(status["live_workers"]["count"])


async def found(session: ClientSession, word: str, path: str) -> bool:
    answer = await call_ok(
        session, "search_rifflux", timeout=LIVENESS_S, query=word, mode="lexical"
    )
    return any(r["path"].endswith(path) for r in answer["results"])


async def test_the_watchers_pool_is_up_before_the_first_event(tree: IndexedTree) -> None:
    async with stdio_session(
        tree, "--watch", str(tree.root), RIFFLUX_STARTUP_WORKER_GRACE_SECONDS=GRACE_S
    ) as session:
        # No event yet: the pool boots because the server watches, within the grace.
        with anyio.fail_after(LIVENESS_S):
            while await live_workers(session) == 0:
                await anyio.sleep(0.2)
        pool = worker_children(tree.root)
        assert pool, "the live workers are the server's own pool"
        status = await call_ok(session, "index_status", timeout=LIVENESS_S)
        assert status["watcher"]["last_event_at"] is None

        target = Path(tree.root) / "notes" / "first-edit.md"
        written = time.monotonic()
        target.write_text("# First edit\n\nThe quokkafjord checklist names an owner.\n")
        with anyio.fail_after(LIVENESS_S):
            while not await found(session, "quokkafjord", "notes/first-edit.md"):
                await anyio.sleep(0.05)
        print(f"first edit keyword-searchable {time.monotonic() - written:.2f} s after the write")
        # The pool did not give way to its own workers: the same processes serve.
        assert worker_children(tree.root) == pool
