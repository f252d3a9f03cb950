"""Stalled jobs: work is pending and nobody can take it, so nobody waits in silence.

A job is stalled when it is not finished, has not moved for the grace period
(``RIFFLUX_STALL_SECONDS``), and one of these holds, checked in this order:

- workers are alive but failing: a live worker's heartbeat says every message it ran
  since some time has failed (``health.failing_since``) and no other live worker has
  run one successfully since the job last moved. The reason names the last error; this
  is not "no live consumer", and starting another pool would not help;
- a queue it needs has messages (or, where the broker cannot count them, might have)
  and no live worker consumes that queue;
- the broker can count messages and every queue is empty: the job's next message was
  lost (a dead letter, a broker restarted without persistence).

Both are pure functions of what the front process can see: the live workers'
heartbeats, the queue depths, and the job's last update. They never guess from a
single instant: "not moved for the grace period" is what separates a worker that is
booting or busy with a long batch from one that does not exist.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from dramatiq.common import dq_name

from rifflux.queue import names

START_HINT = "start one with: rifflux worker"
MOVE_SLACK_SECONDS = 2.0
"""A worker's success this soon after a job's last update is the one that made it."""


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


def failing_workers(
    live_workers: Iterable[Mapping[str, Any]], *, since: float
) -> list[Mapping[str, Any]]:
    """Live workers whose every message fails now, if no other live worker has run one
    successfully after ``since`` (epoch seconds: the job's last move), newest failure
    first; [] otherwise. The success that moved the job ends just after its commit, so
    one within :data:`MOVE_SLACK_SECONDS` of ``since`` is not progress since."""
    failing: list[Mapping[str, Any]] = []
    for worker in live_workers:
        health = worker.get("health") or {}
        if health.get("failing_since") is not None:
            failing.append(worker)
        elif (health.get("last_ok") or 0.0) > since + MOVE_SLACK_SECONDS:
            return []
    return sorted(failing, key=lambda w: -float(w["health"]["failing_since"]))


def stall_reason(
    live_workers: Iterable[Mapping[str, Any]],
    depths: Mapping[str, int] | None,
    *,
    idle_seconds: float,
    grace_seconds: float,
    now: float | None = None,
) -> str | None:
    """Why an unfinished job that has not moved for ``idle_seconds`` is stalled, or None."""
    if idle_seconds < grace_seconds:
        return None
    live_workers = list(live_workers)
    moved_at = (time.time() if now is None else now) - idle_seconds
    failing = failing_workers(live_workers, since=moved_at)
    if failing:
        count = len(failing)
        error = failing[0]["health"].get("last_error") or "unknown error"
        return (
            f"workers are alive but failing: the job has not moved for {idle_seconds:.0f} s "
            f"and {count} live worker{' fails' if count == 1 else 's fail'} every message "
            f"(last error: {error}); see the worker log"
        )
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
