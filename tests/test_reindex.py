"""Every way to index roots goes through the one entry point, ``rifflux.reindex``: the
CLI, the MCP ``reindex`` tool, the server's start, the file watcher and auto-reindex.

Each test injects a recording launcher (``rifflux.reindex.launch_local_pool``) or spies
on ``Reindexer.submit`` and proves the caller went through it."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rifflux_testing import REPO_ROOT, make_settings, wait_until

from rifflux import cli, reindex
from rifflux.config import Settings
from rifflux.errors import RiffluxError, RootNotFoundError
from rifflux.mcp import server, tools
from rifflux.mcp.tools import ToolContext
from rifflux.queue import names
from rifflux.reindex import Reindexer
from rifflux.reindex.runner import JobRunner as IndexQueue
from rifflux.store.connection import open_index
from rifflux.store.jobs import recent_jobs
from workers.launcher import LocalPool, launch_local_pool


class FakePool:
    """A pool that was "started": the launcher was used, no process was spawned."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.running = True
        self.pids: set[int] = set()

    def alive(self) -> bool:
        return self.running

    def stop(self) -> None:
        self.running = False

    def fault_for(self, job_id: str, *, created_at: float) -> str | None:
        return None

    def owns(self, worker: Mapping[str, Any]) -> bool:
        return worker["pid"] in self.pids


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Process counts of every pool the entry point launched (with a fake launcher)."""
    counts: list[int] = []

    def fake(settings: Settings, processes: int) -> FakePool:
        counts.append(processes)
        return FakePool(settings.db_path.parent / "workers.log")

    monkeypatch.setattr(reindex, "launch_local_pool", fake)
    return counts


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Roots of every job submitted through ``Reindexer.submit``."""
    calls: list[list[str]] = []
    real = Reindexer.submit

    def spy(self: Reindexer, roots: Any, **options: Any) -> str:
        calls.append([str(r) for r in roots])
        return real(self, roots, **options)

    monkeypatch.setattr(Reindexer, "submit", spy)
    return calls


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nentry point pulsar notes\n")
    return root


@pytest.fixture
def context(tmp_path: Path, launched: list[int]) -> Iterator[ToolContext]:
    """A server's context whose entry point has the recording launcher."""
    settings = make_settings(
        tmp_path, allowed_roots=(str(tmp_path),), startup_worker_grace_seconds=0.0
    )
    ctx = ToolContext.from_settings(settings, cwd=tmp_path)
    yield ctx
    ctx.close()


def job_roots(settings: Settings) -> list[list[str]]:
    conn = open_index(settings.db_path)
    try:
        return [job.roots for job in recent_jobs(conn, 100)]
    finally:
        conn.close()


