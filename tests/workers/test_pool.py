"""The supervised worker pool, with real processes: kill -9, recycling, crash loops,
graceful stops, and pools that never outlive whoever started them."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rifflux_testing import (
    REPO_ROOT,
    alive,
    children_of,
    copy_corpus,
    files_not_found_lexically,
    index_rows,
    queue_settings,
    reference_rows,
    wait_until,
    worker_env,
)

from rifflux.config import Settings
from rifflux.reindex.runner import JobRunner as IndexQueue
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService
from rifflux.status import index_status
from rifflux.store.connection import connect
from rifflux.store.jobs import JobRecord
from workers import pool as pool_module
from workers.child import (
    PeakMemoryMiddleware,
    RecycleMiddleware,
    memory_status,
    peak_resident_bytes,
)
from workers.pool import PoolSpec, WorkerPool, backoff_seconds

pytestmark = pytest.mark.slow

TEST_ACTORS = "rifflux_test_actors"


class Pool:
    """``rifflux worker`` as an operator runs it, in its own session."""

    def __init__(self, tmp_path: Path, settings: Settings, processes: int, **env: str) -> None:
        self.log_path = tmp_path / f"pool-{time.monotonic_ns()}.log"
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rifflux.cli", "worker", "--processes", str(processes)],
            env=worker_env(settings, RIFFLUX_WORKER_ACTORS=TEST_ACTORS, **env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO_ROOT,
        )
        self.processes = processes

    def children(self) -> list[int]:
        return [pid for pid in children_of(self.process.pid) if alive(pid)]

    def wait_full(self, timeout: float = 60) -> list[int]:
        wait_until(lambda: len(self.children()) == self.processes, timeout=timeout)
        return self.children()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()
        return self.process.returncode


@pytest.fixture
def pools(tmp_path: Path) -> Iterator[list[Pool]]:
    started: list[Pool] = []
    yield started
    for pool in started:
        pool.stop()
        if pool.process.poll() is None:
            os.killpg(pool.process.pid, signal.SIGKILL)


def job_of(queue: IndexQueue, job_id: str) -> JobRecord:
    return queue.job(job_id) or JobRecord("", [], {}, "")


def test_killing_a_child_replaces_it_and_the_pool_keeps_serving(tmp_path: Path, pools) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=40)
    settings = queue_settings(tmp_path)
    pool = Pool(tmp_path, settings, 2)
    pools.append(pool)
    first = pool.wait_full()
    os.kill(first[0], signal.SIGKILL)
    wait_until(lambda: first[0] not in pool.children())
    replaced = pool.wait_full()
    assert first[0] not in replaced and first[1] in replaced
    assert pool.process.poll() is None

    queue = IndexQueue(settings)
    try:
        record = queue.wait(queue.submit([corpus]), timeout=120)
    finally:
        queue.close()
    assert (record.state, record.files_done) == ("completed", 40)
    assert pool.stop() == 0
    assert not any(alive(pid) for pid in replaced)


def test_random_kills_during_a_job_lose_and_duplicate_nothing(tmp_path: Path, pools) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=120)
    settings = queue_settings(tmp_path)
    pool = Pool(tmp_path, settings, 2, RIFFLUX_TEST_EMBED_DELAY="0.4")
    pools.append(pool)
    pool.wait_full()
    queue = IndexQueue(settings)
    kills = 0
    rng = random.Random(7)
    deadline = time.monotonic() + 300
    try:
        job_id = queue.submit([corpus])
        while not job_of(queue, job_id).finished:
            assert time.monotonic() < deadline, "the job did not finish"
            assert pool.process.poll() is None, pool.log_path.read_text()[-2000:]
            time.sleep(rng.uniform(1.0, 2.5))
            # Only workers that booted (they sent a heartbeat): an operator's kill -9 or
            # an OOM kill hits a working process, and boot failures are another test's.
            booted = {w["pid"] for w in queue.live_workers()} & set(pool.children())
            if booted and not job_of(queue, job_id).finished:
                os.kill(rng.choice(sorted(booted)), signal.SIGKILL)
                kills += 1
        record = queue.wait(job_id, timeout=5)
    finally:
        queue.close()
    assert kills >= 2
    assert "pool.stopped" not in pool.log_path.read_text()
    assert record.state == "completed", record.errors
    assert record.files_done == 120
    stored = index_rows(settings.db_path)
    assert stored == reference_rows(tmp_path, corpus, settings)
    pool.wait_full()


@pytest.mark.parametrize("phase", ["rows", "vectors"])
def test_kill_9_in_the_middle_of_a_write_transaction_leaves_no_partial_batch(
    tmp_path: Path, pools, phase: str
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=60)
    settings = queue_settings(tmp_path)
    marker = tmp_path / "writer.pid"
    pool = Pool(
        tmp_path,
        settings,
        2,
        RIFFLUX_TEST_WRITE_PAUSE_FILE=str(marker),
        RIFFLUX_TEST_WRITE_PAUSE_PHASE=phase,
    )
    pools.append(pool)
    pool.wait_full()
    queue = IndexQueue(settings)
    try:
        job_id = queue.submit([corpus])
        wait_until(marker.exists, timeout=120)
        writer = int(marker.read_text())
        # The writer sleeps inside its transaction with its rows (or vectors) applied:
        # none of them is visible.
        reader = connect(settings.db_path, readonly=True)
        try:
            table = "chunks" if phase == "rows" else "embeddings"
            visible = reader.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            job = job_of(queue, job_id)
            written = job.batches_written if phase == "rows" else job.batches_done
        finally:
            reader.close()
        os.kill(writer, signal.SIGKILL)
        record = queue.wait(job_id, timeout=120)
    finally:
        queue.close()
    assert written == 0 and visible == 0
    assert record.state == "completed", record.errors
    stored = index_rows(settings.db_path)
    assert stored == reference_rows(tmp_path, corpus, settings)


def test_children_are_recycled_after_max_messages_and_the_job_is_unchanged(
    tmp_path: Path, pools
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=60)
    settings = queue_settings(tmp_path)
    pool = Pool(tmp_path, settings, 1, RIFFLUX_WORKER_MAX_MESSAGES="6")
    pools.append(pool)
    first = pool.wait_full()
    queue = IndexQueue(settings)
    try:
        record = queue.wait(queue.submit([corpus]), timeout=180)
    finally:
        queue.close()
    assert record.state == "completed", record.errors
    assert record.batches_total >= 6
    assert first[0] not in pool.children()
    log = pool.log_path.read_text()
    recycled = log.count("pool.child_recycled")
    # One plan, batches_total chunks, embeds and vector writes, one finalize; a child
    # stops after its 6th message, or a little later: each of its two workers (embed and
    # index-host queues) may be running one more, and may have taken one from its
    # prefetch by then.
    messages = 1 + 3 * record.batches_total + 1
    assert recycled >= messages // 10 - 1
    assert "pool.child_died" not in log
    # Each fresh child's first message lifts its peak past the first report's step.
    assert '"event": "worker.peak_rss"' in log and '"actor": "' in log
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def _niceness(pid: int) -> int:
    # /proc/<pid>/stat: field 19 is the nice value; split after the command's ")".
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def test_children_run_worker_nice_levels_below_the_pool(tmp_path: Path, pools) -> None:
    settings = queue_settings(tmp_path)
    default = Pool(tmp_path, settings, 1)
    pools.append(default)
    chosen = Pool(tmp_path, settings, 1, RIFFLUX_WORKER_NICE="3")
    pools.append(chosen)
    for pool, levels in ((default, Settings().worker_nice), (chosen, 3)):
        (child,) = pool.wait_full()
        want = min(19, _niceness(pool.process.pid) + levels)
        # The child renices itself as it boots, just after the pool has spawned it.
        wait_until(lambda child=child, want=want: _niceness(child) == want, timeout=30)
    assert Settings().worker_nice == 10


def test_recycle_middleware_asks_to_stop_past_the_memory_limit() -> None:
    stop = threading.Event()
    middleware = RecycleMiddleware(stop, max_messages=0, max_rss_bytes=1)
    middleware.after_process_message(None, None)  # type: ignore[arg-type]
    assert stop.is_set() and middleware.reason is not None
    assert middleware.reason.startswith("resident memory")

    calm = threading.Event()
    unlimited = RecycleMiddleware(calm, max_messages=0, max_rss_bytes=0)
    for _ in range(100):
        unlimited.after_process_message(None, None)  # type: ignore[arg-type]
    assert not calm.is_set() and unlimited.processed == 100


def test_peak_memory_is_reported_once_per_step_of_growth(monkeypatch) -> None:
    reports: list[dict[str, object]] = []
    monkeypatch.setattr(
        "workers.child.log.info", lambda event, **fields: reports.append({"event": event, **fields})
    )

    class Message:
        actor_name = "chunk_batch"

    # The peak each message ends at: other threads of this test process allocate too, so
    # the readings are given, not taken.
    mib = 2**20
    peaks = iter([100 * mib, 100 * mib + mib // 2, 101 * mib, 101 * mib + 1, 103 * mib])
    middleware = PeakMemoryMiddleware(step_bytes=mib, peak_bytes=lambda: next(peaks))
    for _ in range(5):
        middleware.after_process_message(None, Message())  # type: ignore[arg-type]
    assert [r["actor"] for r in reports] == ["chunk_batch"] * 3
    assert middleware.reported == 103 * mib
    status = memory_status()
    assert status["peak_mib"] >= status["anon_mib"] > 0
    assert peak_resident_bytes() >= status["anon_mib"] * mib


def test_backoff_doubles_and_is_capped() -> None:
    delays = [backoff_seconds(n) for n in range(1, 10)]
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert delays[-1] == pool_module.BACKOFF_CAP_SECONDS
    assert backoff_seconds(0) == 0.0


def test_a_crash_loop_stops_the_pool_with_one_line_naming_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Children that cannot even import their actors die at once, every time.
    monkeypatch.setattr(pool_module, "BACKOFF_BASE_SECONDS", 0.01)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    spec = PoolSpec(processes=2, actors="no_such_actors_module")
    deaths: list[int] = []
    pool = WorkerPool(spec, env=env, log_name="/var/log/w.log", on_child_death=deaths.append)
    assert pool.run() == pool_module.EXIT_CRASH_LOOP
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("rifflux: error: worker processes failed to start 6 times within 60 s")
    assert line.endswith("the pool stopped; see /var/log/w.log")
    assert len(deaths) == 6 and pool.child_pids() == []


def test_sigterm_stops_the_pool_gracefully(tmp_path: Path, pools) -> None:
    settings = queue_settings(tmp_path)
    pool = Pool(tmp_path, settings, 2)
    pools.append(pool)
    children = pool.wait_full()
    assert pool.stop() == 0
    assert not any(alive(pid) for pid in children)
    assert "pool.child_died" not in pool.log_path.read_text()


def test_a_local_pool_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    settings = queue_settings(tmp_path)
    script = (
        "import sys, time\n"
        "from rifflux.config import Settings\n"
        "from rifflux.reindex.runner import JobRunner as IndexQueue\n"
        "from workers.launcher import launch_local_pool\n"
        "queue = IndexQueue(Settings.from_env(), launcher=launch_local_pool)\n"
        "pool = queue.start_pool(2)\n"
        "print('POOL', pool.process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    starter = subprocess.Popen(
        [sys.executable, "-c", script],
        env=worker_env(settings),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert starter.stdout is not None
        line = b""
        while not line.startswith(b"POOL "):
            line = starter.stdout.readline()
            assert line, "the starter exited"
        supervisor = int(line.split()[1])
        wait_until(lambda: len([p for p in children_of(supervisor) if alive(p)]) == 2)
        workers = children_of(supervisor)
        starter.kill()
        starter.wait()
        wait_until(lambda: not alive(supervisor), timeout=60)
        wait_until(lambda: not any(alive(pid) for pid in workers), timeout=60)
    finally:
        if _group_alive(starter.pid):
            os.killpg(starter.pid, signal.SIGKILL)
        starter.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_kill_9_of_rifflux_index_takes_its_local_pool_with_it(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=60)
    settings = queue_settings(tmp_path)
    env = worker_env(settings, RIFFLUX_WORKER_ACTORS=TEST_ACTORS, RIFFLUX_TEST_EMBED_DELAY="0.5")
    index = subprocess.Popen(
        [sys.executable, "-m", "rifflux.cli", "index", str(corpus), "--workers", "2"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: len(children_of(index.pid)) == 1, timeout=60)
        [supervisor] = children_of(index.pid)
        wait_until(lambda: len([p for p in children_of(supervisor) if alive(p)]) == 2)
        workers = children_of(supervisor)
        index.kill()
        index.wait()
        wait_until(lambda: not any(alive(pid) for pid in [supervisor, *workers]), timeout=60)
    finally:
        if _group_alive(index.pid):
            os.killpg(index.pid, signal.SIGKILL)


def test_every_file_is_keyword_searchable_while_the_vector_phase_is_held_back(
    tmp_path: Path, pools
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=40)
    settings = queue_settings(tmp_path)
    gate = tmp_path / "embed.gate"
    pool = Pool(tmp_path, settings, 2, RIFFLUX_TEST_EMBED_GATE=str(gate))
    pools.append(pool)
    pool.wait_full()
    queue = IndexQueue(settings)
    service = SearchService(settings)
    try:
        job_id = queue.submit([corpus])
        # Every embed waits at the gate, each worker process's embed thread with it; the
        # index-host threads still chunk and write every batch.
        wait_until(lambda: job_of(queue, job_id).phase == "embedding", timeout=120)
        held = job_of(queue, job_id)
        status = index_status(service, queue.status)
        assert files_not_found_lexically(service, corpus, "docs") == []
        assert service.search("agent instructions", top_k=5, mode="semantic") == []
        hybrid = service.search("agent instructions", top_k=5, mode="hybrid")
        # A search answered now says that vectors are missing and what that means.
        answered = service.search_response(SearchRequest("agent instructions", top_k=5))
        gate.touch()
        record = queue.wait(job_id, timeout=120)
        after = index_status(service, queue.status)
    finally:
        service.close()
        queue.close()
    assert held.state == "running" and held.files_written == held.files_planned == 40
    assert held.phases()["lexical"]["chunks_done"] == status["chunks"] > 0
    assert status["embeddings"] == 0 and status["embedding_coverage"] == 0.0
    [shown] = status["recent_jobs"]
    assert (shown["state"], shown["phase"]) == ("running", "embedding")
    assert shown["phases"]["lexical"] == {
        "files_done": 40,
        "files_total": 40,
        "chunks_done": status["chunks"],
    }
    assert shown["phases"]["embedding"]["files_done"] == 0
    assert status["roots"] == [
        {
            "root": "docs",
            "files": 40,
            "chunks": status["chunks"],
            "embeddings": 0,
            "embedding_coverage": 0.0,
        }
    ]
    assert hybrid and all(h["score_breakdown"]["semantic_rank"] is None for h in hybrid)
    assert answered["embedding_coverage"] == 0.0
    assert answered["warning"].startswith("0% of chunks have vectors")
    assert (record.state, record.phase) == ("completed", "done"), record.errors
    assert after["embedding_coverage"] == 1.0 and after["roots"][0]["embedding_coverage"] == 1.0
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)
