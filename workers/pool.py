"""A supervised pool of worker processes: N stay alive whatever happens to one of them.

Dramatiq's own CLI stops every worker process when one of them dies: it expects an
outside supervisor. Rifflux is its own supervisor, in the manner of gunicorn's arbiter
and Celery's prefork pool. This process (the arbiter) starts N children
(``python -m workers.child``, each a ``dramatiq.Worker``) and loops:

- a child that dies (any signal, any exit code) is replaced while the others keep
  consuming; the dead child's SQLite leases and worker
  heartbeats are handed back at once, so its messages move again in about a second
  instead of after the lease;
- a child that exits with :data:`EXIT_RECYCLE` (it reached
  ``RIFFLUX_WORKER_MAX_MESSAGES`` or ``RIFFLUX_WORKER_MAX_RSS_MB`` between two messages)
  is replaced at once and not counted as a crash;
- a child that dies after it started consuming (an OOM kill, ``kill -9``) is replaced
  after :data:`BACKOFF_BASE_SECONDS`, however often it happens: a message that kills
  every worker is stopped by the broker's delivery limit, not by the pool;
- a child that dies before it could consume (a broker that cannot be reached, a broken
  install) is replaced with a capped exponential backoff, and more than
  :data:`MAX_CRASHES` such failures within :data:`CRASH_WINDOW_SECONDS` is a crash
  loop: the pool stops every child and exits 1 with one line that names the log;
- SIGTERM, SIGINT and SIGHUP stop it gracefully: children finish the messages they are
  running (up to :data:`STOP_SECONDS`, then they are killed; their messages are
  redelivered), and the heartbeats and leases of each stopped child are handed back as
  for a dead one (a child that could not write, on a full disk, could not remove its
  own heartbeat);
- with ``--parent-pid`` (a local pool that ``rifflux index`` or the MCP server started)
  it stops when that process is gone, even after its ``kill -9``, so a pool never
  outlives whoever started it. Children get ``PR_SET_PDEATHSIG`` from the arbiter, so
  they never outlive the arbiter either.

The arbiter imports only what it needs to start its children (the settings) before it
starts them; structlog (~50 ms of imports, through :mod:`workers.bootstrap`) comes with
its first log line, after the children are spawned, and the broker modules, which load
Dramatiq and numpy, when a child dies. The arbiter's own boot comes before its
children's, so it is on the path of every job that starts a pool: 0.14 CPU-s with the
broker modules deferred, 0.28 with every import up front.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

from rifflux.config import Settings
from rifflux.errors import RiffluxError


class _DeferredLogger:
    """This module's structlog logger, imported at its first use (module docstring); with
    ``json_level`` set (by :func:`main`), JSON logging at that level is configured first."""

    def __init__(self) -> None:
        self._logger: Any = None
        self.json_level: str | None = None

    def __getattr__(self, name: str) -> Any:
        if self._logger is None:
            # workers.bootstrap imports structlog without rich; it comes before numpy too,
            # which the arbiter imports only with the broker modules, after a first line.
            import workers.bootstrap  # noqa: F401

            # isort: split
            import structlog

            if self.json_level is not None:
                from rifflux.logs import configure_logging

                configure_logging(self.json_level, style="json")
            self._logger = structlog.get_logger(__name__)
        return getattr(self._logger, name)


log = _DeferredLogger()

EXIT_RECYCLE = 3
"""Exit code of a child that stopped because it reached a recycling limit (set by
:mod:`workers.child`, which imports it from here)."""

POLL_SECONDS = 0.2
"""How often the arbiter looks for dead children and for its own parent."""
BACKOFF_BASE_SECONDS = 0.5
"""Delay before replacing the first crashed child; it doubles with each recent crash..."""
BACKOFF_CAP_SECONDS = 30.0
"""...up to this."""
MAX_CRASHES = 5
"""More boot failures than this within :data:`CRASH_WINDOW_SECONDS` stop the pool."""
CRASH_WINDOW_SECONDS = 60.0
STOP_SECONDS = 30.0
"""How long children get to finish their messages after SIGTERM before SIGKILL."""
EXIT_CRASH_LOOP = 1
GPU_WORKER_THREADS = 2
"""Threads of a GPU worker: two embed messages in flight, so the GPU has the next batch
while the vectors of the last one are sent."""
GPU_WORKER_MIN_RSS_MB = 8192
"""The least recycling limit of a GPU worker: the CUDA runtime and libraries alone keep
gigabytes resident, which ``RIFFLUX_WORKER_MAX_RSS_MB``'s default (sized for an ONNX
worker) would take for a leak."""

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """What each child runs: the actors module, its threads and queues, its limits."""

    processes: int
    threads: int = 1
    queues: tuple[str, ...] = ()
    actors: str = "workers.actors"
    lexical_threads: int = 0
    embed_nice: int = 0
    nice: int = 0
    max_messages: int = 0
    max_rss_mb: int = 0

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        processes: int | None = None,
        threads: int = 1,
        queues: Sequence[str] = (),
    ) -> PoolSpec:
        return cls(
            processes=processes or settings.workers,
            threads=threads,
            queues=tuple(queues),
            actors=settings.worker_actors,
            lexical_threads=settings.lexical_threads,
            embed_nice=settings.embed_nice,
            nice=settings.worker_nice,
            max_messages=settings.worker_max_messages,
            max_rss_mb=settings.worker_max_rss_mb,
        )

    @classmethod
    def for_device(
        cls,
        settings: Settings,
        *,
        processes: int | None = None,
        threads: int | None = None,
        queues: Sequence[str] = (),
    ) -> PoolSpec:
        """The pool of ``rifflux worker``: for a CUDA device (``settings.embedding_device``)
        an embed-only pool of one process (one per GPU is enough to fill it) with
        :data:`GPU_WORKER_THREADS` threads, so that a second batch embeds while the first
        one's vectors go out; else :meth:`from_settings`."""
        if settings.embedding_device == "cpu":
            return cls.from_settings(
                settings, processes=processes, threads=threads or 1, queues=queues
            )
        from rifflux.queue.names import EMBED_QUEUE  # dramatiq: only for a GPU pool

        if set(queues) - {EMBED_QUEUE}:
            raise RiffluxError(
                f"a worker on {settings.embedding_device} only embeds: give it no --queues "
                f"or --queues {EMBED_QUEUE}"
            )
        spec = cls.from_settings(
            settings,
            processes=processes or 1,
            threads=threads or GPU_WORKER_THREADS,
            queues=(EMBED_QUEUE,),
        )
        limit = spec.max_rss_mb and max(spec.max_rss_mb, GPU_WORKER_MIN_RSS_MB)
        return replace(spec, lexical_threads=0, max_rss_mb=limit)

    def child_command(self) -> list[str]:
        command = [sys.executable, "-m", "workers.child", "--actors", self.actors]
        command += ["--threads", str(self.threads)]
        command += ["--lexical-threads", str(self.lexical_threads)]
        command += ["--embed-nice", str(self.embed_nice)]
        command += ["--nice", str(self.nice)]
        command += ["--max-messages", str(self.max_messages)]
        command += ["--max-rss-mb", str(self.max_rss_mb)]
        if self.queues:
            command += ["--queues", *self.queues]
        return command