def test_the_cli_indexes_through_the_entry_point_and_its_launcher(
    tmp_path: Path, docs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    launched: list[int] = []

    def recording(settings: Settings, processes: int) -> Any:
        launched.append(processes)
        return launch_local_pool(settings, processes)

    monkeypatch.setattr(reindex, "launch_local_pool", recording)
    monkeypatch.setenv("RIFFLUX_EMBEDDING_BACKEND", "hash")
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    db = tmp_path / "index" / "index.db"
    assert cli.main(["index", str(docs), "--db", str(db), "--workers", "1"]) == 0
    assert launched == [1]
    assert "completed: indexed 1 files" in capsys.readouterr().out


def test_the_mcp_reindex_tool_submits_and_starts_workers_through_the_entry_point(
    context: ToolContext, docs: Path, launched: list[int], submitted: list[list[str]]
) -> None:
    answer = tools.reindex(context, path=str(docs), background=True)
    assert answer["status"] == "queued"
    assert submitted == [[str(docs)]]
    assert launched == [context.settings.workers]
    assert job_roots(context.settings) == [[str(docs)]]


def test_reindex_on_start_submits_then_starts_workers_through_the_entry_point(
    context: ToolContext, docs: Path, launched: list[int], submitted: list[list[str]]
) -> None:
    server.start_background_reindex(context, [docs])
    assert submitted == [[str(docs)]]
    wait_until(lambda: launched, timeout=10)


def test_the_watcher_submits_and_starts_workers_through_the_entry_point(
    context: ToolContext, docs: Path, launched: list[int], submitted: list[list[str]]
) -> None:
    watcher = server.start_watcher(context, [docs])
    try:
        wait_until(lambda: submitted, timeout=10)
        wait_until(lambda: launched, timeout=10)
    finally:
        watcher.stop()
    assert watcher.queue is context.queue
    assert submitted[0] == [str(docs)]


def test_rifflux_watch_submits_and_starts_workers_through_the_entry_point(
    tmp_path: Path,
    docs: Path,
    launched: list[int],
    submitted: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No worker is alive: the watcher's catch-up job stalls, and its first stall starts
    # a local pool through the entry point's launcher; then the command is stopped.
    monkeypatch.setenv("RIFFLUX_EMBEDDING_BACKEND", "hash")
    monkeypatch.setenv("RIFFLUX_STALL_SECONDS", "0.01")
    default, interrupt = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)

    def stop_the_command() -> None:
        try:
            wait_until(lambda: launched, timeout=30)
        finally:
            wait_until(lambda: signal.getsignal(signal.SIGTERM) is not default, timeout=30)
            os.kill(os.getpid(), signal.SIGTERM)

    stopper = threading.Thread(target=stop_the_command, daemon=True)
    stopper.start()
    try:
        assert cli.main(["watch", str(docs), "--db", str(tmp_path / "index.db")]) == 0
    finally:
        signal.signal(signal.SIGTERM, default)
        signal.signal(signal.SIGINT, interrupt)
    stopper.join(timeout=10)
    assert submitted and submitted[0] == [str(docs)]
    assert len(launched) == 1


def test_auto_reindex_submits_through_the_entry_point(
    tmp_path: Path, docs: Path, submitted: list[list[str]]
) -> None:
    settings = make_settings(
        tmp_path,
        auto_reindex_on_search=True,
        auto_reindex_paths=(str(docs),),
        allowed_roots=(str(tmp_path),),
    )
    open_index(settings.db_path).close()
    ctx = ToolContext.from_settings(settings, cwd=tmp_path)
    try:
        assert ctx.auto_reindex is not None
        assert ctx.auto_reindex.coalescer.queue is ctx.queue
        tools.search_rifflux(ctx, "pulsar", mode="lexical")
        wait_until(lambda: submitted, timeout=10)
    finally:
        ctx.close()
    assert submitted == [[str(docs)]]


def test_a_search_s_auto_reindex_check_starts_a_pool_for_a_job_without_workers(
    tmp_path: Path, docs: Path, launched: list[int]
) -> None:
    """A job left queued with no worker alive (its workers exited): a search's
    auto-reindex check adopts it, submits nothing new, and starts a local pool for it."""
    settings = make_settings(
        tmp_path,
        auto_reindex_on_search=True,
        auto_reindex_paths=(str(docs),),
        allowed_roots=(str(tmp_path),),
    )
    left = Reindexer(settings)
    try:
        job_id = left.submit([docs])
    finally:
        left.close()
    ctx = ToolContext.from_settings(settings, cwd=tmp_path)
    try:
        assert not launched
        tools.search_rifflux(ctx, "pulsar", mode="lexical")
        wait_until(lambda: launched, timeout=60)
        assert ctx.auto_reindex is not None
        assert ctx.auto_reindex.coalescer.active_job == job_id
    finally:
        ctx.close()
    assert len(launched) == 1 and len(job_roots(settings)) == 1


def test_a_missing_root_is_refused_once_in_one_line_before_any_job(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    queue = IndexQueue(settings)
    try:
        with pytest.raises(RootNotFoundError, match=r"^path to index does not exist: .*gone$"):
            Reindexer(settings, queue=queue).submit([tmp_path / "gone"])
    finally:
        queue.close()


def test_a_missing_root_of_the_mcp_tool_is_refused_before_any_worker_starts(
    context: ToolContext, docs: Path, launched: list[int]
) -> None:
    with pytest.raises(RootNotFoundError, match=r"^path to index does not exist: .*gone$"):
        tools.reindex(context, paths=[str(docs), str(docs.parent / "gone")], background=True)
    assert launched == []
    assert job_roots(context.settings) == []


def test_a_client_without_a_launcher_never_starts_a_process(tmp_path: Path) -> None:
    queue = IndexQueue(make_settings(tmp_path))
    try:
        with pytest.raises(Exception, match="start workers with `rifflux worker`"):
            queue.start_pool()
        assert queue.pool is None
    finally:
        queue.close()


# -- a watcher's pool boots at startup (issue 22) --------------------------------------


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> list[FakePool]:
    """Every pool the entry point launched (with a fake launcher)."""
    started: list[FakePool] = []

    def fake(settings: Settings, processes: int) -> FakePool:
        started.append(FakePool(settings.db_path.parent / "workers.log"))
        return started[-1]

    monkeypatch.setattr(reindex, "launch_local_pool", fake)
    return started


def beat(reindexer: Reindexer, pid: int, host: str = "worker-host") -> None:
    """A heartbeat of an index-host worker with this pid (of another host: this host's
    heartbeats count only while their process runs)."""
    reindexer.queue.presence.record_heartbeat(f"{host}:{pid}:w{pid}", names.INDEX_HOST_QUEUES)


def test_a_watchers_pool_boots_at_once_and_gives_way_to_workers_started_beside_it(
    tmp_path: Path, pools: list[FakePool]
) -> None:
    reindexer = Reindexer(make_settings(tmp_path))
    try:
        booting = threading.Thread(target=reindexer.boot_pool, args=(60.0,), daemon=True)
        booting.start()
        wait_until(lambda: pools, timeout=10)  # At once, not after the 60 s grace.
        pool = pools[0]
        pool.pids.add(111)
        beat(reindexer, 111)  # Its own worker is up: no reason to give way.
        time.sleep(3 * reindex.WORKER_POLL_SECONDS)
        assert pool.running and reindexer.queue.pool is pool
        beat(reindexer, 222)  # The Procfile's worker shows up within the grace.
        booting.join(timeout=10)
        assert not booting.is_alive()
        assert not pool.running and reindexer.queue.pool is None
        assert len(pools) == 1
    finally:
        reindexer.close()


def test_a_watchers_pool_is_not_started_beside_live_workers_and_kept_without_them(
    tmp_path: Path, pools: list[FakePool]
) -> None:
    alone = Reindexer(make_settings(tmp_path / "alone"))
    beside = Reindexer(make_settings(tmp_path / "beside"))
    try:
        kept = alone.boot_pool(0.3)
        assert kept is not None and kept.alive() and alone.queue.pool is kept
        beat(beside, 333)
        assert beside.boot_pool(60.0) is None
        assert len(pools) == 1
    finally:
        alone.close()
        beside.close()


def test_a_local_pool_owns_only_its_own_children_on_this_host() -> None:
    pool = LocalPool(SimpleNamespace(pid=os.getppid()), Path("workers.log"), None)  # type: ignore[arg-type]
    host = socket.gethostname()
    assert pool.owns({"hostname": host, "pid": os.getpid()})
    assert not pool.owns({"hostname": host + "-other", "pid": os.getpid()})
    assert not pool.owns({"hostname": host, "pid": os.getppid()})  # not its child
    assert pool.owns({"hostname": host, "pid": 2**22 + 1})  # gone: never a reason to stop


def test_an_unfinished_job_without_workers_gets_a_pool_or_fails_with_the_reason(
    tmp_path: Path, docs: Path, pools: list[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(tmp_path, stall_seconds=0.01)
    reindexer = Reindexer(settings)
    try:
        job_id = reindexer.submit([docs])
        assert reindexer.keep_jobs_moving() is pools[0]
        assert reindexer.keep_jobs_moving() is pools[0]  # Alive: never a second one.
        pools[0].stop()

        def broken(settings: Settings, processes: int) -> FakePool:
            raise RiffluxError("cannot start workers here")

        monkeypatch.setattr(reindexer.queue, "launcher", broken)
        wait_until(lambda: reindexer.stall_reason(reindexer.job(job_id)), timeout=10)
        assert reindexer.keep_jobs_moving() is None
    finally:
        reindexer.close()
    record = reindexer.job(job_id)
    assert record is not None and record.state == "failed"
    [error] = record.errors
    assert error["error"].startswith(
        "no worker is alive and a local pool could not start: cannot start workers here "
        "(no worker has consumed rifflux_plan for "
    )
