"""CPU used by idle consumers of the SQLite broker (it must not busy-loop).

    python -m benchmarks.broker_idle_cpu --seconds 30

Each mode runs for ``--seconds`` on an empty queue in a fresh broker file and reports
this process's CPU time (all threads) divided by the wall time:

- ``consumer``: one consumer iterated the way Dramatiq's consumer thread does it
  (``next()`` with a 1 s timeout, again and again);
- ``worker``: a whole ``dramatiq.Worker`` (8 worker threads, default middleware plus
  ``PresenceMiddleware``) on the SQLite broker, consuming one queue and its delay queue;
- ``stub-worker``: the same Worker on Dramatiq's in-memory StubBroker, the floor set by
  Dramatiq's own threads.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import dramatiq
from dramatiq.brokers.stub import StubBroker

from benchmarks.harness import emit, emit_machine
from rifflux.queue.presence import PresenceMiddleware, SQLitePresence
from rifflux.queue.sqlite_broker import MAX_POLL_SECONDS, SQLiteBroker

MODES = ("consumer", "worker", "stub-worker")
QUEUE = "idle"


def measure(seconds: float, run) -> tuple[float, float]:
    """CPU seconds and wall seconds spent while ``run(seconds)`` idles."""
    cpu_start, wall_start = time.process_time(), time.monotonic()
    run(seconds)
    return time.process_time() - cpu_start, time.monotonic() - wall_start


def idle_consumer(directory: Path):
    def run(seconds: float) -> None:
        broker = SQLiteBroker(directory / "consumer.db", middleware=[])
        broker.declare_queue(QUEUE)
        consumer = broker.consume(QUEUE, prefetch=16, timeout=1000)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert next(consumer) is None
        consumer.close()
        broker.close()

    return run


def sqlite_worker_broker(path: Path):
    def build() -> SQLiteBroker:
        broker = SQLiteBroker(path)
        broker.add_middleware(PresenceMiddleware(SQLitePresence(path)))
        return broker

    return build


def idle_worker(broker_factory):
    def run(seconds: float) -> None:
        broker = broker_factory()
        dramatiq.set_broker(broker)
        broker.declare_queue(QUEUE)
        worker = dramatiq.Worker(broker, worker_threads=8)
        worker.start()
        time.sleep(seconds)
        worker.stop()
        broker.close()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="idle time per mode")
    parser.add_argument("--modes", default=",".join(MODES), help=",".join(MODES))
    args = parser.parse_args()
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown modes {unknown}; choose from {', '.join(MODES)}")

    emit_machine(
        dramatiq=dramatiq.__version__, max_poll_seconds=MAX_POLL_SECONDS, seconds=args.seconds
    )
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        runs = {
            "consumer": idle_consumer(directory),
            "worker": idle_worker(sqlite_worker_broker(directory / "worker.db")),
            "stub-worker": idle_worker(StubBroker),
        }
        for mode in modes:
            cpu, wall = measure(args.seconds, runs[mode])
            emit(
                "broker_idle_cpu",
                mode=mode,
                cpu_s=round(cpu, 3),
                wall_s=round(wall, 2),
                percent_of_one_core=round(100 * cpu / wall, 3),
            )


if __name__ == "__main__":
    main()
