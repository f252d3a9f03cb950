"""A local worker pool's output, read by the process that started the pool.

``workers.launcher.launch_local_pool`` gives the pool a pipe for stdout and stderr instead of the
log file; :class:`PoolOutput` (one daemon thread) reads it line by line and

- writes each line to ``workers.log`` through :class:`rifflux.logs.RotatingFile`
  (``RIFFLUX_LOG_MAX_BYTES``, then ``workers.log.1`` …): the pool and its children never
  write the file themselves, so one process owns its size;
- cuts a line longer than :data:`MAX_LINE_BYTES` (the pool's own logging keeps lines
  short; this bounds what a stray ``print`` can do);
- keeps the write faults the workers announce (``*.write_failed`` events with a
  ``reason``, see :mod:`rifflux.store.faults`): the client waiting for a job learns that
  its job cannot be written even when neither the job record nor ``workers.log`` can
  be (a full disk drops the line from the file, not from the pipe). A fault without a
  job (the queue could not be written) counts for the jobs created before it was read:
  a later job, after the disk was freed, is not failed by it; one that meets the fault
  again hears it again (the broker repeats it every few seconds).

It never stops reading while the pool runs: a thread that stopped would fill the pipe
and block every worker on its next log line. A line it cannot write is dropped and
counted (:class:`RotatingFile`).
"""

from __future__ import annotations

import json
import threading
import time
from typing import IO

from rifflux.logs import RotatingFile
from rifflux.store.faults import is_write_fault_reason

MAX_LINE_BYTES = 16_384
"""A longer output line is cut to this many bytes in the log."""
FAULT_MARKER = b'.write_failed"'
"""Bytes every write-fault event line holds (its ``event`` name's end), so that only
those lines are parsed."""


def parse_fault(line: bytes) -> tuple[str | None, str] | None:
    """(job id or None for every job, reason) if ``line`` is a write-fault event."""
    if FAULT_MARKER not in line:
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict) or not str(event.get("event", "")).endswith(".write_failed"):
        return None
    reason = event.get("reason")
    if not isinstance(reason, str) or not is_write_fault_reason(reason):
        return None
    job_id = event.get("job_id")
    return (job_id if isinstance(job_id, str) else None), reason


class PoolOutput:
    """Pumps a pool's output into its rotating log and notes announced write faults."""

    def __init__(self, stream: IO[bytes], log: RotatingFile) -> None:
        self.stream = stream
        self.log = log
        # job id (None: every job) → (reason, when it was read).
        self._faults: dict[str | None, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, name="rifflux-pool-output", daemon=True)

    def start(self) -> PoolOutput:
        self._thread.start()
        return self

    def fault_for(self, job_id: str, *, created_at: float = 0.0) -> str | None:
        """The write fault a worker announced for ``job_id``, or for every job (the queue
        itself could not be written) since the job was created at ``created_at`` (epoch
        seconds: a fault that was fixed before is not this job's), else None."""
        with self._lock:
            own = self._faults.get(job_id)
            shared = self._faults.get(None)
        if own is not None:
            return own[0]
        if shared is not None and shared[1] >= created_at:
            return shared[0]
        return None

    def _lines(self) -> list[bytes] | None:
        """The next whole line (cut to MAX_LINE_BYTES) as parts; None at the end."""
        first = self.stream.readline(MAX_LINE_BYTES)
        if not first:
            return None
        if first.endswith(b"\n"):
            return [first]
        cut = 0
        while True:
            rest = self.stream.readline(MAX_LINE_BYTES)
            cut += len(rest.rstrip(b"\n"))
            if not rest or rest.endswith(b"\n"):
                break
        return [first, f" … [{cut} bytes cut]\n".encode()]

    def _take(self, parts: list[bytes]) -> None:
        self.log.write(b"".join(parts))
        fault = parse_fault(parts[0]) if len(parts) == 1 else None
        if fault is not None:
            with self._lock:
                self._faults[fault[0]] = (fault[1], time.time())

    def _pump(self) -> None:
        try:
            while (parts := self._lines()) is not None:
                try:
                    self._take(parts)
                except Exception:  # Whatever a line holds, keep reading.
                    continue
        except (OSError, ValueError):
            pass  # The pipe closed under us: the pool is gone.
        finally:
            self.log.close()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
