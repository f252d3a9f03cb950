"""Chaos on the Redis broker: a worker killed mid-job, Redis itself restarted mid-job.

Every test runs its own redis-server (``private_redis.PrivateRedis``) and checks the
queued job's rows against a clean in-process index of the same files.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from private_redis import (  # noqa: F401  (fixtures)
    PrivateRedis,
    private_redis_fixture,
)
from rifflux_testing import copy_corpus, index_rows, make_settings, wait_until
from test_jobs_e2e import TEST_ACTORS, reference_rows

from rifflux.config import Settings
from rifflux.reindex.runner import JobRunner as IndexQueue
from rifflux.store.jobs import JobRecord

pytestmark = pytest.mark.slow

ACKS_PATTERN = "dramatiq:__acks__.*"


def redis_settings(tmp_path: Path, url: str) -> Settings:
    return make_settings(tmp_path, broker_url=url, batch_target_bytes=20_000)


def unacked_messages(server: PrivateRedis) -> int:
    """Messages fetched by some worker process and not acked yet."""
    client = server.client()
    try:
        return sum(int(client.scard(key)) for key in client.scan_iter(ACKS_PATTERN))
    finally:
        client.close()


def progress(queue: IndexQueue, job_id: str) -> JobRecord:
    return queue.job(job_id) or JobRecord("", [], {}, "")


def assert_same_as_clean_index(tmp_path: Path, corpus: Path, settings: Settings) -> None:
    # Equal to a clean in-process index: nothing lost, no chunk written twice (chunk_id is
    # UNIQUE in the schema, so a uniqueness check of these rows could not fail).
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_a_killed_workers_unacked_batches_are_redelivered_and_the_job_completes(
    tmp_path: Path, private_redis: PrivateRedis, start_workers
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=60)
    # The shipped defaults (no URL options): what an operator gets.
    settings = redis_settings(tmp_path, private_redis.url())
    # The victim's embeds wait on a gate that never opens, so it dies holding fetched,
    # unacked batches however slow the machine is (a timed delay raced the kill under load).
    attempts = tmp_path / "embed-attempts"
    victim = start_workers(
        settings,
        module=TEST_ACTORS,
        RIFFLUX_TEST_EMBED_GATE=str(tmp_path / "never-opened"),
        RIFFLUX_TEST_EMBED_ATTEMPTS=str(attempts),
    )
    queue = IndexQueue(settings)
    try:
        job_id = queue.submit([corpus])
        wait_until(lambda: attempts.exists() and attempts.read_text().count("\n") >= 1)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        # Only the victim consumed: whatever is unacked now was held by the dead process
        # and comes back only through maintenance.
        assert unacked_messages(private_redis) > 0
        start_workers(settings, module=TEST_ACTORS)
        record = queue.wait(job_id, timeout=120)
    finally:
        queue.close()
    assert record.state == "completed", record.errors
    assert record.files_done == 60 and record.batches_done == record.batches_total
    assert_same_as_clean_index(tmp_path, corpus, settings)
    wait_until(lambda: unacked_messages(private_redis) == 0, timeout=30)


def test_a_redis_restart_mid_job_loses_its_messages_and_the_job_is_resent(
    tmp_path: Path, private_redis: PrivateRedis, start_workers
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=60)
    settings = redis_settings(tmp_path, private_redis.url())
    # Embeds wait on a gate opened only after the restart, so the job is mid-flight when
    # Redis dies however slow the machine is.
    gate = tmp_path / "gate"
    attempts = tmp_path / "embed-attempts"
    start_workers(
        settings,
        module=TEST_ACTORS,
        RIFFLUX_TEST_EMBED_GATE=str(gate),
        RIFFLUX_TEST_EMBED_ATTEMPTS=str(attempts),
    )
    queue = IndexQueue(settings)
    try:
        job_id = queue.submit([corpus])
        wait_until(lambda: attempts.exists() and attempts.read_text().count("\n") >= 1)
        assert progress(queue, job_id).state != "completed"
        private_redis.kill()  # no persistence: every queued and unacked message is gone
        time.sleep(2)
        private_redis.start()
        gate.touch()
        # Bounded: a job whose messages are lost must not leave its waiter hanging.
        record = queue.wait(job_id, timeout=120)
    finally:
        queue.close()
    assert record.state == "completed", record.errors
    assert record.files_done == 60 and record.batches_done == record.batches_total
    assert_same_as_clean_index(tmp_path, corpus, settings)
    log = (tmp_path / "workers-0.log").read_text()
    assert "redis.job_messages_lost_resent" in log


def test_a_batch_slower_than_the_heartbeat_timeout_is_embedded_once(
    tmp_path: Path, private_redis: PrivateRedis, start_workers
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=3)
    # Each embed takes 5 s, longer than the 3 s heartbeat timeout: the busy worker's
    # heartbeat (renewed by its maintenance thread and its idle delay-queue consumer)
    # must keep the other worker's maintenance from handing the batch out again.
    url = private_redis.url(query="heartbeat_timeout_ms=3000&maintenance_interval_ms=500")
    settings = redis_settings(tmp_path, url)
    for _ in range(2):
        start_workers(settings, module=TEST_ACTORS, RIFFLUX_TEST_EMBED_DELAY="5")
    queue = IndexQueue(settings)
    try:
        record = queue.wait(queue.submit([corpus]), timeout=120)
    finally:
        queue.close()
    assert record.state == "completed", record.errors
    logs = "".join(p.read_text() for p in tmp_path.glob("workers-*.log"))
    embedded = [
        (line["batch"], line["unit"], line["units"])
        for line in map(json.loads, (t for t in logs.splitlines() if t.startswith("{")))
        if line.get("event") == "job.batch_embedded"
    ]
    # Each embed unit of each batch once (a batch may go out as several units).
    assert len(embedded) == len(set(embedded)) >= record.batches_total >= 2
    assert {batch for batch, _, _ in embedded} == set(range(record.batches_total))
    per_batch = {batch: sum(1 for b, _, _ in embedded if b == batch) for batch, _, _ in embedded}
    assert all(per_batch[batch] == units for batch, _, units in embedded)
    assert_same_as_clean_index(tmp_path, corpus, settings)
