"""The HTTP supervisor stops every worker it started, even when Ctrl-C lands while a
worker is still being started.

The SIGINT is sent from inside ``Process.start`` of the second worker (an injected
moment: a terminal's Ctrl-C can arrive there), either to the starting thread or to
another thread of the supervisor, which the starting thread's signal mask does not
cover; Python then runs the handler in the main thread, inside ``start``.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from multiprocessing import resource_tracker
from multiprocessing.context import SpawnProcess
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest

from rifflux.mcp.http_workers import HttpWorkers


def serve_until_stopped(index: int, sock: socket.socket, ready: Event, parent: int) -> None:
    ready.set()
    time.sleep(600)


def running_workers() -> set[int]:
    """This process's spawned children that have not exited (zombies and
    multiprocessing's resource tracker left out)."""
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"spawn_main" in command:
            children.add(int(stat.parent.name))
    return children


def ctrl_c_from_the_starting_thread() -> None:
    os.kill(os.getpid(), signal.SIGINT)


class OtherThread:
    """A thread started before the supervisor runs (so SIGINT is not blocked there) that
    takes a SIGINT when asked."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.done = threading.Event()
        threading.Thread(target=self._take, daemon=True).start()

    def _take(self) -> None:
        self.asked.wait()
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        self.done.set()

    def __call__(self) -> None:
        self.asked.set()
        self.done.wait()


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    # The test process may ignore SIGINT (started in the background without job control).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        # The supervisor's Events started multiprocessing's resource tracker in this
        # process; it would outlive the test run by a moment.
        resource_tracker._resource_tracker._stop()


@pytest.mark.parametrize("taken_by", ["the starting thread", "another thread"])
def test_ctrl_c_while_a_worker_starts_stops_that_worker_too(
    monkeypatch: pytest.MonkeyPatch, ctrl_c_raises: None, taken_by: str
) -> None:
    started: list[str] = []
    real_start = SpawnProcess.start
    ctrl_c = OtherThread() if taken_by == "another thread" else ctrl_c_from_the_starting_thread

    def start_with_ctrl_c(process: SpawnProcess) -> None:
        if process.name == "rifflux-http-1":
            ctrl_c()
        real_start(process)
        started.append(process.name)

    monkeypatch.setattr(SpawnProcess, "start", start_with_ctrl_c)
    with socket.create_server(("127.0.0.1", 0)) as sock:
        workers = HttpWorkers(serve_until_stopped, sock, count=3, want_workers=lambda: None)
        with pytest.raises(KeyboardInterrupt):
            workers.run()
    assert started == ["rifflux-http-0", "rifflux-http-1"]
    assert running_workers() == set()
