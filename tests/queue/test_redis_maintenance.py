"""Redis maintenance on a clock and the lost-message audit, against a private redis-server."""

from __future__ import annotations

import time
from pathlib import Path

from dramatiq import Message
from private_redis import (  # noqa: F401  (fixtures)
    PrivateRedis,
    private_redis_fixture,
)
from rifflux_testing import wait_until

from rifflux.queue import names
from rifflux.queue.brokers import make_broker
from rifflux.queue.redis_maintenance import RedisBroker, job_of, resend_lost_jobs
from rifflux.store import jobs
from rifflux.store.connection import open_index, transaction

QUEUE = "rifflux_test_lease"


def broker_for(server: PrivateRedis, query: str) -> RedisBroker:
    broker = make_broker(server.url(query=query))
    assert isinstance(broker, RedisBroker)
    for queue in (QUEUE, *names.ALL_QUEUES):
        broker.declare_queue(queue)
    return broker


def queued(broker: RedisBroker, queue: str) -> int:
    return int(broker.client.llen(f"{broker.namespace}:{queue}"))


def test_a_renewed_lease_is_kept_and_a_silent_processs_messages_are_requeued(
    private_redis: PrivateRedis,
) -> None:
    query = "heartbeat_timeout_ms=1500&maintenance_interval_ms=100"
    holder, other = broker_for(private_redis, query), broker_for(private_redis, query)
    holder.enqueue(Message(queue_name=QUEUE, actor_name="noop", args=(), kwargs={}, options={}))
    consumer = holder.consume(QUEUE, prefetch=1, timeout=100)
    assert next(consumer) is not None and queued(holder, QUEUE) == 0

    # The holder only renews its heartbeat (a worker busy with one slow message) for
    # well over the timeout, while another process runs maintenance: nothing moves.
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        holder.maintain([QUEUE])
        other.maintain([QUEUE])
        assert queued(other, QUEUE) == 0
        time.sleep(0.1)

    # The holder goes silent (killed): its message is requeued by the other's maintenance.
    def requeued() -> bool:
        other.maintain([QUEUE])
        return queued(other, QUEUE) == 1

    wait_until(requeued, timeout=30)
    holder.close()
    other.close()


def plan_messages(broker: RedisBroker) -> list[str | None]:
    key = f"{broker.namespace}:{names.PLAN_QUEUE}.msgs"
    return [job_of(data) for data in broker.client.hvals(key)]


def test_audit_resends_the_plan_only_of_unfinished_jobs_with_no_message_left(
    tmp_path: Path, private_redis: PrivateRedis
) -> None:
    db = tmp_path / "index.db"
    conn = open_index(db)
    lost, moving, done = (jobs.create_job(conn, [str(tmp_path)], {}) for _ in range(3))
    with transaction(conn):
        jobs.update_job(conn, done, state="completed")
    conn.close()
    broker = broker_for(private_redis, "")
    # A write step of ``moving`` still waits in its queue; ``lost`` has no message at all.
    broker.enqueue(
        Message(
            queue_name=names.WRITE_QUEUE,
            actor_name=names.WRITE_ACTOR,
            args=({"kind": "write", "db_path": str(db), "job_id": moving, "batch_no": 0},),
            kwargs={},
            options={},
        )
    )
    try:
        assert resend_lost_jobs(broker, db, idle_seconds=0) == [lost]
        assert plan_messages(broker) == [lost]
        # Its plan message is now in Redis: a second audit sends nothing more.
        assert resend_lost_jobs(broker, db, idle_seconds=0) == []
        assert plan_messages(broker) == [lost]
    finally:
        broker.close()