def backoff_seconds(recent_crashes: int) -> float:
    """Delay before replacing a crashed child, given the crashes in the window so far."""
    if recent_crashes <= 0:
        return 0.0
    return min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (recent_crashes - 1))


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec function that makes the kernel SIGTERM a child when the arbiter dies."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return preexec


@dataclass(slots=True)
class _Slot:
    index: int
    process: subprocess.Popen[bytes] | None = None
    start_after: float = 0.0
    # Read end of the pipe on which the child says it is consuming.
    ready_fd: int | None = None
    ready: bool = False

    def check_ready(self) -> bool:
        if not self.ready and self.ready_fd is not None:
            with contextlib.suppress(BlockingIOError):
                self.ready = bool(os.read(self.ready_fd, 1))
        return self.ready

    def close_pipe(self) -> None:
        if self.ready_fd is not None:
            os.close(self.ready_fd)
            self.ready_fd = None


@dataclass
class WorkerPool:
    """The arbiter. ``run()`` blocks until the pool is stopped; returns the exit code."""

    spec: PoolSpec
    env: Mapping[str, str] | None = None
    parent_pid: int | None = None
    log_name: str = "the worker log (stderr)"
    on_child_death: Callable[[int], None] | None = None
    # Called for each child the pool stopped itself: a child that could not write (a
    # full disk) leaves its heartbeat behind, and a stale heartbeat reads as a live
    # worker, so the next `rifflux index` would wait for it instead of starting a pool.
    on_child_stopped: Callable[[int], None] | None = None
    boot_failures: deque[float] = field(default_factory=deque)
    stopping: bool = False

    def __post_init__(self) -> None:
        self.slots = [_Slot(i) for i in range(self.spec.processes)]
        self._preexec = _die_with_parent()
        self.restarts = 0

    def child_pids(self) -> list[int]:
        return [s.process.pid for s in self.slots if s.process and s.process.poll() is None]

    def request_stop(self, signum: int = 0, frame: FrameType | None = None) -> None:
        self.stopping = True

    def run(self) -> int:
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        previous = {signum: signal.signal(signum, self.request_stop) for signum in handled}
        try:
            # The children first: the arbiter's first log line imports structlog.
            started = self._start_due()
            log.info("pool.starting", processes=self.spec.processes, queues=list(self.spec.queues))
            self._log_started(started)
            while not self.stopping:
                if self.parent_pid is not None and os.getppid() != self.parent_pid:
                    log.warning("pool.parent_gone", parent=self.parent_pid)
                    break
                failure = self._reap()
                if failure is not None:
                    print(f"rifflux: error: {failure}", file=sys.stderr, flush=True)
                    return EXIT_CRASH_LOOP
                self._log_started(self._start_due())
                time.sleep(POLL_SECONDS)
            return 0
        finally:
            self._stop_children()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            log.info("pool.stopped", restarts=self.restarts)

    def _reap(self) -> str | None:
        """Handle dead children; a message if the pool must give up (a crash loop)."""
        now = time.monotonic()
        for slot in self.slots:
            process = slot.process
            if process is None or process.poll() is None:
                continue
            slot.process = None
            booted = slot.check_ready()
            slot.close_pipe()
            self.restarts += 1
            code = process.returncode
            if self.on_child_death is not None:
                try:
                    self.on_child_death(process.pid)
                except Exception:
                    log.warning("pool.cleanup_failed", pid=process.pid, exc_info=True)
            if code == EXIT_RECYCLE:
                log.info("pool.child_recycled", pid=process.pid, slot=slot.index)
                slot.start_after = now
                continue
            how = describe_exit(code)
            log.warning("pool.child_died", pid=process.pid, slot=slot.index, how=how, booted=booted)
            if booted:
                # Killed while working (OOM, kill -9): replace it soon. A message that
                # kills every worker is dead-lettered by the broker's delivery limit.
                slot.start_after = now + BACKOFF_BASE_SECONDS
                continue
            while self.boot_failures and now - self.boot_failures[0] > CRASH_WINDOW_SECONDS:
                self.boot_failures.popleft()
            self.boot_failures.append(now)
            if len(self.boot_failures) > MAX_CRASHES:
                return (
                    f"worker processes failed to start {len(self.boot_failures)} times within "
                    f"{CRASH_WINDOW_SECONDS:.0f} s (last: PID {process.pid} {how}); "
                    f"the pool stopped; see {self.log_name}"
                )
            slot.start_after = now + backoff_seconds(len(self.boot_failures))
        return None

    def _start_due(self) -> list[_Slot]:
        """Start a child in every empty slot whose time has come; the slots started."""
        started = []
        now = time.monotonic()
        for slot in self.slots:
            if slot.process is not None:
                slot.check_ready()
                continue
            if now < slot.start_after:
                continue
            read_fd, write_fd = os.pipe()
            os.set_blocking(read_fd, False)
            try:
                slot.process = subprocess.Popen(
                    [*self.spec.child_command(), "--ready-fd", str(write_fd)],
                    env=dict(self.env) if self.env is not None else None,
                    stdin=subprocess.DEVNULL,
                    pass_fds=(write_fd,),
                    # Safe here: the arbiter runs no other threads while it forks.
                    preexec_fn=self._preexec,
                )
            finally:
                os.close(write_fd)
            slot.ready_fd, slot.ready = read_fd, False
            started.append(slot)
        return started

    def _log_started(self, slots: Sequence[_Slot]) -> None:
        for slot in slots:
            if slot.process is not None:
                log.info("pool.child_started", pid=slot.process.pid, slot=slot.index)

    def _stop_children(self) -> None:
        running = [s.process for s in self.slots if s.process and s.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("pool.child_killed", pid=process.pid)
                process.kill()
                process.wait()
            if self.on_child_stopped is not None:
                try:
                    self.on_child_stopped(process.pid)
                except Exception:
                    log.warning("pool.cleanup_failed", pid=process.pid, exc_info=True)
        for slot in self.slots:
            slot.process = None
            slot.close_pipe()


def forget_dead_child(settings: Settings) -> Callable[[int], None]:
    """A death hook: hand back the dead child's SQLite leases and drop its heartbeats."""
    hostname = socket.gethostname()

    def forget(pid: int) -> None:
        from rifflux.queue.brokers import make_broker
        from rifflux.queue.presence import presence_store_for
        from rifflux.queue.sqlite_broker import SQLiteBroker

        broker = make_broker(settings.resolved_broker_url)
        try:
            if isinstance(broker, SQLiteBroker):
                broker.release_process(hostname, pid)
            presence_store_for(broker, settings).remove_process(hostname, pid)
        finally:
            broker.close()

    return forget


def run_pool(
    settings: Settings,
    spec: PoolSpec,
    *,
    env: Mapping[str, str] | None = None,
    parent_pid: int | None = None,
    log_name: str = "the worker log (stderr)",
) -> int:
    forget = forget_dead_child(settings)
    pool = WorkerPool(
        spec,
        env=env,
        parent_pid=parent_pid,
        log_name=log_name,
        on_child_death=forget,
        on_child_stopped=forget,
    )
    return pool.run()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.pool")
    parser.add_argument("--processes", type=int)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--queues", nargs="*", default=[])
    parser.add_argument("--parent-pid", type=int)
    parser.add_argument("--log-name", default="the worker log (stderr)")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    log.json_level = settings.log_level
    if args.parent_pid is not None and os.getppid() != args.parent_pid:
        return 0
    spec = PoolSpec.from_settings(
        settings, processes=args.processes, threads=args.threads, queues=args.queues
    )
    return run_pool(settings, spec, parent_pid=args.parent_pid, log_name=args.log_name)


if __name__ == "__main__":
    sys.exit(main())
