"""Redis broker recovery in seconds: heartbeats on a clock, maintenance on a clock.

Dramatiq's ``RedisBroker`` keeps each fetched message in a per-process "acks" set until
it is acked. A process counts as alive while its id has a recent score in the
``__heartbeats__`` sorted set, which every broker command refreshes. "Maintenance" (the
dispatch script's first block) moves the acks of processes whose heartbeat is older than
``heartbeat_timeout`` back to their queue, but Dramatiq runs it on a random 1,000 in a
million commands, and only for the queue that command names. With the 60 s default a
killed worker's batches came back after 6 and 11 minutes (measured).

Here every worker process runs one thread that, every ``maintenance_interval_ms``, sends a
read-only command (``qsize``) with maintenance switched on for each queue it consumes and
its delay queue, under its own broker id. That thread:

- renews the process's heartbeat even when all its consumers are saturated with a slow
  batch, so a live worker's messages are never handed out twice (a lease renewed by a
  heartbeat, not by progress);
- requeues a dead process's unacked messages within ``heartbeat_timeout`` plus one
  interval, instead of minutes.

Two ways a message can still be lost, and how the index host repairs them:

- Redis restarts without persistence (or is flushed): every queued message is gone.
- A worker cut off from Redis finishes a batch, cannot send the next step, and
  Dramatiq's Retries middleware cannot re-enqueue it either; the message is then acked
  when the link returns, and its batch is lost (seen in the network-namespace chaos test).

Every unfinished job always has at least one message in Redis (a step sends the next
before it is acked), and the job's plan is safe in the index database (``job_batches``).
So the index-host workers audit: a job of their index with no progress for
``LOST_CHECK_SECONDS`` and no message in any Rifflux queue is re-sent its plan message,
once (a short Redis claim). A redelivered plan re-sends only the batches still pending,
and the write step ignores a batch it already settled: nothing lost, nothing written twice.

After its own connection to Redis failed, a worker process also takes a new broker id:
Dramatiq drops the retries it was holding in memory when a consumer reconnects, and
under a new id whatever the old one still holds is requeued like a dead worker's.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import dramatiq
import structlog
from dramatiq import Message
from dramatiq.brokers.redis import MAINTENANCE_SCALE
from dramatiq.brokers.redis import RedisBroker as DramatiqRedisBroker
from dramatiq.common import dq_name
from dramatiq.errors import DecodeError
from dramatiq.middleware import Middleware

from rifflux.queue import names
from rifflux.store import jobs
from rifflux.store.connection import open_index

log = structlog.get_logger(__name__)

HEARTBEAT_TIMEOUT_MS = 10_000
"""A worker process whose heartbeat is older than this is dead; its messages are requeued.

Ten maintenance intervals: a live process misses it only if its maintenance thread is
starved for 10 s, and then a batch is merely done twice (writes are idempotent)."""
MAINTENANCE_INTERVAL_MS = 1_000
"""How often each worker process renews its heartbeat and runs maintenance per queue."""
LOST_CHECK_SECONDS = 10.0
"""A job with no progress for this long is checked for lost messages."""
AUDIT_INTERVAL_SECONDS = 2.5
"""How often an index-host worker looks for such jobs (one small query on the index)."""
RECENT_JOBS_CHECKED = 50
"""Unfinished jobs are looked for among this many most recent ones."""
CLAIM_PREFIX = "rifflux:resent:"


class RedisBroker(DramatiqRedisBroker):
    """Dramatiq's Redis broker plus :meth:`maintain`, run by :class:`RedisMaintenance`.

    ``maintenance_interval_ms=None`` runs no maintenance thread: Dramatiq's own random
    maintenance is then the only recovery (minutes).
    """

    def __init__(
        self,
        *,
        heartbeat_timeout: int = HEARTBEAT_TIMEOUT_MS,
        maintenance_interval_ms: int | None = MAINTENANCE_INTERVAL_MS,
        **kwargs: Any,
    ) -> None:
        super().__init__(heartbeat_timeout=heartbeat_timeout, **kwargs)
        self.maintenance_interval_ms = maintenance_interval_ms
        self._maintainer: DramatiqRedisBroker | None = None

    def renew_identity(self) -> None:
        """Take a new broker id; messages held under the old one are requeued once it is
        older than the heartbeat timeout, as a dead worker's are."""
        self.broker_id = str(uuid.uuid4())
        if self._maintainer is not None:
            self._maintainer.broker_id = self.broker_id

    def maintain(self, queues: Iterable[str]) -> None:
        """Renew this process's heartbeat and requeue dead processes' messages."""
        if self._maintainer is None:
            # A twin sharing the client and this broker's id, whose every command runs
            # maintenance; the worker's own commands keep Dramatiq's random chance.
            twin = DramatiqRedisBroker(
                client=self.client,
                namespace=self.namespace,
                heartbeat_timeout=self.heartbeat_timeout,
                dead_message_ttl=self.dead_message_ttl,
                maintenance_chance=MAINTENANCE_SCALE,
                middleware=[],
            )
            twin.broker_id = self.broker_id
            self._maintainer = twin
        for queue in queues:
            for name in (queue, dq_name(queue)):
                self._maintainer.do_qsize(name)


