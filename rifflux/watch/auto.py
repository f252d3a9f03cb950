"""Auto-reindex on search: at most one background incremental job per interval.

The search that triggers it never waits: the job is submitted from a short-lived
thread, and a job already queued or running for the same roots is not duplicated.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog

from rifflux.watch.coalesce import JobCoalescer, JobQueue

log = structlog.get_logger(__name__)


class AutoReindexer:
    def __init__(
        self,
        queue: JobQueue,
        roots: Sequence[Path],
        min_interval_seconds: float,
        *,
        after_check: Callable[[], None] | None = None,
    ) -> None:
        """``after_check``: run after each check in its thread (the server gives the
        unfinished jobs a consumer there: a job submitted here waits for none)."""
        self.coalescer = JobCoalescer(queue, roots)
        self.after_check = after_check
        self.min_interval_seconds = min_interval_seconds
        self._last: float | None = None
        self._lock = threading.Lock()

    def maybe_trigger(self) -> bool:
        """Start a background job if the interval has passed; True if one was started."""
        now = time.monotonic()
        with self._lock:
            if self._last is not None and now - self._last < self.min_interval_seconds:
                return False
            self._last = now
        threading.Thread(target=self._submit, name="rifflux-auto-reindex", daemon=True).start()
        return True

    def _submit(self) -> None:
        try:
            self.coalescer.tick()
            self.coalescer.changed()
        except Exception:
            log.warning("auto_reindex.failed", exc_info=True)
        if self.after_check is not None:
            self.after_check()
