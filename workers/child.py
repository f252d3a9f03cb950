"""One supervised worker process: a Dramatiq ``Worker`` that stops when told, when its
parent dies, or when it should be recycled.

Run by :mod:`workers.pool` as ``python -m workers.child``; never on its own. The
process imports the actors module (which builds the broker from ``RIFFLUX_*``), emits
Dramatiq's ``process_boot`` (the time-limit middleware starts its timer thread there),
and runs its ``dramatiq.Worker`` (two with ``--lexical-threads``: the embed queue apart
from the index-host queues, see :func:`split_queues`) until one of:

- SIGTERM, SIGINT or SIGHUP: the worker finishes the messages it is running, then the
  process exits 0;
- its parent (the pool) is gone, even after ``kill -9``: the kernel sends SIGTERM
  (``PR_SET_PDEATHSIG``, set by the pool) and a watch on ``getppid`` backs it up;
- it has processed ``RIFFLUX_WORKER_MAX_MESSAGES`` messages or its resident memory has
  passed ``RIFFLUX_WORKER_MAX_RSS_MB``: checked after each message, so a process is
  never recycled in the middle of a write; it exits :data:`EXIT_RECYCLE` and the pool
  starts a fresh one at once.
"""

from __future__ import annotations

# First, before numpy or structlog: see workers.bootstrap.
import workers.bootstrap  # noqa: F401

# isort: split
import argparse
import importlib
import logging
import os
import resource
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from types import FrameType, ModuleType
from typing import Any

import dramatiq
import structlog
from dramatiq.middleware import Middleware

from rifflux.queue.names import EMBED_QUEUE
from workers.pool import EXIT_RECYCLE

log = structlog.get_logger(__name__)

PARENT_CHECK_SECONDS = 1.0
"""How often the child checks that its pool is still its parent."""
STOP_TIMEOUT_MS = 25_000
"""How long in-flight messages get to finish on a graceful stop (the pool waits 30 s)."""


def resident_bytes() -> int:
    """This process's resident set size now (Linux ``/proc``; peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class RecycleMiddleware(Middleware):
    """Asks the process to stop after ``max_messages`` or past ``max_rss_bytes`` (0: off)."""

    def __init__(self, stop: threading.Event, *, max_messages: int, max_rss_bytes: int) -> None:
        self.stop = stop
        self.max_messages = max_messages
        self.max_rss_bytes = max_rss_bytes
        self.processed = 0
        self.reason: str | None = None
        self._lock = threading.Lock()

    def after_process_message(
        self, broker: dramatiq.Broker, message: Any, *, result: Any = None, exception: Any = None
    ) -> None:
        self._count()

    def after_skip_message(self, broker: dramatiq.Broker, message: Any) -> None:
        self._count()

    def _count(self) -> None:
        with self._lock:
            self.processed += 1
            if self.reason is not None:
                return
            if self.max_messages and self.processed >= self.max_messages:
                self.reason = f"processed {self.processed} messages"
            elif self.max_rss_bytes and (rss := resident_bytes()) > self.max_rss_bytes:
                self.reason = f"resident memory {rss // 2**20} MB"
            else:
                return
        log.info("worker.recycling", reason=self.reason, processed=self.processed)
        self.stop.set()


PEAK_STEP_BYTES = 16 * 2**20
"""Report the process's peak resident memory each time it has grown by this much."""


def memory_status() -> dict[str, int]:
    """This process's peak, anonymous and file-backed resident memory now, in MiB
    (Linux ``/proc/self/status``; empty elsewhere)."""
    wanted = {"VmHWM:": "peak_mib", "RssAnon:": "anon_mib", "RssFile:": "file_mib"}
    found: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                name, _, rest = line.partition("\t")
                if name in wanted:
                    found[wanted[name]] = int(rest.split()[0]) // 1024
    except (OSError, ValueError, IndexError):
        return {}
    return found


