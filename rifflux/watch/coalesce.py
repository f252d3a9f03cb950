"""Coalesce change notifications into reindex jobs without losing an edit.

One job per set of roots at a time: a change while a job is still queued is picked up by
that job's scan (the planner scans after it starts running), so nothing is enqueued; a
change while a job is running marks the roots dirty, and exactly one follow-up job is
submitted once that job finishes. A burst of edits therefore costs at most two jobs.

"One job at a time" holds across processes: with no job of its own, a coalescer adopts
the unfinished job of the same roots and settings that another process submitted (the
HTTP workers of one server each run auto-reindex-on-search; a second server may watch
the same roots), so N processes noticing one change queue one job, not N.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import structlog

from rifflux.store.jobs import JobRecord

log = structlog.get_logger(__name__)


class JobQueue(Protocol):
    def submit(
        self, paths: Sequence[Path | str], *, force: bool = False, prune_missing: bool = True
    ) -> str: ...

    def job(self, job_id: str) -> JobRecord | None: ...

    def unfinished_job_for(self, paths: Sequence[Path | str]) -> str | None: ...


class JobCoalescer:
    """Turns "something changed under these roots" into the fewest jobs that cover it."""

    def __init__(self, queue: JobQueue, roots: Sequence[Path]) -> None:
        self.queue = queue
        self.roots = list(roots)
        self.active_job: str | None = None
        self.dirty = False
        self.jobs_submitted = 0
        self._lock = threading.Lock()

    def _active_state(self) -> str | None:
        """The state of the unfinished job that covers the roots: this coalescer's own,
        else one another process submitted (adopted); None when there is none."""
        state = self._state_of(self.active_job)
        if state is None:
            self.active_job = self.queue.unfinished_job_for(self.roots)
            state = self._state_of(self.active_job)
        if state is None:
            self.active_job = None
        return state

    def _state_of(self, job_id: str | None) -> str | None:
        record = self.queue.job(job_id) if job_id is not None else None
        return None if record is None or record.finished else record.state

    def changed(self) -> str | None:
        """Note a change; returns the id of a job submitted for it, if one was."""
        with self._lock:
            state = self._active_state()
            if state == "queued":
                return None
            if state == "running":
                self.dirty = True
                return None
            return self._submit()

    def tick(self) -> str | None:
        """Submit the follow-up job owed for changes seen during a finished job."""
        with self._lock:
            if self.dirty and self._active_state() is None:
                self.dirty = False
                return self._submit()
            return None

    @property
    def idle(self) -> bool:
        with self._lock:
            return not self.dirty and self._active_state() is None

    def _submit(self) -> str:
        self.active_job = self.queue.submit(self.roots)
        self.jobs_submitted += 1
        log.info("watch.job_submitted", job_id=self.active_job, roots=[str(r) for r in self.roots])
        return self.active_job
