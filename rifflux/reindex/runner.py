"""Follow a job to its end, with this process's local worker pool when it may start one.

:class:`JobRunner` is the queue transport (:class:`~rifflux.queue.client.IndexQueue`)
plus what only a front process that waits does: it keeps the local pool it started
(through an injected :data:`Launcher`, ``workers.launcher.launch_local_pool``; a runner
built without one never starts a process), and :meth:`JobRunner.wait` follows a job
with its stall and write-fault checks. :class:`~rifflux.reindex.Reindexer` holds one
and decides when a pool starts; nothing else in the package builds one.

Invariants:

- A wait never waits in silence: a job that stalls (pending work and no live worker
  for it, for ``RIFFLUX_STALL_SECONDS``) gets a local pool once where the caller allows
  it, and otherwise ends the wait with :class:`JobStalled`.
- A wait ends, with one line, on a write no retry fixes (:mod:`rifflux.store.faults`:
  disk full, read-only, I/O error, a lost WAL), whichever way it learns of it first:
  the job row failed with the reason; a ``job.write_failed`` line of the local pool; a
  live worker's heartbeat naming the job; or the transport's own read-only probe once
  the job has not moved for a while. It then records the reason in the job row if the
  index still takes it.
- The pool is started and stopped under the transport's lock (the front side's one
  lock), so callers on several threads never start two; a wait holds no lock.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import structlog

from rifflux.config import Settings
from rifflux.errors import IndexWriteError, JobStalled, JobTimeout, RiffluxError
from rifflux.queue.client import IndexQueue
from rifflux.store import faults, jobs
from rifflux.store.connection import open_index

log = structlog.get_logger(__name__)

# How often a wait re-reads the job's row: one primary-key read, so a short interval
# costs nothing measurable and a job that took ~5 s is not reported late.
JOB_POLL_SECONDS = 0.05
# A pool started for a stalled job gets at least this long to boot before the job can
# be declared stalled again (a crash-looping pool exits sooner, which ends the wait).
POOL_BOOT_SECONDS = 30.0
# How often a wait looks at heartbeats and queue depths for a stall, and at heartbeats
# for a write fault of its job.
STALL_CHECK_SECONDS = 1.0

ProgressCallback = Callable[[jobs.JobRecord], None]


class PoolHandle(Protocol):
    """A local worker pool this process started (``workers.launcher.LocalPool``): the
    runner watches that it stays alive and reads the write faults it announces."""

    log_path: Path

    def alive(self) -> bool: ...

    def stop(self) -> None: ...

    def fault_for(self, job_id: str, *, created_at: float) -> str | None: ...

    def owns(self, worker: Mapping[str, Any]) -> bool:
        """Whether a live worker (a heartbeat of :meth:`IndexQueue.live_workers`) is one of
        this pool's processes."""
        ...


Launcher = Callable[[Settings, int], PoolHandle]
"""Starts a local pool of N workers for the index of the given settings
(``workers.launcher.launch_local_pool``); injected, so this layer imports no launcher."""