def peak_resident_bytes() -> int:
    """This process's peak resident memory so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakMemoryMiddleware(Middleware):
    """Logs ``worker.peak_rss`` with the message's actor whenever the process's peak
    resident memory has grown by :data:`PEAK_STEP_BYTES` since the last report, so a
    worker's peak is traced to the step that made it (one ``getrusage`` a message)."""

    def __init__(
        self, step_bytes: int = PEAK_STEP_BYTES, peak_bytes: Callable[[], int] | None = None
    ) -> None:
        self.step_bytes = step_bytes
        self.peak_bytes = peak_bytes or peak_resident_bytes
        self.reported = 0
        self._lock = threading.Lock()

    def after_process_message(
        self, broker: dramatiq.Broker, message: Any, *, result: Any = None, exception: Any = None
    ) -> None:
        peak = self.peak_bytes()
        with self._lock:
            if peak < self.reported + self.step_bytes:
                return
            self.reported = peak
        log.info("worker.peak_rss", actor=message.actor_name, pid=os.getpid(), **memory_status())


class EmbedPriority(Middleware):
    """Lowers the CPU priority of the threads of the given embed-only workers, once, as
    they boot; the ONNX threads they start later inherit it (Linux priorities are per
    thread). Index-host threads keep theirs, so they win the CPU whenever both run."""

    def __init__(self, workers: Sequence[dramatiq.Worker], nice: int) -> None:
        self.workers = list(workers)
        self.nice = nice

    def after_worker_thread_boot(self, broker: dramatiq.Broker, thread: Any) -> None:
        if not any(thread.consumers is w.consumers for w in self.workers):
            return
        tid = threading.get_native_id()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + self.nice)
        except (OSError, AttributeError):
            log.warning("worker.embed_priority_unchanged", exc_info=True)


class _SecondWorkerMiddleware(logging.Filter):
    """Drops Dramatiq's "You're adding a middleware of the same type twice" for the
    ``_WorkerMiddleware`` that every ``dramatiq.Worker.start`` adds to its broker.

    The cause is by design: a process that splits its queues (embed vs. plan and write)
    runs one Worker per split on one broker, and each Worker needs its own middleware to
    get consumers for the queues declared later; Dramatiq's duplicate check cannot tell
    that from a middleware added twice by mistake. Any other duplicate still warns.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        duplicate = "same type twice" in str(record.msg)
        kinds = (
            {type(arg).__name__ for arg in record.args or ()}
            if isinstance(record.args, tuple)
            else set()
        )
        return not (duplicate and "_WorkerMiddleware" in kinds)


def quiet_second_worker_middleware(broker: dramatiq.Broker) -> None:
    """Install :class:`_SecondWorkerMiddleware` on the broker's logger (once)."""
    logger = broker.logger
    if not any(isinstance(f, _SecondWorkerMiddleware) for f in logger.filters):
        logger.addFilter(_SecondWorkerMiddleware())


def split_queues(
    wanted: Sequence[str], declared: Iterable[str], threads: int, lexical_threads: int
) -> list[tuple[tuple[str, ...], int]]:
    """(queues, threads) of each ``dramatiq.Worker`` this process runs.

    With ``lexical_threads`` > 0 and both the embed queue and an index-host queue to
    consume, the embed queue gets a worker of its own (``threads``) and the other queues
    one with ``lexical_threads``: a batch's chunk-and-write step (which makes it
    keyword-searchable) never waits behind a long embedding in the same process. Else
    one worker consumes every queue (``()``: all declared ones).
    """
    queues = tuple(wanted) or tuple(sorted(declared))
    others = tuple(q for q in queues if q != EMBED_QUEUE)
    if lexical_threads <= 0 or EMBED_QUEUE not in queues or not others:
        return [(tuple(wanted), threads)]
    return [((EMBED_QUEUE,), threads), (others, lexical_threads)]


