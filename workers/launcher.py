"""Starting a local worker pool for a front process: ``python -m workers.pool`` as a
child process, its output piped back and written to ``workers.log``.

The front process's job runner (:mod:`rifflux.reindex.runner`) never starts a process
itself: it is given :func:`launch_local_pool` (a
:data:`~rifflux.reindex.runner.Launcher`) by whoever may start workers (the entry point
:mod:`rifflux.reindex`), so the dependency of the front process on this package is
visible to the layer check, and a runner built without a launcher is testable without
spawning anything.

Invariants kept from the client it came from:

- The pool stops when its parent is gone, even after ``kill -9`` (``--parent-pid``).
- Its output comes back through a pipe read by one daemon thread
  (:class:`~rifflux.queue.pool_output.PoolOutput`), which writes ``workers.log``
  (rotated past ``RIFFLUX_LOG_MAX_BYTES``) and keeps the write faults the workers
  announce, so a waiting client hears of them even when no file can be written.
- ``stop()`` sends SIGTERM, gives in-flight messages :data:`POOL_STOP_SECONDS`, then
  kills; the output drains for :data:`POOL_OUTPUT_DRAIN_SECONDS`.
- ``owns(worker)`` tells this pool's heartbeats from those of workers started beside
  the front process (the Procfile's): a worker of this host whose process is a child of
  the pool's. Where that cannot be read (no ``/proc``, the process gone) the worker
  counts as the pool's own, so a pool is never stopped on account of its own workers.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from rifflux.config import Settings, usable_cpus
from rifflux.logs import RotatingFile
from rifflux.queue.pool_output import PoolOutput

log = structlog.get_logger(__name__)

# How long a local pool gets to finish in-flight messages after SIGTERM (its own
# children get 30 s; this leaves room for them).
POOL_STOP_SECONDS = 40.0
# How long a stopped pool's output gets to drain into workers.log.
POOL_OUTPUT_DRAIN_SECONDS = 5.0


@dataclass
class LocalPool:
    """Worker processes this front process started, stopped when it is done with them;
    their output is pumped into ``log_path`` by ``output``."""

    process: subprocess.Popen[bytes]
    log_path: Path
    output: PoolOutput

    def alive(self) -> bool:
        return self.process.poll() is None

    def fault_for(self, job_id: str, *, created_at: float) -> str | None:
        """A write fault the pool's workers announced for the job (see ``PoolOutput``)."""
        return self.output.fault_for(job_id, created_at=created_at)

    def owns(self, worker: Mapping[str, Any]) -> bool:
        """Whether a live worker's heartbeat is one of this pool's children (see the
        module docstring)."""
        if worker.get("hostname") != socket.gethostname():
            return False
        parent = parent_pid(int(worker["pid"]))
        return parent is None or parent == self.process.pid

    def stop(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=POOL_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.output.join(POOL_OUTPUT_DRAIN_SECONDS)
        if self.process.stdout is not None:
            self.process.stdout.close()


def parent_pid(pid: int) -> int | None:
    """The parent of process ``pid`` (Linux ``/proc``), or None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            return int(stat.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def worker_command(
    processes: int,
    threads: int = 1,
    queues: Sequence[str] = (),
    *,
    parent_pid: int | None = None,
    log_name: str | None = None,
) -> list[str]:
    """The command line of a supervised worker pool (``workers.pool``)."""
    command = [sys.executable, "-m", "workers.pool", "--processes", str(processes)]
    command += ["--threads", str(threads)]
    if queues:
        command += ["--queues", *queues]
    if parent_pid is not None:
        command += ["--parent-pid", str(parent_pid)]
    if log_name is not None:
        command += ["--log-name", log_name]
    return command


def onnx_threads_per_worker(settings: Settings, processes: int) -> int:
    """ONNX intra-op threads for each of ``processes`` workers: the cores split evenly.

    Measured on 2 cores: one single-threaded ONNX
    session per core beats one process using both cores.
    """
    if settings.onnx_threads:
        return settings.onnx_threads
    return max(1, usable_cpus() // max(1, processes))


def worker_environment(settings: Settings, processes: int | None = None) -> dict[str, str]:
    """The environment that points workers at this front process's index and broker.

    A job's row-shaping settings travel in its JobSpec, not here; the embedding
    backend is passed so that the pool's embedder has the label the jobs expect.
    """
    env = dict(os.environ)
    env["RIFFLUX_DB_PATH"] = str(settings.db_path.resolve())
    env["RIFFLUX_BROKER_URL"] = settings.resolved_broker_url
    env["RIFFLUX_EMBEDDING_BACKEND"] = settings.embedding_backend
    env["RIFFLUX_EMBEDDING_DEVICE"] = settings.embedding_device
    count = processes or settings.workers
    env["RIFFLUX_ONNX_THREADS"] = str(onnx_threads_per_worker(settings, count))
    return env


def launch_local_pool(settings: Settings, processes: int) -> LocalPool:
    """Start a supervised pool of ``processes`` workers for all queues of ``settings``'
    index, logging to ``workers.log`` beside the index."""
    db_path = settings.db_path.resolve()
    log_path = db_path.parent / "workers.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        # The pool stops when this process is gone, even after kill -9.
        worker_command(processes, parent_pid=os.getpid(), log_name=str(log_path)),
        env=worker_environment(settings, processes),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    log_file = RotatingFile(log_path, settings.log_max_bytes)
    output = PoolOutput(process.stdout, log_file).start()
    log.info("workers.local_pool_started", processes=processes, pid=process.pid, log=str(log_path))
    return LocalPool(process, log_path, output)
