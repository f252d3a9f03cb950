"""The front process's side of the queue: submit jobs and follow them.

The front process never indexes. It records a job (with its
:class:`~rifflux.index.jobspec.JobSpec`) and enqueues the plan message by actor name (it
does not import the actors). It starts no process itself: a client given a
:data:`Launcher` (``workers.launcher.launch_local_pool``, by :mod:`rifflux.reindex`) can
start a local pool when a job it waits on stalls, and keeps that pool in ``pool``;
one built without a launcher says the job is stalled instead.

A waiting client ends its wait, with one line, on a write no retry fixes
(:mod:`rifflux.store.faults`: disk full, read-only, I/O error, a lost WAL), whichever
way it learns of it first: the job row failed with the reason; a ``job.write_failed``
line of its local pool; a live worker's heartbeat naming the job; or, once the job
has not moved for :data:`FAULT_PROBE_IDLE_SECONDS`, its own read-only probe of the
index and queue databases. It then records the reason in the job row if it can.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import dramatiq
import structlog

from rifflux.config import Settings
from rifflux.errors import IndexWriteError, JobStalled, JobTimeout, RiffluxError
from rifflux.index.jobspec import JobSpec
from rifflux.index.scan import require_roots, scope_in_roots
from rifflux.queue import names, stall
from rifflux.queue.brokers import broker_unavailable, make_broker
from rifflux.queue.presence import PresenceStore, presence_store_for, process_gone
from rifflux.store import faults, jobs
from rifflux.store.connection import is_busy_error, open_index, open_index_readonly, transaction
from rifflux.store.lock_holders import describe_process, index_locked, write_lock_holders

log = structlog.get_logger(__name__)

# How often waiting front processes re-read a job's row: one primary-key read, so a
# short interval costs nothing measurable, and a job of ~5 s is reported at most 50 ms
# late.
JOB_POLL_SECONDS = 0.05
# A pool started for a stalled job gets at least this long to boot before the job can
# be declared stalled again (a crash-looping pool exits sooner, which ends the wait).
POOL_BOOT_SECONDS = 30.0
# How often a waiting client looks at heartbeats and queue depths for a stall, and at
# heartbeats for a write fault of its job.
STALL_CHECK_SECONDS = 1.0
# How long submitting a job waits for the index's write lock (one busy wait inside
# SQLite, no retries): a job's own batch holds it well under a second, so a lock held
# longer is another process's (an open `sqlite3` shell, a backup), and the caller hears
# who holds it (rifflux.store.lock_holders) instead of waiting on it.
SUBMIT_LOCK_SECONDS = 10.0
# A job that has not moved for this long gets the client's own probe for a write fault
# (free space, a read-only file, a lost WAL): a busy worker moves a job every few
# seconds, and a fault found this way stays until someone fixes it.
FAULT_PROBE_IDLE_SECONDS = 3.0

ProgressCallback = Callable[[jobs.JobRecord], None]


class PoolHandle(Protocol):
    """A local worker pool this process started (``workers.launcher.LocalPool``): the
    client watches that it stays alive and reads the write faults it announces."""

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
(``workers.launcher.launch_local_pool``); injected, so ``queue/`` starts no process."""


class IndexQueue:
    """Submit reindex jobs for one index database and follow them."""

    def __init__(self, settings: Settings, *, launcher: Launcher | None = None) -> None:
        self.settings = settings
        self.db_path = settings.db_path.resolve()
        self.launcher = launcher
        self._broker: dramatiq.Broker | None = None
        self._presence: PresenceStore | None = None
        self.pool: PoolHandle | None = None
        # Guards the lazily built broker and the local pool: MCP tools call from threads.
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

        The scan follows symlinks only into the job's roots. ``scope``: the paths under
        the roots that changed (the job's plan then scans only those where that is
        exact; a path outside the roots makes it a job of the whole roots). A broker
        that cannot take the message fails the submit and its job row is deleted again,
        so no job is left ``queued`` forever.

        Raises:
          IndexLockedError: Another process held the index's write lock for
            :data:`SUBMIT_LOCK_SECONDS`; the message names it where it can.
        """
        roots = [Path(p) for p in paths]
        require_roots(roots)
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

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        start_workers: bool = False,
    ) -> jobs.JobRecord:
        """Block until the job finishes.

        Never waits in silence: a job that stalls (pending work and no live worker for
        it, for ``RIFFLUX_STALL_SECONDS``) makes this start a local pool once when
        ``start_workers`` allows it, and otherwise raises :class:`JobStalled`. A job
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

    def write_fault(
        self,
        record: jobs.JobRecord,
        *,
        now: float | None = None,
        live: list[dict[str, Any]] | None = None,
    ) -> str | None:
        """The write fault that keeps this unfinished job from going on, or None.

        Asked in this order: this process's local pool (the ``job.write_failed`` lines of
        its output), the live workers' heartbeats (a fault reported for this job), and,
        once the job has not moved for :data:`FAULT_PROBE_IDLE_SECONDS`, a read-only
        probe of the index and SQLite queue databases (:func:`faults.probe`).
        ``live``: the live workers, when the caller has just read them.
        """
        if record.finished:
            return None
        announced = self._announced_fault(record)
        if announced is not None:
            return announced
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

    def _announced_fault(self, record: jobs.JobRecord) -> str | None:
        """A write fault this process's local pool announced for the job."""
        if self.pool is None:
            return None
        return self.pool.fault_for(record.id, created_at=record.created_at)

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

    def forget_gone_workers(self) -> int:
        """Forget the heartbeats of this host's workers whose process is gone (killed with
        their pool, which could not) and hand back their SQLite leases at once, so their
        messages move again now rather than when the leases expire. Returns how many."""
        gone = [
            (str(h["hostname"]), int(h["pid"]))
            for h in self.presence.heartbeats()
            if process_gone(str(h["hostname"]), int(h["pid"]), h.get("started_at"))
        ]
        if not gone:
            return 0
        release = getattr(self.broker, "release_process", None)
        for hostname, pid in dict.fromkeys(gone):
            if callable(release):
                release(hostname, pid)
            self.presence.remove_process(hostname, pid)
        log.info("workers.gone_forgotten", pids=sorted({pid for _, pid in gone}))
        return len(gone)

    def index_host_workers(self) -> list[dict[str, Any]]:
        """Live workers that consume the plan and write queues (the index host's)."""
        return [w for w in self.live_workers() if set(names.INDEX_HOST_QUEUES) <= set(w["queues"])]

    def start_pool(self, processes: int | None = None) -> PoolHandle:
        """Start a local pool for all queues with this client's launcher, unless this
        process has one alive.

        Raises:
          RiffluxError: This client was built without a launcher.
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
        self.stop_pool()
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

    def fail_stalled_jobs(self, reason: str) -> list[str]:
        """Fail every unfinished job that is stalled (:meth:`stall_reason`) with
        ``reason`` and its stall; returns their ids."""
        conn = open_index(self.db_path)
        try:
            failed = []
            for job_id in jobs.unfinished_job_ids(conn):
                record = jobs.get_job(conn, job_id)
                stalled = None if record is None else self.stall_reason(record)
                if stalled is not None and jobs.fail_job(conn, job_id, f"{reason} ({stalled})"):
                    log.error("job.failed_without_workers", job_id=job_id, reason=reason)
                    failed.append(job_id)
            return failed
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
