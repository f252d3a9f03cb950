"""Several front processes serving streamable HTTP on one port (``--http-workers N``).

One Python process serves HTTP on about one core: the transport, validation and JSON
cost 7-8 ms of CPU per search against 2-4 ms for the search. With N > 1 the
server process becomes a supervisor: it binds the listening socket once and spawns N
HTTP worker processes that accept on that inherited socket, each with its own
read-only connections and its own map of the vector cache file (the page cache holds
one copy for all of them).

Invariants:

- Only the front processes multiply. The watcher, ``--reindex-on-start``, resuming
  unfinished jobs and the local worker pool stay in the supervisor, once. A worker
  never starts a pool: a ``reindex`` call in a worker asks the supervisor
  (``SIGUSR1``), which starts one unless index-host workers are alive, as a single
  process would on the same call.
- Several processes mean a session's follow-up request may reach another process, so
  the workers serve the SDK's stateless mode with JSON responses: every request
  stands alone, and no session lives in any process's memory.
- A worker killed after it served (``kill -9``, the OOM killer) is replaced, and the
  port keeps answering meanwhile through the others. A worker that exits before it
  serves (a bad setting, an import error) stops the server with one line: replacing
  it would only fail again.
- SIGTERM or SIGINT to the supervisor stops every worker (SIGTERM, then SIGKILL after
  ``STOP_SECONDS``); a worker whose supervisor is gone, even after ``kill -9``, stops
  within ``PARENT_CHECK_SECONDS``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from multiprocessing.context import SpawnProcess
from multiprocessing.synchronize import Event
from types import FrameType
from typing import Protocol

import structlog

from rifflux.errors import RiffluxError

log = structlog.get_logger(__name__)

LISTEN_BACKLOG = 2048
"""Pending connections the shared socket queues (uvicorn's default)."""
STOP_SECONDS = 10.0
"""How long a worker gets to finish its requests after SIGTERM before SIGKILL."""
PARENT_CHECK_SECONDS = 1.0
"""How often a worker checks that its supervisor is still alive."""
SUPERVISE_SECONDS = 0.5
"""How often the supervisor looks at its workers when nothing wakes it earlier."""
POOL_SIGNAL = signal.SIGUSR1
"""What a worker sends the supervisor when a ``reindex`` call wants workers."""


class WorkerTarget(Protocol):
    """What one HTTP worker process runs: serve on ``sock`` until stopped, calling
    ``ready()`` once it accepts connections. Must be picklable (spawned processes)."""

    def __call__(self, index: int, sock: socket.socket, ready: Event, parent: int) -> None: ...


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket every HTTP worker accepts on (``SO_REUSEADDR``, as uvicorn)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


def ask_supervisor_for_workers(parent: int) -> None:
    """From an HTTP worker: ask the supervisor to start a local pool unless workers live."""
    os.kill(parent, POOL_SIGNAL)


def stop_when_orphaned(parent: int) -> None:
    """In an HTTP worker: a daemon thread that stops this process (SIGTERM, so the server
    shuts down cleanly) once the supervisor ``parent`` is gone."""

    def check() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        log.warning("mcp.http_worker_orphaned", parent=parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=check, name="rifflux-parent-check", daemon=True).start()


@dataclass
class _Worker:
    index: int
    process: SpawnProcess
    ready: Event


@dataclass
class HttpWorkers:
    """Spawn ``count`` processes running ``target`` on ``sock``; keep them running.

    ``want_workers`` runs in the supervisor when a worker asks for a local pool.
    """

    target: WorkerTarget
    sock: socket.socket
    count: int
    want_workers: Callable[[], object]
    _workers: list[_Worker] = field(default_factory=list, init=False)
    _pool_wanted: threading.Event = field(default_factory=threading.Event, init=False)
    _stop_signal: int | None = field(default=None, init=False)
    _wake: int = field(default=-1, init=False)
    _wake_read: int = field(default=-1, init=False)

    def __post_init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")

    def run(self) -> None:
        """Start the workers and supervise them until SIGINT (Ctrl-C) or SIGTERM; stops
        them on the way out, then raises what the signal would have (``KeyboardInterrupt``,
        ``SystemExit(143)``).

        While it runs, those signals only ask it to stop: raised at an arbitrary point (a
        thread other than this one may take the signal, whatever this thread blocks),
        they could land inside ``Process.start`` after the child exists and before it is
        recorded, and that worker would outlive its supervisor.
        """
        wake_read, self._wake = os.pipe()
        os.set_blocking(self._wake, False)
        self._wake_read = wake_read
        handlers = {
            POOL_SIGNAL: self._on_pool_signal,
            signal.SIGINT: self._on_stop_signal,
            signal.SIGTERM: self._on_stop_signal,
        }
        previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
        try:
            for index in range(self.count):
                if self._stop_signal is None:
                    self._start(index)
            while self._stop_signal is None:
                self._supervise()
        finally:
            self.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            os.close(wake_read)
            os.close(self._wake)
        if self._stop_signal == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM every worker, SIGKILL those still running after ``STOP_SECONDS``."""
        for worker in self._workers:
            if worker.process.is_alive():
                worker.process.terminate()
        deadline = time.monotonic() + STOP_SECONDS
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()

    def _start(self, index: int) -> None:
        """Start worker ``index`` into its slot of ``_workers`` (appended, or replacing
        the one that died)."""
        ready = self._context.Event()
        process = self._context.Process(
            target=self.target,
            args=(index, self.sock, ready, os.getpid()),
            name=f"rifflux-http-{index}",
        )
        # The worker starts with SIGINT blocked (a mask survives fork and exec): Ctrl-C
        # on a terminal reaches the whole process group, and only this supervisor acts
        # on it, stopping the workers with SIGTERM. A worker still importing would
        # otherwise die of it with a traceback.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            process.start()
            worker = _Worker(index, process, ready)
            if index < len(self._workers):
                self._workers[index] = worker
            else:
                self._workers.append(worker)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _on_pool_signal(self, signum: int, frame: FrameType | None) -> None:
        self._pool_wanted.set()
        self._wake_up()

    def _on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop_signal = signum
        self._wake_up()

    def _wake_up(self) -> None:
        """End the supervisor's current wait (from a signal handler)."""
        with contextlib.suppress(BlockingIOError):  # Full of wake-ups already.
            os.write(self._wake, b"\0")

    def _supervise(self) -> None:
        ready = wait(
            [self._wake_read, *(w.process.sentinel for w in self._workers)],
            timeout=SUPERVISE_SECONDS,
        )
        if self._wake_read in ready:
            os.read(self._wake_read, 4096)
        if self._stop_signal is not None:
            return
        if self._pool_wanted.is_set():
            self._pool_wanted.clear()
            threading.Thread(target=self.want_workers, name="rifflux-pool", daemon=True).start()
        for worker in list(self._workers):
            if worker.process.is_alive():
                continue
            worker.process.join()
            code = worker.process.exitcode
            if not worker.ready.is_set():
                raise RiffluxError(
                    f"HTTP worker {worker.index} exited with code {code} before it served; "
                    "see the log lines above (or run with --http-workers 1)"
                )
            log.warning(
                "mcp.http_worker_replaced", worker=worker.index, pid=worker.process.pid, code=code
            )
            self._start(worker.index)
