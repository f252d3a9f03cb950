"""Chaos: an embed-only worker in its own network namespace loses its link mid-job.

The index host (plan and write queues) runs on the host; the embed-only worker runs in a
namespace joined by a veth pair and reaches a private Redis at the host end's address.
The link goes down for longer than the heartbeat timeout, then comes back. The job must
complete with exactly the rows of a clean in-process index, no chunk written twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns import NetNamespace, netns_unavailable_reason
from private_redis import PrivateRedis, redis_server_available
from rifflux_testing import copy_corpus, index_rows, make_settings, wait_until, worker_env
from test_jobs_e2e import TEST_ACTORS, reference_rows

from rifflux.config import Settings
from rifflux.queue import names
from rifflux.reindex.runner import JobRunner as IndexQueue
from rifflux.store.jobs import JobRecord

# One network namespace at a time: the tests share addresses and interface names.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("netns")]

# Short timings so the partition outlasts the heartbeat timeout within seconds.
RECOVERY_QUERY = "heartbeat_timeout_ms=3000&maintenance_interval_ms=500"
CUT_SECONDS = 8.0


@pytest.fixture
def partition(tmp_path: Path) -> Iterator[tuple[NetNamespace, PrivateRedis]]:
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"cannot create a network namespace: {reason}")
    if not redis_server_available():
        pytest.skip("redis-server is not installed; this test needs a private Redis")
    ns = NetNamespace()
    server: PrivateRedis | None = None
    try:
        ns.create()
        server = PrivateRedis(tmp_path / "redis", bind=("127.0.0.1", ns.host_addr))
        server.start()
        yield ns, server
    finally:
        if server is not None:
            server.kill()
        ns.delete()


class Workers:
    """Worker process groups started by the test, killed at the end whatever happens."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, argv_prefix: list[str], env: dict[str, str], queues: tuple[str, ...]):
        log = (self.tmp_path / f"workers-{len(self.started)}.log").open("ab")
        command = [*argv_prefix, sys.executable, "-m", "dramatiq", TEST_ACTORS]
        command += ["--processes", "1", "--threads", "1", "--queues", *queues]
        proc = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.started.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    started = Workers(tmp_path)
    try:
        yield started
    finally:
        started.stop()


def progress(queue: IndexQueue, job_id: str) -> JobRecord:
    return queue.job(job_id) or JobRecord("", [], {}, "")


def run_partitioned_job(
    tmp_path: Path,
    ns: NetNamespace,
    server: PrivateRedis,
    workers: Workers,
    *,
    host_embed_worker: bool,
) -> tuple[Settings, Path, JobRecord]:
    corpus = copy_corpus(tmp_path / "docs", limit=60)
    settings = make_settings(
        tmp_path, broker_url=server.url(query=RECOVERY_QUERY), batch_target_bytes=20_000
    )
    host_env = worker_env(settings, RIFFLUX_TEST_EMBED_DELAY="0.5")
    ns_env = dict(host_env, RIFFLUX_BROKER_URL=server.url(ns.host_addr, query=RECOVERY_QUERY))
    workers.start([], host_env, names.INDEX_HOST_QUEUES)
    workers.start(ns.command([]), ns_env, (names.EMBED_QUEUE,))
    if host_embed_worker:
        workers.start([], host_env, (names.EMBED_QUEUE,))
    queue = IndexQueue(settings)
    try:
        job_id = queue.submit([corpus])
        wait_until(lambda: progress(queue, job_id).batches_done >= 2)
        ns.cut()
        time.sleep(CUT_SECONDS)
        ns.restore()
        record = queue.wait(job_id, timeout=150)
    finally:
        queue.close()
    return settings, corpus, record


def assert_same_as_clean_index(tmp_path: Path, corpus: Path, settings: Settings) -> None:
    # Equal to a clean in-process index: nothing lost, no chunk written twice (chunk_id is
    # UNIQUE in the schema, so a uniqueness check of these rows could not fail).
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


@pytest.mark.parametrize("host_embed_worker", [False, True], ids=["alone", "with-host-embedder"])
def test_an_embed_worker_cut_off_longer_than_its_lease_loses_and_duplicates_nothing(
    tmp_path: Path, partition, workers: Workers, host_embed_worker: bool
) -> None:
    ns, server = partition
    settings, corpus, record = run_partitioned_job(
        tmp_path, ns, server, workers, host_embed_worker=host_embed_worker
    )
    assert record.state == "completed", record.errors
    assert record.files_done == 60 and record.batches_done == record.batches_total
    assert_same_as_clean_index(tmp_path, corpus, settings)
    # The namespaced worker is still alive and back in touch: its heartbeat is recent.
    assert workers.started[1].poll() is None
    queue = IndexQueue(settings)
    try:
        wait_until(
            lambda: any(w["queues"] == [names.EMBED_QUEUE] for w in queue.live_workers()),
            timeout=60,
        )
    finally:
        queue.close()