class JobRunner(IndexQueue):
    """The transport, this process's local pool, and the wait for a job's end."""

    def __init__(self, settings: Settings, *, launcher: Launcher | None = None) -> None:
        super().__init__(settings)
        self.launcher = launcher
        self.pool: PoolHandle | None = None

    # -- the local pool --------------------------------------------------------------

    def start_pool(self, processes: int | None = None) -> PoolHandle:
        """Start a local pool for all queues with this runner's launcher, unless this
        process has one alive.

        Raises:
          RiffluxError: This runner was built without a launcher.
        """
        with self._lock:
            if self.pool is not None and self.pool.alive():
                return self.pool
            if self.launcher is None:
                raise RiffluxError(
                    "no worker is alive and this process cannot start one; "
                    "start workers with `rifflux worker`"
                )
            self.pool = self.launcher(self.settings, processes or self.settings.workers)
            return self.pool

    def stop_pool(self) -> None:
        with self._lock:
            if self.pool is not None:
                self.pool.stop()
                self.pool = None

    def close(self) -> None:
        """Stop the local pool this process started, then close the transport."""
        self.stop_pool()
        super().close()

    def write_fault(
        self,
        record: jobs.JobRecord,
        *,
        now: float | None = None,
        live: list[dict[str, Any]] | None = None,
    ) -> str | None:
        """The local pool's announced fault for the job (a ``job.write_failed`` line of
        its output) first, then what the transport finds
        (:meth:`IndexQueue.write_fault`)."""
        if record.finished:
            return None
        announced = self._announced_fault(record)
        if announced is not None:
            return announced
        return super().write_fault(record, now=now, live=live)

    def _announced_fault(self, record: jobs.JobRecord) -> str | None:
        if self.pool is None:
            return None
        return self.pool.fault_for(record.id, created_at=record.created_at)

    # -- the wait --------------------------------------------------------------------

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        start_workers: bool = False,
    ) -> jobs.JobRecord:
        """Block until the job finishes.

        A job that stalls starts a local pool once when ``start_workers`` allows it and
        this runner has a launcher; otherwise the wait raises :class:`JobStalled`. A job
        that cannot be written (:meth:`write_fault`) ends the wait within seconds.

        Raises:
          JobTimeout: After ``timeout`` seconds.
          JobStalled: See above; the job keeps its state.
          IndexWriteError: The job failed, or cannot go on, because a write no retry
            fixes failed (the message is the one-line reason); the job is marked
            ``failed`` with it if the index can still be written.
        """
        try:
            return self._follow(
                job_id, timeout=timeout, on_progress=on_progress, start_workers=start_workers
            )
        except sqlite3.Error as exc:
            # The index cannot even be read the way a writer opens it (a lost WAL).
            reason = faults.exception_reason(exc, self.db_path)
            if reason is None:
                raise
            raise IndexWriteError(reason) from exc

    def _follow(
        self,
        job_id: str,
        *,
        timeout: float | None,
        on_progress: ProgressCallback | None,
        start_workers: bool,
    ) -> jobs.JobRecord:
        deadline = None if timeout is None else time.monotonic() + timeout
        next_stall_check = time.monotonic() + STALL_CHECK_SECONDS
        may_start = start_workers
        # A pool started for a stall gets a full grace period to boot and take the work.
        pool_started_at = 0.0
        conn = open_index(self.db_path)
        try:
            while True:
                record = jobs.get_job(conn, job_id)
                if record is None:
                    raise RiffluxError(f"no job with id {job_id!r}")
                if on_progress is not None:
                    on_progress(record)
                if record.finished:
                    if record.write_fault is not None:
                        raise IndexWriteError(record.write_fault)
                    return record
                announced = self._announced_fault(record)
                if announced is not None:
                    self._fail_on_fault(conn, job_id, announced)
                if self.pool is not None and not self.pool.alive():
                    raise RiffluxError(f"the local worker pool exited; see {self.pool.log_path}")
                if time.monotonic() >= next_stall_check:
                    next_stall_check = time.monotonic() + STALL_CHECK_SECONDS
                    fault = self.write_fault(record)
                    if fault is not None:
                        self._fail_on_fault(conn, job_id, fault)
                    reason = self.stall_reason(record, since=pool_started_at, faults_too=False)
                    if reason is not None and may_start and self.launcher is not None:
                        may_start = False
                        log.warning("job.stalled_starting_pool", job_id=job_id, reason=reason)
                        self.start_pool()
                        # Its workers get at least POOL_BOOT_SECONDS to boot (load the
                        # model, register) before the job can count as stalled again.
                        boot = max(0.0, POOL_BOOT_SECONDS - self.settings.stall_seconds)
                        pool_started_at = time.time() + boot
                    elif reason is not None:
                        raise JobStalled(f"job {job_id} is stalled: {reason}")
                if deadline is not None and time.monotonic() > deadline:
                    raise JobTimeout(f"job {job_id} still {record.state} after {timeout}s")
                time.sleep(JOB_POLL_SECONDS)
        finally:
            conn.close()

    def _fail_on_fault(self, conn: sqlite3.Connection, job_id: str, reason: str) -> None:
        """Record a write fault in the job row if the index still takes it, then raise it."""
        try:
            jobs.fail_job(conn, job_id, reason)
        except (sqlite3.Error, OSError) as exc:
            log.info("job.fault_not_recorded", job_id=job_id, error=str(exc))
        # Info, not error: the caller shows the reason (the CLI's one line, a tool error).
        log.info("job.write_fault", job_id=job_id, reason=reason)
        raise IndexWriteError(reason)
