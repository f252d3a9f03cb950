"""The worker module of ``benchmarks.core_scaling``: the real actors, traced, and with an
embedder whose per-text cost is wall time when the benchmark asks for one.

The benchmark starts its pools with ``RIFFLUX_WORKER_ACTORS=benchmarks.core_scaling_actors``
and these variables (the benchmark's own, read only here):

- ``CORE_SCALING_TRACE``: a directory; each worker process appends one line per actor
  call (``actor pid start end``) and one per index write transaction (``write pid start
  end``: from ``BEGIN IMMEDIATE`` granted to ``COMMIT`` done), epoch seconds, to
  ``trace-PID.txt`` there, one unbuffered ``write`` each (a child ends with ``os._exit``).
- ``CORE_SCALING_MS_PER_CHUNK``: embed with :class:`SimulatedEmbedder`, which sleeps that
  many milliseconds a text and returns the hash embedder's vectors, so the vector phase
  runs as a separate step as the ONNX one does (no inline embedding in the chunk step).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from rifflux.embed.hashing import HashEmbedder
from rifflux.store import connection
from workers import actors

TRACE_DIR = os.environ.get("CORE_SCALING_TRACE", "")
MS_PER_CHUNK = os.environ.get("CORE_SCALING_MS_PER_CHUNK", "")


class SimulatedEmbedder:
    """The hash embedder's vectors and label, at ``seconds_per_text`` of wall time each."""

    def __init__(self, dim: int, seconds_per_text: float) -> None:
        self._hash = HashEmbedder(dim)
        self.dim = dim
        self.label = self._hash.label
        self.seconds_per_text = seconds_per_text

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        time.sleep(self.seconds_per_text * len(texts))
        return self._hash.embed_batch(texts)


def _trace_line(kind: str, start: float, end: float) -> None:
    line = f"{kind} {os.getpid()} {start:.6f} {end:.6f}\n".encode()
    fd = os.open(
        os.path.join(TRACE_DIR, f"trace-{os.getpid()}.txt"),
        os.O_WRONLY | os.O_APPEND | os.O_CREAT,
        0o644,
    )
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _traced_actor(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def traced(*args: Any, **kwargs: Any) -> Any:
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            _trace_line(name, start, time.time())

    return traced


_real_transaction = connection.transaction


@contextmanager
def _traced_transaction(conn: Any, **options: Any) -> Iterator[Any]:
    outer = options.get("write", True) and not conn.in_transaction
    granted: float | None = None
    try:
        with _real_transaction(conn, **options) as inner:
            granted = time.time()  # BEGIN IMMEDIATE returned: the write lock is held.
            yield inner
    finally:
        if outer and granted is not None:
            _trace_line("write", granted, time.time())


def _install() -> None:
    if MS_PER_CHUNK:
        dim = actors.settings.hash_embedding_dim
        actors._embedder = SimulatedEmbedder(dim, float(MS_PER_CHUNK) / 1000)
        actors.inline_embedder = lambda: None  # type: ignore[assignment]
    if not TRACE_DIR:
        return
    for actor in (
        actors.plan_job,
        actors.chunk_batch,
        actors.embed_batch,
        actors.write_batch,
        actors.finalize_job,
    ):
        actor.fn = _traced_actor(actor.actor_name, actor.fn)
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if (
            name.startswith("rifflux.")
            and getattr(module, "transaction", None) is _real_transaction
        ):
            module.transaction = _traced_transaction  # type: ignore[attr-defined]


_install()
