"""kill -9 of the MCP server in the middle of a job: its local pool dies with it, and
the restarted server resumes the job to completion and reports it in index_status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from http_support import free_port, http_session, wait_until_listening
from mcp_support import IndexedTree, server_command
from rifflux_testing import REPO_ROOT, alive, children_of, copy_corpus, index_rows, wait_until

from rifflux.index.indexer import Indexer
from rifflux.queue.client import IndexQueue
from rifflux.store.jobs import JobRecord

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture(name="anyio_backend")
def anyio_backend_fixture() -> str:
    return "asyncio"


def start_server(tree: IndexedTree, log: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = tree.env(
        RIFFLUX_WORKER_ACTORS="rifflux_test_actors",
        # Embeds wait on the gate, opened only for the restarted server: the job is
        # certainly unfinished when the first server is killed, however slow the machine.
        RIFFLUX_TEST_EMBED_GATE=str(tree.root.parent / "gate"),
        RIFFLUX_TEST_EMBED_ATTEMPTS=str(tree.root.parent / "embed-attempts"),
        RIFFLUX_BATCH_TARGET_BYTES="20000",
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests" / "queue")]),
    )
    proc = subprocess.Popen(
        server_command("--transport", "http", "--port", str(port), *args),
        env=env,
        cwd=tree.root,
        stdin=subprocess.DEVNULL,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    wait_until_listening(proc, port)
    return proc, port


def server_indexing_80_files(
    tmp_path: Path,
) -> tuple[IndexedTree, Path, subprocess.Popen[bytes], IndexQueue]:
    """A server started with ``--reindex-on-start`` over 80 corpus files (its embeds held
    at the gate), its log and a queue client on its index."""
    root = tmp_path / "work"
    copy_corpus(root / "docs", limit=80)
    tree = IndexedTree(root=root, db_path=root / ".rifflux" / "index.db")
    log = tmp_path / "server.log"
    server, _ = start_server(tree, log, "--reindex-on-start", "docs")
    return tree, log, server, IndexQueue(tree.settings())


def embedding_job(queue: IndexQueue, tmp_path: Path) -> str:
    """The id of the server's reindex-on-start job, once a worker has tried to embed."""
    wait_until(lambda: queue.db_path.exists(), timeout=30)
    job_id: str = queue.status()["recent_jobs"][0]["job_id"]
    attempts = tmp_path / "embed-attempts"
    wait_until(lambda: attempts.exists() and attempts.read_text().count("\n") >= 1, timeout=120)
    return job_id


async def test_a_killed_server_leaves_no_pool_and_its_restart_finishes_the_job(
    tmp_path: Path,
) -> None:
    tree, log, server, queue = server_indexing_80_files(tmp_path)
    root, settings = tree.root, tree.settings()
    try:
        job_id = embedding_job(queue, tmp_path)

        def job() -> JobRecord:
            return job_of(queue, job_id)

        assert not job().finished
        pools = children_of(server.pid)
        workers = [pid for pool in pools for pid in children_of(pool)]
        assert pools and workers
        os.kill(server.pid, signal.SIGKILL)
        server.wait()
        # No orphans: the pool and its workers die with the server.
        wait_until(lambda: not any(alive(pid) for pid in pools + workers), timeout=60)
        assert not job().finished

        (tmp_path / "gate").touch()
        server, port = start_server(tree, log)
        wait_until(lambda: job().finished, timeout=180)
        async with http_session(f"http://127.0.0.1:{port}/mcp") as session:
            result = await session.call_tool("index_status", {})
        assert not result.is_error
        status = result.structured_content or json.loads(result.content[0].text)
    finally:
        queue.close()
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=60)
    shown = next(j for j in status["recent_jobs"] if j["job_id"] == job_id)
    assert shown["state"] == "completed" and shown["stalled"] is False
    assert shown["files_done"] == 80
    reference = tree.settings().with_overrides(db_path=tmp_path / "reference" / "index.db")
    Indexer(reference).run([root / "docs"])
    assert index_rows(settings.db_path) == index_rows(reference.db_path)


def job_of(queue: IndexQueue, job_id: str) -> JobRecord:
    return queue.job(job_id) or JobRecord("", [], {}, "")


def kill_at_once(pids: list[int]) -> None:
    """kill -9 of every process, none able to clean up after another: all are stopped
    first (so no pool reaps a dead worker and forgets its heartbeat), then killed."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    for pid in reversed(pids):
        os.kill(pid, signal.SIGKILL)


async def test_a_server_killed_with_its_pool_and_workers_is_finished_by_an_immediate_restart(
    tmp_path: Path,
) -> None:
    tree, log, server, queue = server_indexing_80_files(tmp_path)
    root, settings = tree.root, tree.settings()
    try:
        job_id = embedding_job(queue, tmp_path)
        pools = children_of(server.pid)
        workers = [pid for pool in pools for pid in children_of(pool)]
        assert pools and workers
        kill_at_once([server.pid, *pools, *workers])
        server.wait()
        # The killed workers' heartbeats are seconds old: they look alive by age alone.
        assert {w["pid"] for w in queue.presence.heartbeats()} & set(workers)
        assert not job_of(queue, job_id).finished

        (tmp_path / "gate").touch()
        server, _ = start_server(tree, log)
        wait_until(lambda: job_of(queue, job_id).finished, timeout=180)
    finally:
        queue.close()
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=60)
    record = job_of(queue, job_id)
    assert record.state == "completed", record.errors
    assert record.files_done == 80
    reference = tree.settings().with_overrides(db_path=tmp_path / "reference" / "index.db")
    Indexer(reference).run([root / "docs"])
    assert index_rows(settings.db_path) == index_rows(reference.db_path)


async def test_index_status_starts_a_pool_for_a_job_whose_workers_are_gone(
    tmp_path: Path, start_workers
) -> None:
    root = tmp_path / "work"
    copy_corpus(root / "docs", limit=40)
    tree = IndexedTree(root=root, db_path=root / ".rifflux" / "index.db")
    settings = tree.settings()
    # Workers of another process (as a `rifflux index` run's) serve the server's job...
    outside = start_workers(
        settings,
        module="rifflux_test_actors",
        RIFFLUX_TEST_EMBED_GATE=str(tmp_path / "gate"),
        RIFFLUX_TEST_EMBED_ATTEMPTS=str(tmp_path / "embed-attempts"),
    )
    queue = IndexQueue(settings)
    server, port = start_server(tree, tmp_path / "server.log")
    try:
        wait_until(queue.index_host_workers, timeout=60)
        async with http_session(f"http://127.0.0.1:{port}/mcp") as session:
            submitted = await session.call_tool("reindex", {"path": "docs", "background": True})
            assert not submitted.is_error, submitted.content
            job_id = (submitted.structured_content or {})["job_id"]
            attempts = tmp_path / "embed-attempts"
            wait_until(lambda: attempts.exists() and attempts.read_text(), timeout=120)
            # ...and exit before it is done.
            os.killpg(outside.pid, signal.SIGKILL)
            outside.wait()
            (tmp_path / "gate").touch()
            assert not job_of(queue, job_id).finished
            status = await session.call_tool("index_status", {})
            assert not status.is_error
            wait_until(lambda: job_of(queue, job_id).finished, timeout=180)
    finally:
        queue.close()
        server.terminate()
        server.wait(timeout=60)
    record = job_of(queue, job_id)
    assert record.state == "completed", record.errors
    reference = tree.settings().with_overrides(db_path=tmp_path / "reference" / "index.db")
    Indexer(reference).run([root / "docs"])
    assert index_rows(settings.db_path) == index_rows(reference.db_path)
