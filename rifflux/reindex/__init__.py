"""The one front-side job API: every caller that indexes roots (the CLI's ``index``,
``watch`` and ``cancel``, the MCP tools, the server's start, the file watcher,
auto-reindex) submits and follows its job through :class:`Reindexer`. Beneath it,
:class:`~rifflux.reindex.runner.JobRunner` keeps this process's local pool and waits,
over the transport :class:`~rifflux.queue.client.IndexQueue` (docs/architecture.md,
"A reindex job").

Invariants:

- Roots are checked here, once, before a job is made or a worker started.
- Who runs a job is decided here: live index-host workers when there are any, else a
  local pool through the injected launcher, once per process while it lives; an HTTP
  worker process asks its supervisor instead (:attr:`Reindexer.request_workers`).
- One lock, the runner's: a pool starts and stops under it, so threads never start
  two; no lock of this process is held while a submit waits for the index's write lock.
- No unfinished job waits for a consumer that does not exist
  (:meth:`Reindexer.keep_jobs_moving`): it gets a local pool, after the heartbeats of
  this host's gone workers are forgotten, or is failed with the reason.
- A job submitted without waiting is refused and withdrawn when no index-host worker is
  alive (:meth:`Reindexer.submit_to_live_workers`): nobody would start one for it.
- A watcher's pool boots at once and gives way to workers started beside this process
  within the grace (:meth:`Reindexer.boot_pool`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

from rifflux.config import Settings
from rifflux.errors import RiffluxError
from rifflux.index.scan import require_roots
from rifflux.queue.presence import process_gone
from rifflux.reindex.runner import JobRunner, Launcher, PoolHandle, ProgressCallback
from rifflux.store.jobs import JobRecord
from workers.launcher import launch_local_pool

log = structlog.get_logger(__name__)

# How often ensure_workers looks for heartbeats while giving booting workers a grace.
WORKER_POLL_SECONDS = 0.5


class Reindexer:
    """Index roots of one index database through the queue; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        *,
        launcher: Launcher | None = None,
        queue: JobRunner | None = None,
    ) -> None:
        """``launcher``: how to start a local pool (default :func:`launch_local_pool`);
        ``queue``: the runner to use (default one for ``settings``)."""
        launcher = launcher or launch_local_pool
        self.settings = settings
        self.queue = queue if queue is not None else JobRunner(settings, launcher=launcher)
        if self.queue.launcher is None:
            self.queue.launcher = launcher
        # Set in an HTTP worker process (rifflux.mcp.http_workers): it never starts a
        # pool itself, it asks its supervisor, which does unless workers are alive.
        self.request_workers: Callable[[], None] | None = None

    # -- the entry point -------------------------------------------------------------

    def submit(
        self,
        roots: Sequence[Path | str],
        *,
        force: bool = False,
        prune_missing: bool = True,
        start_workers: bool = False,
        processes: int | None = None,
        scope: Sequence[Path | str] | None = None,
    ) -> str:
        """Submit one job for ``roots`` (``scope``: only the paths under them that
        changed, see :meth:`IndexQueue.submit`); with ``start_workers``, first start a
        local pool unless workers are alive (the watcher and a server's start leave that
        to a stall or :meth:`ensure_workers_in_background`). Returns the job id.

        Raises:
          RootNotFoundError: A root does not exist (one line naming each).
          IndexLockedError: Another process held the index's write lock too long.
        """
        require_roots([Path(root) for root in roots])
        if start_workers:
            self.ensure_workers(processes)
        return self.queue.submit(roots, force=force, prune_missing=prune_missing, scope=scope)

    def submit_to_live_workers(
        self,
        roots: Sequence[Path | str],
        *,
        force: bool = False,
        prune_missing: bool = True,
    ) -> str:
        """Submit one job for the index-host workers alive now, and return its id; when
        none is alive, withdraw the job and refuse in one line (see the module docstring).

        The job is submitted first, so an unusable broker is what a refusal names."""
        job_id = self.submit(roots, force=force, prune_missing=prune_missing)
        if self.queue.index_host_workers():
            return job_id
        self.queue.withdraw(job_id)
        raise RiffluxError(
            "no worker is alive to take the job, so --no-wait would leave it queued; "
            "start workers with `rifflux worker`, or run `rifflux index` without "
            "--no-wait to index with a local pool"
        )

    def run(
        self,
        roots: Sequence[Path | str],
        *,
        force: bool = False,
        prune_missing: bool = True,
        processes: int | None = None,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> JobRecord:
        """Submit one job and wait for it (a stalled job gets a local pool once)."""
        job_id = self.submit(
            roots,
            force=force,
            prune_missing=prune_missing,
            start_workers=True,
            processes=processes,
        )
        return self.wait(job_id, timeout=timeout, on_progress=on_progress)

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        start_workers: bool = True,
    ) -> JobRecord:
        """Follow the job to its end (:meth:`JobRunner.wait`: stall and write-fault
        checks); a stall starts a local pool once when ``start_workers``, except in a
        process that asks a supervisor for workers, where the stall ends the wait."""
        return self.queue.wait(
            job_id,
            timeout=timeout,
            on_progress=on_progress,
            start_workers=start_workers and self.request_workers is None,
        )

    def cancel(self, job_id: str) -> None:
        """Cancel a queued or running job (:meth:`IndexQueue.cancel`).

        Raises:
          RiffluxError: No queued or running job has this id.
        """
        if not self.queue.cancel(job_id):
            raise RiffluxError(f"no queued or running job with id {job_id!r}")

    # -- workers ---------------------------------------------------------------------

    def ensure_workers(
        self, processes: int | None = None, *, grace_seconds: float = 0.0
    ) -> PoolHandle | None:
        """Start a local worker pool unless index-host workers are alive (in a process
        with :attr:`request_workers`, ask the supervisor instead, and return None).

        ``grace_seconds`` first waits for workers that are booting at the same time
        (e.g. the Procfile's worker process), so no second pool is started beside them.
        Heartbeats of this host's workers whose process is gone are forgotten first
        (:meth:`forget_gone_workers`), and their messages handed back.
        """
        if self.request_workers is not None:
            self.request_workers()
            return None
        deadline = time.monotonic() + grace_seconds
        while not self.queue.index_host_workers():
            if time.monotonic() >= deadline:
                break
            time.sleep(WORKER_POLL_SECONDS)
        else:
            return None
        self.forget_gone_workers()
        return self.queue.start_pool(processes)

    def forget_gone_workers(self) -> int:
        """Forget the heartbeats of this host's workers whose process is gone (killed with
        their pool, which could not) and hand back their SQLite leases at once, so their
        messages move again now rather than when the leases expire. Returns how many."""
        gone = [
            (str(h["hostname"]), int(h["pid"]))
            for h in self.queue.heartbeats()
            if process_gone(str(h["hostname"]), int(h["pid"]), h.get("started_at"))
        ]
        for hostname, pid in dict.fromkeys(gone):
            self.queue.release_process(hostname, pid)
        if gone:
            log.info("workers.gone_forgotten", pids=sorted({pid for _, pid in gone}))
        return len(gone)

    def keep_jobs_moving(self) -> PoolHandle | None:
        """Give the unfinished jobs a consumer: a local pool, started now (or asked of
        the supervisor), when a job is queued or running and no index-host worker is
        alive. Where the pool cannot start, each stalled job is failed with the reason.
        Cheap when there is nothing to do (one read of the jobs, one of the heartbeats):
        ``index_status`` calls it."""
        if not self.queue.has_unfinished_jobs() or self.queue.index_host_workers():
            return None
        if self.request_workers is not None:
            self.request_workers()
            return None
        log.info("reindex.unfinished_job_without_workers")
        try:
            return self.ensure_workers()
        except (RiffluxError, OSError) as exc:
            self.fail_stalled_jobs(f"no worker is alive and a local pool could not start: {exc}")
            return None

    def fail_stalled_jobs(self, reason: str) -> list[str]:
        """Fail every unfinished job that is stalled (:meth:`IndexQueue.stall_reason`)
        with ``reason`` and its stall; returns their ids."""
        failed = []
        for job_id in self.queue.unfinished_job_ids():
            record = self.queue.job(job_id)
            stalled = None if record is None else self.queue.stall_reason(record)
            if stalled is not None and self.queue.fail_job(job_id, f"{reason} ({stalled})"):
                log.error("job.failed_without_workers", job_id=job_id, reason=reason)
                failed.append(job_id)
        return failed

    def ensure_workers_in_background(self, grace_seconds: float) -> None:
        """:meth:`ensure_workers` in a daemon thread, after ``grace_seconds``."""
        threading.Thread(
            target=self.ensure_workers,
            kwargs={"grace_seconds": grace_seconds},
            name="rifflux-startup-workers",
            daemon=True,
        ).start()

    def boot_pool(self, grace_seconds: float) -> PoolHandle | None:
        """Start a local pool now unless index-host workers are alive; stop it again if
        workers of another process show up within ``grace_seconds`` (those started
        beside this one). Returns the pool kept, or None."""
        if self.queue.index_host_workers():
            return None
        pool = self.queue.start_pool()
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline and self.queue.pool is pool:
            others = [w for w in self.queue.index_host_workers() if not pool.owns(w)]
            if others:
                log.info(
                    "reindex.local_pool_yields",
                    workers=[w["worker_id"] for w in others],
                    reason="workers started beside this process are alive",
                )
                self.queue.stop_pool()
                return None
            time.sleep(WORKER_POLL_SECONDS)
        return pool

    def boot_pool_in_background(self, grace_seconds: float) -> None:
        """:meth:`boot_pool` in a daemon thread."""
        threading.Thread(
            target=self.boot_pool,
            args=(grace_seconds,),
            name="rifflux-startup-pool",
            daemon=True,
        ).start()

    def start_pool(self, processes: int | None = None) -> PoolHandle:
        """A local pool now (the one alive, if any): a stalled watcher job asks this."""
        return self.queue.start_pool(processes)

    # -- reading jobs ----------------------------------------------------------------

    def job(self, job_id: str) -> JobRecord | None:
        return self.queue.job(job_id)

    def unfinished_job_for(self, paths: Sequence[Path | str]) -> str | None:
        return self.queue.unfinished_job_for(paths)

    def stall_reason(self, record: JobRecord) -> str | None:
        return self.queue.stall_reason(record)

    def status(self) -> dict[str, Any]:
        """Broker, live workers, queue depths and recent jobs (:meth:`IndexQueue.status`)."""
        return self.queue.status()

    def has_unfinished_jobs(self) -> bool:
        return self.queue.has_unfinished_jobs()

    def close(self) -> None:
        """Stop a local pool this process started, and close the transport."""
        self.queue.close()
