"""A waiting client never waits in silence: stalled jobs are noticed, reported, and a
local pool is started where the client may start one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from dramatiq.common import dq_name
from rifflux_testing import REPO_ROOT, copy_corpus, make_settings, worker_env

from rifflux.errors import JobStalled
from rifflux.queue import stall
from rifflux.reindex.runner import JobRunner as IndexQueue
from workers.launcher import launch_local_pool

ALL = ["rifflux_embed", "rifflux_plan", "rifflux_write"]


def test_a_queue_with_messages_and_no_consumer_stalls_after_the_grace() -> None:
    depths = {"rifflux_plan": 1, "rifflux_embed": 0, "rifflux_write": 0}
    reason = stall.stall_reason([], depths, idle_seconds=61, grace_seconds=60)
    assert reason == "no worker has consumed rifflux_plan for 61 s; start one with: rifflux worker"
    assert stall.stall_reason([], depths, idle_seconds=59, grace_seconds=60) is None


def test_only_queues_with_pending_messages_need_a_consumer() -> None:
    embed_only = [{"queues": ["rifflux_embed"]}]
    index_host = [{"queues": ["rifflux_plan", "rifflux_write"]}]
    depths = {"rifflux_embed": 3, dq_name("rifflux_write"): 1}
    assert stall.queues_without_consumer(embed_only, depths) == ["rifflux_write"]
    assert stall.queues_without_consumer(index_host, depths) == ["rifflux_embed"]
    assert stall.queues_without_consumer(embed_only + index_host, depths) == []
    # Where the broker cannot count messages, every job queue needs a consumer.
    assert stall.queues_without_consumer(index_host, None) == ["rifflux_embed"]


def test_an_empty_broker_with_an_unfinished_job_is_a_lost_message() -> None:
    workers = [{"queues": ALL}]
    reason = stall.stall_reason(workers, {q: 0 for q in ALL}, idle_seconds=90, grace_seconds=60)
    assert reason is not None and reason.startswith("no message of this job is queued")
    busy = {"rifflux_embed": 2, "rifflux_plan": 0, "rifflux_write": 0}
    assert stall.stall_reason(workers, busy, idle_seconds=90, grace_seconds=60) is None


def test_workers_alive_and_failing_are_told_apart_from_no_live_consumer() -> None:
    now = 1_000.0
    failing = {
        "queues": ALL,
        "health": {
            "failing_since": 930.0,
            "last_error": "OperationalError: disk I/O error",
            "last_ok": 900.0,
        },
    }
    embed_only = {"queues": ["rifflux_embed"], "health": None}
    depths = {"rifflux_plan": 0, "rifflux_embed": 0, "rifflux_write": 2}
    reason = stall.stall_reason(
        [failing, embed_only], depths, idle_seconds=75, grace_seconds=60, now=now
    )
    assert reason == (
        "workers are alive but failing: the job has not moved for 75 s and 1 live worker "
        "fails every message (last error: OperationalError: disk I/O error); "
        "see the worker log"
    )
    # Even when a queue lacks a consumer, failing workers are the first thing to say.
    plan_only = {**failing, "queues": ["rifflux_plan"]}
    reason = stall.stall_reason([plan_only], depths, idle_seconds=75, grace_seconds=60, now=now)
    assert reason is not None and reason.startswith("workers are alive but failing:")
    # A worker that succeeded since the job last moved: not every attempt fails.
    succeeding = {"queues": ALL, "health": {"failing_since": None, "last_ok": 990.0}}
    assert (
        stall.stall_reason(
            [failing, succeeding], depths, idle_seconds=75, grace_seconds=60, now=now
        )
        is None
    )


@pytest.mark.slow
def test_a_job_without_workers_fails_the_wait_and_shows_stalled(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=5)
    settings = make_settings(tmp_path, stall_seconds=1.5)
    queue = IndexQueue(settings)
    try:
        job_id = queue.submit([corpus])
        with pytest.raises(JobStalled) as raised:
            queue.wait(job_id, timeout=60)
        job = next(j for j in queue.status()["recent_jobs"] if j["job_id"] == job_id)
    finally:
        queue.close()
    assert str(raised.value).startswith(f"job {job_id} is stalled: no worker has consumed ")
    assert "rifflux_plan" in str(raised.value) and "rifflux worker" in str(raised.value)
    assert job["state"] == "queued" and job["stalled"] is True
    assert job["stalled_reason"].startswith("no worker has consumed rifflux_plan")

    # The CLI, as a user runs it, shows the mark too.
    env = worker_env(settings, RIFFLUX_STALL_SECONDS="1.5")
    shown = subprocess.run(
        [sys.executable, "-m", "rifflux.cli", "status"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "stalled: no worker has consumed rifflux_plan" in shown.stdout


@pytest.mark.slow
def test_a_stalled_wait_that_may_start_workers_starts_a_pool_and_completes(
    tmp_path: Path,
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=5)
    settings = make_settings(tmp_path, stall_seconds=1.0, workers=1)
    queue = IndexQueue(settings, launcher=launch_local_pool)
    try:
        job_id = queue.submit([corpus])
        record = queue.wait(job_id, timeout=120, start_workers=True)
        assert queue.pool is not None and queue.pool.alive()
    finally:
        queue.close()
    assert (record.state, record.files_done) == ("completed", 5)
