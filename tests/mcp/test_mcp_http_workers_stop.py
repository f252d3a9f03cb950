"""The HTTP supervisor stops every worker it started, even when Ctrl-C lands while a
worker is still being started.

The SIGINT is sent from inside ``Process.start`` of the second worker (an injected
moment: a terminal's Ctrl-C can arrive there), so it is pending, blocked, when the
start returns and is delivered at the unblock.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from multiprocessing.context import SpawnProcess
from multiprocessing.synchronize import Event

import pytest

from rifflux.mcp.http_workers import HttpWorkers


def serve_until_stopped(index: int, sock: socket.socket, ready: Event, parent: int) -> None:
    ready.set()
    time.sleep(600)


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    # The test process may ignore SIGINT (started in the background without job control).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_a_worker_starts_stops_that_worker_too(
    monkeypatch: pytest.MonkeyPatch, ctrl_c_raises: None
) -> None:
    started: list[SpawnProcess] = []
    real_start = SpawnProcess.start

    def start_then_ctrl_c(process: SpawnProcess) -> None:
        real_start(process)
        started.append(process)
        if process.name == "rifflux-http-1":
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(SpawnProcess, "start", start_then_ctrl_c)
    with socket.create_server(("127.0.0.1", 0)) as sock:
        workers = HttpWorkers(serve_until_stopped, sock, count=3, want_workers=lambda: None)
        with pytest.raises(KeyboardInterrupt):
            workers.run()
    assert [p.name for p in started] == ["rifflux-http-0", "rifflux-http-1"]
    assert [p.is_alive() for p in started] == [False, False]
    assert all(p.exitcode is not None for p in started)
