"""Broker chaos, measured: kill -9 → job moving again, Redis restart, a partitioned worker.

Scenarios (each prints one JSON line per trial):

- ``recovery``: one worker (all queues, one thread, prefetch 2) holds two of the three
  embed batches of a small job and is killed with ``kill -9`` inside the first (a 3 s
  embed); a replacement worker is started at once (as a supervisor would). Reported:
  seconds from the kill to the job completed, i.e. until the dead worker's messages
  were handed out again (the replacement boots in ~1-2 s and then embeds without
  delay). Brokers: ``redis`` (Rifflux's maintenance, shipped defaults),
  ``redis-dramatiq`` (``heartbeat_timeout_ms=60000&maintenance_interval_ms=none``:
  Dramatiq's own behaviour), ``rabbitmq`` (a private vhost on the RabbitMQ at
  127.0.0.1:5672, removed afterwards).
- ``redis-restart``: a private redis-server is killed mid-job and started again empty.
- ``partition``: an embed-only worker in a network namespace loses its link for 8 s.

Redis is always a private redis-server on a free loopback port (or the namespace's veth
address). Wall-clock seconds: what is measured here is waiting, not CPU.

    .venv/bin/python benchmarks/chaos_network.py recovery --broker redis --trials 3
    .venv/bin/python benchmarks/chaos_network.py recovery --broker redis-dramatiq
    .venv/bin/python benchmarks/chaos_network.py redis-restart partition
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "queue")]

from netns import NetNamespace, netns_unavailable_reason  # noqa: E402
from private_redis import PrivateRedis  # noqa: E402
from rifflux_testing import copy_corpus, index_rows, make_settings, worker_env  # noqa: E402
from test_jobs_e2e import TEST_ACTORS, reference_rows  # noqa: E402

from rifflux.config import Settings  # noqa: E402
from rifflux.queue import names  # noqa: E402
from rifflux.reindex.runner import JobRunner as IndexQueue  # noqa: E402
from rifflux.store.jobs import JobRecord  # noqa: E402

DRAMATIQ_DEFAULTS = "heartbeat_timeout_ms=60000&maintenance_interval_ms=none"
PARTITION_QUERY = "heartbeat_timeout_ms=3000&maintenance_interval_ms=500"
JOB_TIMEOUT = 40 * 60


class Workers:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.started: list[subprocess.Popen[bytes]] = []

    def start(
        self, env: dict[str, str], queues: tuple[str, ...] = (), prefix: list[str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"workers-{len(self.started)}.log").open("ab")
        command = [*(prefix or []), sys.executable, "-m", "dramatiq", TEST_ACTORS]
        command += ["--processes", "1", "--threads", "1"]
        if queues:
            command += ["--queues", *queues]
        proc = subprocess.Popen(
            command,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.workdir,
        )
        log.close()
        self.started.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self) -> None:
        for proc in self.started:
            self.kill(proc)


def wait_for(predicate: Callable[[], object], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout}s")
        time.sleep(0.05)


def progress(queue: IndexQueue, job_id: str) -> JobRecord:
    return queue.job(job_id) or JobRecord("", [], {}, "")


def follow(queue: IndexQueue, job_id: str, since: float) -> dict[str, float]:
    """Seconds from ``since`` to the job's next written batch and to its end."""
    done = progress(queue, job_id).batches_done
    moving: float | None = None
    deadline = since + JOB_TIMEOUT
    while time.monotonic() < deadline:
        record = progress(queue, job_id)
        if moving is None and record.batches_done > done:
            moving = time.monotonic() - since
        if record.finished:
            return {
                "moving_again_s": round(moving or 0.0, 2),
                "completed_s": round(time.monotonic() - since, 2),
            }
        time.sleep(0.05)
    raise TimeoutError(f"job {job_id} did not finish within {JOB_TIMEOUT}s")


def check_rows(workdir: Path, corpus: Path, settings: Settings) -> dict[str, object]:
    stored = index_rows(settings.db_path)
    chunk_ids = [row[2] for row in stored]
    return {
        "rows_equal_clean_run": stored == reference_rows(workdir, corpus, settings),
        "duplicate_chunks": len(chunk_ids) - len(set(chunk_ids)),
    }


def count_in_logs(workdir: Path, event: str) -> int:
    return sum(p.read_text(errors="replace").count(event) for p in workdir.glob("workers-*.log"))


@contextmanager
def private_redis(workdir: Path, bind: tuple[str, ...] = ("127.0.0.1",)) -> Iterator[PrivateRedis]:
    server = PrivateRedis(workdir / "redis", bind=bind)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@contextmanager
