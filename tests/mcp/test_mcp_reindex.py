"""The reindex tool through a stdio session, with the real local worker pool it starts."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    build_tree,
    call_ok,
    server_command,
    stdio_session,
    tree_fixture,
    worker_children,
    write_docs,
)

from rifflux.vectors.publish import publish_lock
from rifflux.vectors.segments import vectors_dir

pytestmark = pytest.mark.anyio

CALL_TIMEOUT_S = 60
BULK_FILES = 400


@pytest.fixture(scope="module")
def reindex_tree(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    return build_tree(tmp_path_factory.mktemp("reindex") / "work")


@pytest.fixture(scope="module")
async def session(reindex_tree: IndexedTree) -> AsyncIterator[ClientSession]:
    async with stdio_session(reindex_tree) as client:
        yield client


async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    return await call_ok(session, tool, timeout=CALL_TIMEOUT_S, **arguments)


async def job_state(session: ClientSession, job_id: str, *, until: str) -> dict[str, Any]:
    """Poll index_status until the job reaches ``until``; returns its record."""
    with anyio.fail_after(CALL_TIMEOUT_S):
        while True:
            jobs = (await ok(session, "index_status"))["recent_jobs"]
            job = next((j for j in jobs if j["job_id"] == job_id), None)
            if job is not None and job["state"] == until:
                return job
            await anyio.sleep(0.1)


async def test_reindex_waits_for_the_job_and_reports_its_counts(
    session: ClientSession, reindex_tree: IndexedTree
) -> None:
    root = reindex_tree.root
    write_docs(
        root,
        {
            "fresh/aardvark.md": "# Aardvarks\n\nAardvarks dig burrows at night and eat ants.\n",
            "fresh/quokka.md": "# Quokkas\n\nQuokkas live on Rottnest Island near Perth.\n",
        },
    )
    result = await ok(session, "reindex", path="fresh")
    assert set(result) == {
        "indexed_files",
        "skipped_files",
        "deleted_files",
        "skipped",
        "indexed_paths",
        "embedding_model",
        "embedding_backend",
        "job_id",
    }
    assert (result["indexed_files"], result["skipped_files"], result["deleted_files"]) == (2, 0, 0)
    assert result["indexed_paths"] == [str(root / "fresh")]
    assert (result["embedding_model"], result["embedding_backend"]) == ("hash:384", "hash")
    hits = (await ok(session, "search_rifflux", query="quokkas", mode="lexical"))["results"]
    assert [hit["path"] for hit in hits] == ["fresh/quokka.md"]

    (root / "fresh" / "quokka.md").unlink()
    again = await ok(session, "reindex", paths=["fresh"], path="ignored/when/paths/given")
    assert (again["indexed_files"], again["skipped_files"], again["deleted_files"]) == (0, 1, 1)
    assert again["job_id"] != result["job_id"]
    assert (await ok(session, "search_rifflux", query="quokkas", mode="lexical"))["count"] == 0


async def test_reindex_without_paths_indexes_the_servers_directory(
    session: ClientSession, reindex_tree: IndexedTree
) -> None:
    result = await ok(session, "reindex")
    assert result["indexed_paths"] == [str(reindex_tree.root)]


async def test_background_reindex_returns_at_once_and_shows_in_status(
    session: ClientSession, reindex_tree: IndexedTree
) -> None:
    okapi = "# Okapi\n\nOkapis are shy forest giraffes.\n"
    write_docs(reindex_tree.root, {"later/okapi.md": okapi})
    submitted = await ok(session, "reindex", paths=["later"], background=True)
    assert set(submitted) == {"job_id", "status"}
    assert submitted["status"] in {"queued", "running", "completed"}
    job = await job_state(session, submitted["job_id"], until="completed")
    assert job["roots"] == [str(reindex_tree.root / "later")]
    assert (job["files_done"], job["errors"]) == (1, [])
    status = await ok(session, "index_status")
    # RIFFLUX_WORKERS=1: the server's pool runs exactly one worker process, found in /proc.
    children = worker_children(reindex_tree.root)
    assert len(children) == 1
    assert status["live_workers"]["count"] == len(children)
    assert {w["pid"] for w in status["live_workers"]["workers"]} == children


async def test_twenty_concurrent_searches_succeed_while_a_reindex_runs(
    session: ClientSession, reindex_tree: IndexedTree
) -> None:
    """The test holds the vector cache's publish lock from before the reindex call until
    the searches are answered, so the job, which publishes last, cannot finish first: the
    proof is the order of the answers, however loaded the machine."""

    def note(i: int) -> str:
        parts = (f"## Part {j}\n\nParagraph {j} of note {i} about rivers." for j in range(20))
        return f"# Note {i}\n\n" + "\n\n".join(parts)

    write_docs(reindex_tree.root, {f"bulk/note-{i:03}.md": note(i) for i in range(BULK_FILES)})
    reindexed: dict[str, Any] = {}
    answered: list[int] = []

    async def reindex_bulk() -> None:
        reindexed.update(await ok(session, "reindex", paths=["bulk"], force=True))

    async def search(i: int) -> None:
        response = await ok(session, "search_rifflux", query=f"basil sun {i}", top_k=5)
        assert response["count"] == len(response["results"]) > 0
        assert not reindexed, "the reindex was answered before a search"
        answered.append(i)

    async with anyio.create_task_group() as tg:
        with publish_lock(vectors_dir(reindex_tree.db_path)):
            tg.start_soon(reindex_bulk)
            async with anyio.create_task_group() as searches:
                for i in range(20):
                    searches.start_soon(search, i)
    assert sorted(answered) == list(range(20))
    assert reindexed["indexed_files"] == BULK_FILES


async def test_reindex_on_start_submits_a_job_without_waiting(tree: IndexedTree) -> None:
    async with stdio_session(tree, "--reindex-on-start", "docs", "notes") as client:
        with anyio.fail_after(CALL_TIMEOUT_S):
            while True:
                jobs = (await ok(client, "index_status"))["recent_jobs"]
                if jobs and jobs[0]["state"] == "completed":
                    break
                await anyio.sleep(0.1)
    assert jobs[0]["roots"] == [str(tree.root / "docs"), str(tree.root / "notes")]
    assert jobs[0]["files_skipped"] == 3


def test_reindex_on_start_of_a_missing_path_fails_fast(tree: IndexedTree) -> None:
    proc = subprocess.run(
        server_command("--reindex-on-start", "nope"),
        env=tree.env(),
        cwd=tree.root,
        capture_output=True,
        text=True,
        timeout=CALL_TIMEOUT_S,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert f"rifflux: error: path to index does not exist: {Path(tree.root) / 'nope'}" in (
        proc.stderr
    )
