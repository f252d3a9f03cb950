"""The worker actors with a clock: ``workers.actors`` plus one middleware that appends a
line per processed message to ``$TIMED_ACTORS_LOG`` (used by ``worker_overhead.py``).

Each line: ``pid actor start end thread_cpu process_cpu`` (epoch seconds, CPU seconds);
one ``pid BOOT t t process_cpu 0`` line when each dramatiq Worker of the process has
started. Run as ``RIFFLUX_WORKER_ACTORS=timed_actors`` with this folder on PYTHONPATH.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware

import workers.actors  # noqa: F401  # declares the actors on the broker

LOG = os.environ.get("TIMED_ACTORS_LOG", "timed_actors.log")
_lock = threading.Lock()


def _write(line: str) -> None:
    with _lock, open(LOG, "a", encoding="ascii") as out:
        out.write(line + "\n")


class Clock(Middleware):
    def __init__(self) -> None:
        self.started: dict[str, tuple[float, float]] = {}

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        now = time.time()
        _write(f"{os.getpid()} BOOT {now:.4f} {now:.4f} {time.process_time():.4f} 0")

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        self.started[message.message_id] = (time.time(), time.thread_time())

    def after_process_message(
        self, broker: dramatiq.Broker, message: Any, *, result: Any = None, exception: Any = None
    ) -> None:
        start, cpu = self.started.pop(message.message_id, (time.time(), time.thread_time()))
        _write(
            f"{os.getpid()} {message.actor_name} {start:.4f} {time.time():.4f} "
            f"{time.thread_time() - cpu:.4f} {time.process_time():.4f}"
        )

    after_skip_message = after_process_message


dramatiq.get_broker().add_middleware(Clock())