def stalled_job_ids(db_path: Path, idle_seconds: float) -> list[str]:
    """Unfinished jobs of the index whose last progress is older than ``idle_seconds``."""
    conn = open_index(db_path)
    try:
        cutoff = time.time() - idle_seconds
        recent = jobs.recent_jobs(conn, RECENT_JOBS_CHECKED)
        return [job.id for job in recent if not job.finished and job.updated_at < cutoff]
    finally:
        conn.close()


def job_of(data: bytes) -> str | None:
    """The job id a Rifflux message is about (callbacks carry the failed message)."""
    try:
        args = list(Message.decode(data).args)
    except DecodeError:
        return None
    if args and isinstance(args[0], dict) and "args" in args[0]:
        # A failure callback: its first argument is the failed message's data.
        args = list(args[0].get("args") or [])
    job_id = args[0].get("job_id") if args and isinstance(args[0], dict) else None
    return job_id if isinstance(job_id, str) else None


def jobs_with_messages(broker: DramatiqRedisBroker, job_ids: Iterable[str]) -> set[str]:
    """Those of ``job_ids`` with a message queued, delayed or held by a worker."""
    wanted, found = set(job_ids), set()
    for queue in names.ALL_QUEUES:
        for name in (queue, dq_name(queue)):
            key = f"{broker.namespace}:{name}.msgs"
            for _message_id, data in broker.client.hscan_iter(key, count=20):
                job = job_of(data)
                if job in wanted:
                    found.add(job)
                    if found == wanted:
                        return found
    return found


def resend_lost_jobs(
    broker: RedisBroker, db_path: Path, idle_seconds: float = LOST_CHECK_SECONDS
) -> list[str]:
    """Re-send the plan of each job of ``db_path`` idle for ``idle_seconds`` and with no
    message left; returns their ids."""
    stalled = stalled_job_ids(db_path, idle_seconds)
    if not stalled:
        return []
    alive = jobs_with_messages(broker, stalled)
    resent = []
    for job_id in stalled:
        claim = f"{CLAIM_PREFIX}{job_id}"
        claimed = broker.client.set(claim, 1, nx=True, ex=max(1, round(idle_seconds)))
        if job_id in alive or not claimed:
            continue
        broker.enqueue(names.plan_message(str(db_path), job_id))
        resent.append(job_id)
        log.warning(
            "redis.job_messages_lost_resent",
            job_id=job_id,
            db=str(db_path),
            reason=f"no progress for {idle_seconds:.0f} s and no message in Redis",
        )
    return resent


class RedisMaintenance(Middleware):
    """Runs :meth:`RedisBroker.maintain` every interval in each worker process.

    ``db_path`` is the index this worker serves; when the worker consumes the plan queue
    (an index host), it also audits, once that index exists, the index's unfinished jobs
    for lost messages every ``AUDIT_INTERVAL_SECONDS``.
    """

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path.resolve()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if not isinstance(broker, RedisBroker) or broker.maintenance_interval_ms is None:
            return
        queues = sorted(worker.consumer_whitelist or broker.get_declared_queues())
        audit = names.PLAN_QUEUE in queues
        self._stop = stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run,
            args=(broker, queues, audit, stop),
            name="rifflux-redis-maintenance",
            daemon=True,
        )
        self._thread.start()

    def _run(
        self, broker: RedisBroker, queues: list[str], audit: bool, stop: threading.Event
    ) -> None:
        interval = (broker.maintenance_interval_ms or MAINTENANCE_INTERVAL_MS) / 1000
        failing = False
        next_audit = time.monotonic() + AUDIT_INTERVAL_SECONDS
        while not stop.wait(interval):
            try:
                broker.maintain(queues)
            except Exception as exc:  # Redis unreachable or restarting: retry next tick
                if not failing:
                    error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                    log.warning("redis.maintenance_failing", error=error)
                failing = True
                continue
            if failing:
                # Leave behind, under the old id, whatever Dramatiq forgot it was holding.
                broker.renew_identity()
                log.info("redis.maintenance_recovered", broker_id=broker.broker_id)
                failing = False
            # An index created after this worker booted is audited from then on.
            if audit and time.monotonic() >= next_audit and self.db_path.exists():
                next_audit = time.monotonic() + AUDIT_INTERVAL_SECONDS
                try:
                    resend_lost_jobs(broker, self.db_path)
                except Exception:
                    log.warning("redis.lost_message_audit_failed", exc_info=True)

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