def threads_prefetch(threads: int) -> int:
    """Messages a ``dramatiq.Worker`` of ``threads`` threads leases from each queue: one a
    thread (Dramatiq's default is two). A process then holds no message it has no free
    thread for, so a waiting embed unit stays in the queue for whichever worker is free
    first instead of waiting behind a busy one's running unit (``rifflux.index.units``)."""
    return max(1, threads)


def load_embedder_at_boot(actors: ModuleType) -> None:
    """Load the process's embedder (``actors.process_embedder``, when the module has one)
    in a thread beside the consumers, so a job's first embed does not wait for the model
    while plan and chunk steps run meanwhile; the first embed waits for the load."""
    load = getattr(actors, "process_embedder", None)
    if not callable(load):
        return

    def run() -> None:
        try:
            load()
        except Exception as exc:  # The first embed raises it again, as a job error.
            log.warning("worker.embedder_not_loaded", error=f"{type(exc).__name__}: {exc}")

    threading.Thread(target=run, name="rifflux-embedder-load", daemon=True).start()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers.child")
    parser.add_argument("--actors", default="workers.actors")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lexical-threads", type=int, default=0)
    # rifflux.config.EMBED_NICE: embedding saturates every core it gets; at the same priority,
    # chunking and writing keyword-searchable rows got a share of the CPU and lexical
    # search of a fresh corpus waited 2.3x longer.
    parser.add_argument("--embed-nice", type=int, default=0)
    parser.add_argument(
        "--nice", type=int, default=0, help="nice levels below the pool (RIFFLUX_WORKER_NICE)"
    )
    parser.add_argument("--queues", nargs="*", default=[])
    parser.add_argument("--max-messages", type=int, default=0)
    parser.add_argument("--max-rss-mb", type=int, default=0)
    parser.add_argument("--ready-fd", type=int, help="write one byte here once consuming")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.nice > 0:
        # Below the pool, so below the server that started it: a search preempts indexing.
        os.nice(args.nice)
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, request_stop)
    parent = os.getppid()

    actors = importlib.import_module(args.actors)
    broker = dramatiq.get_broker()
    broker.emit_after("process_boot")
    recycle = RecycleMiddleware(
        stop, max_messages=args.max_messages, max_rss_bytes=args.max_rss_mb * 2**20
    )
    broker.add_middleware(recycle)
    broker.add_middleware(PeakMemoryMiddleware())
    split = split_queues(
        args.queues, broker.get_declared_queues(), args.threads, args.lexical_threads
    )
    workers = [
        dramatiq.Worker(broker, queues=set(queues) or None, worker_threads=threads)
        for queues, threads in split
    ]
    for worker, (_queues, threads) in zip(workers, split, strict=True):
        worker.queue_prefetch = threads_prefetch(threads)
    quiet_second_worker_middleware(broker)
    if len(workers) > 1 and args.embed_nice > 0:
        broker.add_middleware(EmbedPriority([workers[0]], args.embed_nice))
    for worker in workers:
        worker.start()
    if any(not queues or EMBED_QUEUE in queues for queues, _ in split):
        load_embedder_at_boot(actors)
    log.info("worker.consuming", pid=os.getpid(), queues=[list(q) for q, _ in split])
    if args.ready_fd is not None:
        os.write(args.ready_fd, b"1")
        os.close(args.ready_fd)
    while not stop.wait(PARENT_CHECK_SECONDS):
        if os.getppid() != parent:
            log.warning("worker.parent_gone", parent=parent)
            break
    # Stop every worker at once: one stopping after another would keep consuming while
    # the first finishes its message.
    stoppers = [
        threading.Thread(target=worker.stop, kwargs={"timeout": STOP_TIMEOUT_MS})
        for worker in workers
    ]
    for stopper in stoppers:
        stopper.start()
    for stopper in stoppers:
        stopper.join()
    broker.close()
    return EXIT_RECYCLE if recycle.reason is not None else 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Dramatiq's threads are stopped; skip interpreter teardown of leftover daemon threads.
    os._exit(code)
