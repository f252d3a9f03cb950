"""Coalesce change notifications into reindex jobs without losing an edit.

A change names the paths that changed (the watcher's events) or none (auto-reindex on
search, a watcher's catch-up after a start: "anything under the roots"). A job for
named paths is scoped to them: its plan looks at those paths only, so one edit costs
what it changed, not the corpus (:mod:`rifflux.index.planner`).

One job per set of roots at a time: a change while a job is still queued is picked up
by that job's scan when the job covers it (the planner scans after it starts running:
a job of the whole roots covers everything, a scoped one the paths at or under its
scope), so nothing is enqueued; any other change while a job is queued or running is
owed, and exactly one follow-up job, scoped to every path owed (or the whole roots when
a change named none or more than ``MAX_SCOPE_PATHS`` are owed), is submitted once that
job finishes. A burst of edits therefore costs at most two jobs.

"One job at a time" holds across processes: with no job of its own, a coalescer adopts
the unfinished job of the same roots and settings that another process submitted (the
HTTP workers of one server each run auto-reindex-on-search; a second server may watch
the same roots), so N processes noticing one change queue one job, not N. Only a job
of the whole roots is adopted (the settings compared include the scope), and it covers
every change.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

import structlog

from rifflux.errors import IndexLockedError
from rifflux.index.allowed import real_is_within
from rifflux.store.jobs import JobRecord

log = structlog.get_logger(__name__)

# More paths owed than this and the follow-up job scans the whole roots (a checkout
# or a mass rename touches many paths; walking them one at a time stops paying).
MAX_SCOPE_PATHS = 1_000


class JobQueue(Protocol):
    def submit(
        self,
        paths: Sequence[Path | str],
        *,
        force: bool = False,
        prune_missing: bool = True,
        scope: Sequence[Path | str] | None = None,
    ) -> str: ...

    def job(self, job_id: str) -> JobRecord | None: ...

    def unfinished_job_for(self, paths: Sequence[Path | str]) -> str | None: ...


class JobCoalescer:
    """Turns "these paths under the roots changed" into the fewest jobs that cover it."""

    def __init__(self, queue: JobQueue, roots: Sequence[Path]) -> None:
        self.queue = queue
        self.roots = list(roots)
        self.active_job: str | None = None
        # What the active job covers: absolute paths, or None for the whole roots.
        self.active_scope: frozenset[str] | None = None
        # Owed to a follow-up job: nothing (empty), these paths, or None (the whole roots).
        self.owed: set[str] | None = set()
        self.jobs_submitted = 0
        self._lock = threading.Lock()

    @property
    def dirty(self) -> bool:
        """True while a follow-up job is owed."""
        return self.owed is None or bool(self.owed)

    def _active_state(self) -> str | None:
        """The state of the unfinished job that covers the roots: this coalescer's own,
        else one another process submitted (adopted); None when there is none."""
        state = self._state_of(self.active_job)
        if state is None:
            self.active_job = self.queue.unfinished_job_for(self.roots)
            self.active_scope = None
            state = self._state_of(self.active_job)
        if state is None:
            self.active_job = None
        return state

    def _state_of(self, job_id: str | None) -> str | None:
        record = self.queue.job(job_id) if job_id is not None else None
        return None if record is None or record.finished else record.state

    def changed(self, paths: Iterable[Path | str] | None = None) -> str | None:
        """Note a change of ``paths`` (None: anything under the roots); returns the id of
        a job submitted for it, if one was."""
        named = None if paths is None else {os.path.abspath(p) for p in paths}
        with self._lock:
            state = self._active_state()
            if state == "queued" and _covers(self.active_scope, named):
                return None
            if state in ("queued", "running"):
                self._owe(named)
                return None
            return self._submit(named)

    def tick(self) -> str | None:
        """Submit the follow-up job owed for changes seen during a finished job."""
        with self._lock:
            if self.dirty and self._active_state() is None:
                owed, self.owed = self.owed, set()
                return self._submit(owed)
            return None

    @property
    def idle(self) -> bool:
        with self._lock:
            return not self.dirty and self._active_state() is None

    def _owe(self, named: set[str] | None) -> None:
        if named is None or self.owed is None:
            self.owed = None
            return
        self.owed |= named
        if len(self.owed) > MAX_SCOPE_PATHS:
            self.owed = None

    def _submit(self, named: set[str] | None) -> str | None:
        """Submit the job for ``named``; while another process holds the index's write
        lock, owe it instead (the next tick submits it), so no change is lost."""
        scope = None if named is None or len(named) > MAX_SCOPE_PATHS else sorted(named)
        try:
            self.active_job = self.queue.submit(self.roots, scope=scope)
        except IndexLockedError as exc:
            log.warning("watch.submit_postponed", reason=str(exc))
            self._owe(named)
            return None
        self.active_scope = None if scope is None else frozenset(scope)
        self.jobs_submitted += 1
        log.info(
            "watch.job_submitted",
            job_id=self.active_job,
            roots=[str(r) for r in self.roots],
            scope=None if scope is None else len(scope),
        )
        return self.active_job


def _covers(scope: frozenset[str] | None, named: set[str] | None) -> bool:
    """True if a job of ``scope`` (None: the whole roots) sees every ``named`` path."""
    if scope is None:
        return True
    if named is None:
        return False
    return all(real_is_within(path, scope) for path in named)