def rabbitmq_vhost() -> Iterator[str]:
    vhost = f"rifflux-chaos-{uuid.uuid4().hex[:8]}"
    subprocess.run(["rabbitmqctl", "-q", "add_vhost", vhost], check=True)
    try:
        subprocess.run(
            ["rabbitmqctl", "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
            check=True,
        )
        yield f"amqp://guest:guest@127.0.0.1:5672/{quote(vhost, safe='')}"
    finally:
        subprocess.run(["rabbitmqctl", "-q", "delete_vhost", vhost], check=False)


@contextmanager
def broker_url(kind: str, workdir: Path) -> Iterator[str]:
    if kind == "rabbitmq":
        with rabbitmq_vhost() as url:
            yield url
        return
    with private_redis(workdir) as server:
        yield server.url(query=DRAMATIQ_DEFAULTS if kind == "redis-dramatiq" else "")


def recovery_trial(kind: str) -> dict[str, object]:
    workdir = Path(tempfile.mkdtemp(prefix=f"rifflux-chaos-{kind}-"))
    # Three files: three embed batches, two of them prefetched by the single worker.
    corpus = copy_corpus(workdir / "docs", limit=3)
    with broker_url(kind, workdir) as url:
        settings = make_settings(workdir, broker_url=url, batch_target_bytes=20_000)
        workers = Workers(workdir)
        queue = IndexQueue(settings)
        try:
            victim = workers.start(worker_env(settings, RIFFLUX_TEST_EMBED_DELAY="3"))
            job_id = queue.submit([corpus])
            wait_for(lambda: progress(queue, job_id).planned)
            time.sleep(1.0)  # inside the first batch's 3 s embed
            workers.kill(victim)
            killed = time.monotonic()
            workers.start(worker_env(settings))
            record = queue.wait(job_id, timeout=JOB_TIMEOUT)
            recovered = time.monotonic() - killed
        finally:
            queue.close()
            workers.stop()
    return {
        "scenario": "recovery",
        "broker": kind,
        "batches": record.batches_total,
        "state": record.state,
        "kill_to_completed_s": round(recovered, 2),
        **check_rows(workdir, corpus, settings),
    }


def redis_restart_trial() -> dict[str, object]:
    workdir = Path(tempfile.mkdtemp(prefix="rifflux-chaos-restart-"))
    corpus = copy_corpus(workdir / "docs", limit=60)
    with private_redis(workdir) as server:
        settings = make_settings(workdir, broker_url=server.url(), batch_target_bytes=20_000)
        workers = Workers(workdir)
        queue = IndexQueue(settings)
        try:
            workers.start(worker_env(settings, RIFFLUX_TEST_EMBED_DELAY="0.5"))
            job_id = queue.submit([corpus])
            wait_for(lambda: progress(queue, job_id).batches_done >= 2)
            done_before = progress(queue, job_id).batches_done
            server.kill()
            time.sleep(2)
            server.start()
            timings = follow(queue, job_id, time.monotonic())
            record = progress(queue, job_id)
        finally:
            queue.close()
            workers.stop()
    return {
        "scenario": "redis-restart",
        "state": record.state,
        "batches": record.batches_total,
        "batches_done_at_restart": done_before,
        **{f"restart_to_{key}": value for key, value in timings.items()},
        "plan_resends": count_in_logs(workdir, "redis.job_messages_lost_resent"),
        **check_rows(workdir, corpus, settings),
    }


def partition_trial(host_embed_worker: bool) -> dict[str, object]:
    reason = netns_unavailable_reason()
    if reason:
        return {"scenario": "partition", "skipped": reason}
    workdir = Path(tempfile.mkdtemp(prefix="rifflux-chaos-partition-"))
    corpus = copy_corpus(workdir / "docs", limit=60)
    ns = NetNamespace()
    workers = Workers(workdir)
    try:
        ns.create()
        with private_redis(workdir, bind=("127.0.0.1", ns.host_addr)) as server:
            url = server.url(query=PARTITION_QUERY)
            settings = make_settings(workdir, broker_url=url, batch_target_bytes=20_000)
            env = worker_env(settings, RIFFLUX_TEST_EMBED_DELAY="0.5")
            ns_env = dict(env, RIFFLUX_BROKER_URL=server.url(ns.host_addr, query=PARTITION_QUERY))
            workers.start(env, names.INDEX_HOST_QUEUES)
            workers.start(ns_env, (names.EMBED_QUEUE,), prefix=ns.command([]))
            if host_embed_worker:
                workers.start(env, (names.EMBED_QUEUE,))
            queue = IndexQueue(settings)
            try:
                job_id = queue.submit([corpus])
                wait_for(lambda: progress(queue, job_id).batches_done >= 2)
                ns.cut()
                time.sleep(8)
                ns.restore()
                timings = follow(queue, job_id, time.monotonic())
                record = progress(queue, job_id)
            finally:
                queue.close()
    finally:
        workers.stop()
        ns.delete()
    return {
        "scenario": "partition",
        "host_embed_worker": host_embed_worker,
        "cut_s": 8,
        "state": record.state,
        "batches": record.batches_total,
        **{f"restore_to_{key}": value for key, value in timings.items()},
        "plan_resends": count_in_logs(workdir, "redis.job_messages_lost_resent"),
        "identity_renewals": count_in_logs(workdir, "redis.maintenance_recovered"),
        **check_rows(workdir, corpus, settings),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenarios", nargs="+", choices=("recovery", "redis-restart", "partition"))
    brokers = ("redis", "redis-dramatiq", "rabbitmq")
    parser.add_argument("--broker", default="redis", choices=brokers)
    parser.add_argument("--trials", type=int, default=1)
    args = parser.parse_args()
    machine = {"machine": platform.platform(), "cpus": os.cpu_count(), "python": sys.version[:6]}
    print(json.dumps(machine), flush=True)
    for scenario in args.scenarios:
        for _ in range(args.trials):
            if scenario == "recovery":
                result = recovery_trial(args.broker)
            elif scenario == "redis-restart":
                result = redis_restart_trial()
            else:
                for host_embed_worker in (False, True):
                    print(json.dumps(partition_trial(host_embed_worker)), flush=True)
                continue
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
