"""A host-wide bound on the chunk steps running at once: one a core this process may use.

A chunk step (read, chunk and write a batch's rows) is CPU work on the index host, and
the embed units of its batch exist only once it commits. Run all at once by more
workers than cores, the steps share the CPU and finish together, late, while the
embedding threads wait; run in turn, the first batches commit first and their units keep
the pool embedding while the rest are chunked. Slots are ``flock`` locks on the files of
a folder beside the index (``<index>.slots``), so every worker process of the host
shares them and a process that dies releases its slot with its file descriptor.

Invariants:

* A slot is held only while a chunk step runs; its holder may then wait for the index's
  write lock, but no holder of that lock ever waits for a slot, so no wait is circular.
* Each acquisition opens its own file description, so threads of one process exclude
  each other too.
* Where the folder cannot be made (a read-only index folder fails the step anyway), the
  step runs without a slot.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

from rifflux.store.own_files import SLOTS_SUFFIX

log = structlog.get_logger(__name__)


def slot_count() -> int:
    """Chunk steps that may run at once on this host: the cores this process may use."""
    return max(1, len(os.sched_getaffinity(0)))


@contextmanager
def chunk_slot(db_path: str, slots: int | None = None) -> Iterator[None]:
    """Hold one of ``slots`` (default :func:`slot_count`) slots of the index at
    ``db_path`` for the body: a free one if any, else wait for this process's own."""
    count = slot_count() if slots is None else max(1, slots)
    folder = Path(f"{db_path}{SLOTS_SUFFIX}")
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        log.warning("worker.no_chunk_slots", folder=str(folder), error=str(exc))
        yield
        return
    first = os.getpid() % count
    order = [(first + n) % count for n in range(count)]
    fd = -1
    for n in order:
        fd = os.open(folder / f"slot-{n}", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            os.close(fd)
            fd = -1
    if fd < 0:
        fd = os.open(folder / f"slot-{first}", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(fd)  # releases the lock
