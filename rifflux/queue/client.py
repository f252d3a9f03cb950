"""The front process's transport to the queue: submit jobs and read their state.

:class:`IndexQueue` records a job (with its :class:`~rifflux.index.jobspec.JobSpec`)
and enqueues the plan message by actor name (it does not import the actors); it reads
job records, worker presence and queue depths, withdraws a job nobody took, and says
why an unfinished job is stalled or cannot be written. It starts no process and waits
on no job: who runs the jobs and how a caller follows one to its end is
:mod:`rifflux.reindex`, the one front-side job API.

A job that cannot be written is told by the write fault (:mod:`rifflux.store.faults`:
disk full, read-only, I/O error, a lost WAL) a live worker's heartbeat names for it, or,
once the job has not moved for :data:`FAULT_PROBE_IDLE_SECONDS`, by a read-only probe
of the index and queue databases (:meth:`IndexQueue.write_fault`).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dramatiq
import structlog

from rifflux.config import Settings
from rifflux.errors import IndexWriteError, RiffluxError
from rifflux.index.jobspec import JobSpec
from rifflux.index.scan import scope_in_roots
from rifflux.queue import names, stall
from rifflux.queue.brokers import broker_unavailable, make_broker
from rifflux.queue.presence import PresenceStore, presence_store_for
from rifflux.store import faults, jobs
from rifflux.store.connection import is_busy_error, open_index, open_index_readonly, transaction
from rifflux.store.lock_holders import describe_process, index_locked, write_lock_holders

log = structlog.get_logger(__name__)

# How long submitting a job waits for the index's write lock (one busy wait inside
# SQLite, no retries): a job's own batch holds it well under a second, so a lock held
# longer is another process's (an open `sqlite3` shell, a backup), and the caller hears
# who holds it (rifflux.store.lock_holders) instead of waiting on it.
SUBMIT_LOCK_SECONDS = 10.0
# A job that has not moved for this long gets the client's own probe for a write fault
# (free space, a read-only file, a lost WAL): a busy worker moves a job every few
# seconds, and a fault found this way stays until someone fixes it.
FAULT_PROBE_IDLE_SECONDS = 3.0


class IndexQueue:
    """Submit reindex jobs for one index database and read their state."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.db_path = settings.db_path.resolve()
        self._broker: dramatiq.Broker | None = None
        self._presence: PresenceStore | None = None
        # The front side's one lock (MCP tools call from threads): it guards the lazily
        # built broker here, and the local pool of the job runner built on this class.
        self._lock = threading.RLock()

    @property
    def broker(self) -> dramatiq.Broker:
        with self._lock:
            if self._broker is None:
                broker = make_broker(self.settings.resolved_broker_url)
                for queue in names.ALL_QUEUES:
                    broker.declare_queue(queue)
                self._broker = broker
            return self._broker

    @property
    def presence(self) -> PresenceStore:
        with self._lock:
            if self._presence is None:
                self._presence = presence_store_for(self.broker, self.settings)
            return self._presence

    def submit(
        self,
        paths: Sequence[Path | str],
        *,
        force: bool = False,
        prune_missing: bool = True,
        scope: Sequence[Path | str] | None = None,
    ) -> str:
        """Record a job and enqueue its plan step; returns the job id.

        The roots are the caller's to check (:meth:`rifflux.reindex.Reindexer.submit`
        refuses a missing one). The scan follows symlinks only into the job's roots.
        ``scope``: the paths under the roots that changed (the job's plan then scans
        only those where that is exact; a path outside the roots makes it a job of the
        whole roots). A broker
        that cannot take the message fails the submit and its job row is deleted again,
        so no job is left ``queued`` forever.

        Raises:
          IndexLockedError: Another process held the index's write lock for
            :data:`SUBMIT_LOCK_SECONDS`; the message names it where it can.
        """
        roots = [Path(p) for p in paths]
        spec = JobSpec.from_settings(
            self.settings,
            force=force,
            prune_missing=prune_missing,
            scope=None if scope is None else scope_in_roots(roots, scope),
        )
        try:
            job_id = self._create_and_enqueue([str(r.resolve()) for r in roots], spec)
        except (sqlite3.Error, OSError) as exc:
            reason = faults.exception_reason(exc, self.db_path)
            if reason is None:
                raise
            raise IndexWriteError(reason) from exc
        log.info(
            "job.submitted",
            job_id=job_id,
            roots=[str(r) for r in roots],
            force=force,
            scope=None if spec.scope is None else len(spec.scope),
        )
        return job_id

    def _create_and_enqueue(self, roots: list[str], spec: JobSpec) -> str:
        conn = open_index(self.db_path)
        try:
            job_id = self._create_job(conn, roots, spec)
            try:
                self._enqueue_plan(job_id)
            except Exception as exc:
                jobs.delete_job(conn, job_id)
                if isinstance(exc, RiffluxError) or faults.fault_kind(exc) is not None:
                    raise
                raise broker_unavailable(self.settings.resolved_broker_url, exc) from exc
        finally:
            conn.close()
        return job_id

    def _create_job(self, conn: sqlite3.Connection, roots: list[str], spec: JobSpec) -> str:
        """The job row, written at once if the index's write lock is free; else after
        one wait of up to :data:`SUBMIT_LOCK_SECONDS`, announced with who holds the lock,
        and then the error that names them."""
        for wait in (0.0, SUBMIT_LOCK_SECONDS):
            conn.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
            try:
                with transaction(conn, attempts=1):
                    return jobs.create_job(conn, roots, spec.to_dict())
            except sqlite3.OperationalError as exc:
                if not is_busy_error(exc):
                    raise
                if wait:
                    raise index_locked(self.db_path, wait, "reindex") from exc
            holders = [describe_process(pid) for pid in write_lock_holders(self.db_path)]
            log.info("job.waiting_for_index_lock", seconds=SUBMIT_LOCK_SECONDS, holders=holders)
        raise AssertionError("unreachable")

    def _enqueue_plan(self, job_id: str) -> None:
        with self._lock:
            self.broker.enqueue(names.plan_message(str(self.db_path), job_id))

    def withdraw(self, job_id: str) -> None:
        """Delete a job no worker has taken. Its plan message stays in the broker: the
        worker that takes it finds no job and does nothing."""
        conn = open_index(self.db_path)
        try:
            jobs.delete_job(conn, job_id)
        finally:
            conn.close()

    def cancel(self, job_id: str) -> bool:
        """Cancel a queued or running job: batches not yet written are dropped, batches
        already written stay in the index. False if no such job is unfinished."""
        conn = open_index(self.db_path)
        try:
            return jobs.cancel_job(conn, job_id)
        finally:
            conn.close()

    def unfinished_job_for(
        self, paths: Sequence[Path | str], *, force: bool = False, prune_missing: bool = True
    ) -> str | None:
        """The unfinished job that :meth:`submit` of these arguments would duplicate
        (same roots, same settings), whichever process submitted it; None if there is
        none. Its scan has not run yet, or a follow-up job will see what it missed."""
        roots = [str(Path(p).resolve()) for p in paths]
        spec = JobSpec.from_settings(self.settings, force=force, prune_missing=prune_missing)
        conn = open_index(self.db_path)
        try:
            return jobs.unfinished_job_for(conn, roots, spec.to_dict())
        finally:
            conn.close()

    def job(self, job_id: str) -> jobs.JobRecord | None:
        conn = open_index(self.db_path)
        try:
            return jobs.get_job(conn, job_id)
        finally:
            conn.close()

    def write_fault(
        self,
        record: jobs.JobRecord,
        *,
        now: float | None = None,
        live: list[dict[str, Any]] | None = None,
    ) -> str | None:
        """The write fault that keeps this unfinished job from going on, or None.

        Asked in this order: the live workers' heartbeats (a fault reported for this
        job), and, once the job has not moved for :data:`FAULT_PROBE_IDLE_SECONDS`, a
        read-only probe of the index and SQLite queue databases (:func:`faults.probe`).
        ``live``: the live workers, when the caller has just read them.
        """
        if record.finished:
            return None
        for worker in self._workers_for_faults() if live is None else live:
            fault = (worker.get("health") or {}).get("write_fault") or {}
            if fault.get("job_id") == record.id and isinstance(fault.get("reason"), str):
                return str(fault["reason"])
        idle = (time.time() if now is None else now) - max(record.updated_at, record.created_at)
        if idle < FAULT_PROBE_IDLE_SECONDS:
            return None
        for database in (self.db_path, self.settings.sqlite_broker_path):
            if database is not None:
                found = faults.probe(database)
                if found is not None:
                    return found
        return None

    def _workers_for_faults(self) -> list[dict[str, Any]]:
        queue_db = self.settings.sqlite_broker_path
        if queue_db is not None and not queue_db.exists():
            return []
        try:
            return self.live_workers()
        except (sqlite3.Error, OSError):
            return []  # A queue database that cannot be read: the probe looks at it.

    def queue_depths(self) -> dict[str, int] | None:
        """Messages per queue where the broker can count them (SQLite), else None."""
        depths = getattr(self.broker, "queue_depths", None)
        return depths() if callable(depths) else None

    def stall_reason(
        self, record: jobs.JobRecord, *, since: float = 0.0, faults_too: bool = True
    ) -> str | None:
        """Why this unfinished job is stalled, or None (see :mod:`rifflux.queue.stall`).

        The job counts as idle from its last update, or from ``since`` if later. A
        write fault (:meth:`write_fault`) is a reason at once, unless ``faults_too`` is
        False (the caller has just asked): no worker can move the job.
        """
        if record.finished:
            return None
        fault = self.write_fault(record) if faults_too else None
        if fault is not None:
            return fault
        idle = time.time() - max(record.updated_at, record.created_at, since)
        if idle < self.settings.stall_seconds:
            return None
        return stall.stall_reason(
            self.live_workers(),
            self.queue_depths(),
            idle_seconds=idle,
            grace_seconds=self.settings.stall_seconds,
        )

    def live_workers(self) -> list[dict[str, Any]]:
        return self.presence.live_workers()

    def index_host_workers(self) -> list[dict[str, Any]]:
        """Live workers that consume the plan and write queues (the index host's)."""
        return [w for w in self.live_workers() if set(names.INDEX_HOST_QUEUES) <= set(w["queues"])]

    def heartbeats(self) -> list[dict[str, Any]]:
        """Every recorded heartbeat, live or not (for telling which workers are gone)."""
        return self.presence.heartbeats()

    def release_process(self, hostname: str, pid: int) -> None:
        """Forget a worker process that is gone: its heartbeats, and its SQLite leases
        (handed back at once, so its messages move again now, not when they expire)."""
        release = getattr(self.broker, "release_process", None)
        if callable(release):
            release(hostname, pid)
        self.presence.remove_process(hostname, pid)

    def close(self) -> None:
        with self._lock:
            if self._broker is not None:
                self._broker.close()
                self._broker = None

    def has_unfinished_jobs(self) -> bool:
        """True if a job is queued or running (e.g. left by a server that was killed)."""
        if not self.db_path.exists():
            return False
        conn = open_index(self.db_path)
        try:
            return bool(jobs.unfinished_job_ids(conn))
        finally:
            conn.close()

    def unfinished_job_ids(self) -> list[str]:
        conn = open_index(self.db_path)
        try:
            return jobs.unfinished_job_ids(conn)
        finally:
            conn.close()

    def fail_job(self, job_id: str, reason: str) -> bool:
        """Mark an unfinished job failed with ``reason``; False if it had finished."""
        conn = open_index(self.db_path)
        try:
            return jobs.fail_job(conn, job_id, reason)
        finally:
            conn.close()

    def status(self, *, recent: int = 10) -> dict[str, Any]:
        """Broker, live workers, queue depths and recent jobs; an unfinished job that is
        stalled says so (``stalled``, ``stalled_reason``). Reads the job records
        read-only, so a status also answers on a full disk."""
        conn = open_index_readonly(self.db_path)
        try:
            records = jobs.recent_jobs(conn, recent)
        finally:
            conn.close()
        queue_db = self.settings.sqlite_broker_path
        if queue_db is not None and not queue_db.exists():
            # Reading status never creates the broker's file: no file, no messages.
            live: list[dict[str, Any]] = []
            depths: dict[str, int] | None = dict.fromkeys(names.ALL_QUEUES, 0)
        else:
            live = self.live_workers()
            depths = self.queue_depths()
        now = time.time()
        recent_jobs = []
        for record in records:
            idle = now - max(record.updated_at, record.created_at)
            reason = None
            if not record.finished:
                reason = self.write_fault(record, now=now, live=live) or stall.stall_reason(
                    live,
                    depths,
                    idle_seconds=idle,
                    grace_seconds=self.settings.stall_seconds,
                    now=now,
                )
            recent_jobs.append(
                {**record.to_dict(), "stalled": reason is not None, "stalled_reason": reason}
            )
        return {
            "broker": self.settings.resolved_broker_url,
            "live_workers": live,
            "queue_depths": depths,
            "recent_jobs": recent_jobs,
        }
