"""Stalled jobs: work is pending and nobody can take it, so nobody waits in silence.

A job is stalled when it is not finished, has not moved for the grace period
(``RIFFLUX_STALL_SECONDS``), and either

- a queue it needs has messages (or, where the broker cannot count them, might have)
  and no live worker consumes that queue; or
- the broker can count messages and every queue is empty: the job's next message was
  lost (a dead letter, a broker restarted without persistence).

Both are pure functions of what the front process can see: the live workers'
heartbeats, the queue depths, and the job's last update. They never guess from a
single instant: "not moved for the grace period" is what separates a worker that is
booting or busy with a long batch from one that does not exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dramatiq.common import dq_name

from rifflux.queue import names

START_HINT = "start one with: rifflux worker"


def queues_without_consumer(
    live_workers: Iterable[Mapping[str, Any]], depths: Mapping[str, int] | None
) -> list[str]:
    """Job queues that hold messages (all of them when ``depths`` is unknown) and that
    no live worker consumes, in pipeline order."""
    live: set[str] = set()
    for worker in live_workers:
        live.update(worker["queues"])
    missing = []
    for queue in names.ALL_QUEUES:
        pending = depths is None or depths.get(queue, 0) + depths.get(dq_name(queue), 0) > 0
        if pending and queue not in live:
            missing.append(queue)
    return missing


def stall_reason(
    live_workers: Iterable[Mapping[str, Any]],
    depths: Mapping[str, int] | None,
    *,
    idle_seconds: float,
    grace_seconds: float,
) -> str | None:
    """Why an unfinished job that has not moved for ``idle_seconds`` is stalled, or None."""
    if idle_seconds < grace_seconds:
        return None
    missing = queues_without_consumer(live_workers, depths)
    if missing:
        return f"no worker has consumed {missing[0]} for {idle_seconds:.0f} s; {START_HINT}"
    if depths is not None and not any(depths.values()):
        return (
            f"no message of this job is queued and it has not moved for {idle_seconds:.0f} s "
            "(a message was dead-lettered or the broker lost it); cancel it with "
            "`rifflux cancel JOB_ID` and reindex"
        )
    return None
