"""The rifflux command end to end, as a user runs it: subprocesses, real files, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rifflux_testing import copy_corpus, wait_until

from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.queue.client import IndexQueue
from rifflux.store.connection import open_index
from rifflux.store.jobs import recent_jobs


def rifflux(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RIFFLUX_", "RIFLUX_"))}
    environ.update(RIFFLUX_EMBEDDING_BACKEND="hash", **env)
    return subprocess.run(
        [sys.executable, "-m", "rifflux.cli", *args],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_index_starts_a_local_pool_waits_and_leaves_nothing_running(tmp_path: Path) -> None:
    copy_corpus(tmp_path / "docs", limit=25)
    done = rifflux(tmp_path, "index", "docs", "--workers", "2", "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["state"] == "completed" and record["files_done"] == 25
    assert record["phase"] == "done" and record["phases"]["lexical"]["files_done"] == 25
    # Without a terminal, one line per phase change on stderr, in phase order; stdout
    # holds only the JSON.
    lines = [line for line in done.stderr.splitlines() if line.startswith("rifflux: ")]
    order = ["queued", "scanning", "chunking and writing", "embedding", "finalizing", "done"]
    seen = [next(i for i, name in enumerate(order) if line[9:].startswith(name)) for line in lines]
    assert seen == sorted(set(seen)) and seen[-1] == len(order) - 1, done.stderr
    pool_log = (tmp_path / ".rifflux" / "workers.log").read_text()
    assert "worker.booted" in pool_log and "worker.stopped" in pool_log

    found = rifflux(tmp_path, "search", "agent", "--json", "--top-k", "3")
    response = json.loads(found.stdout)
    assert response["count"] == 3 and response["mode"] == "hybrid"
    assert all(r["path"].startswith("docs/") for r in response["results"])

    chunk_id = response["results"][0]["chunk_id"]
    chunk = json.loads(rifflux(tmp_path, "get-chunk", chunk_id).stdout)["chunk"]
    assert chunk["chunk_id"] == chunk_id

    status = json.loads(rifflux(tmp_path, "status", "--json").stdout)
    assert status["files"] == 25 and status["recent_jobs"][0]["state"] == "completed"
    assert status["embedding_coverage"] == 1.0
    assert status["roots"] == [
        {
            "root": "docs",
            "files": 25,
            "chunks": status["chunks"],
            "embeddings": status["chunks"],
            "embedding_coverage": 1.0,
        }
    ]
    assert status["live_workers"] == {"count": 0, "workers": []}


def test_no_wait_without_a_live_worker_refuses_in_one_line_and_records_no_job(
    tmp_path: Path,
) -> None:
    copy_corpus(tmp_path / "docs", limit=2)
    refused = rifflux(tmp_path, "index", "docs", "--no-wait")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("rifflux: error: no worker is alive to take the job")
    assert "`rifflux worker`" in refused.stderr and refused.stderr.count("\n") == 1
    db = tmp_path / ".rifflux" / "index.db"
    if db.exists():
        conn = open_index(db)
        try:
            assert recent_jobs(conn, 10) == []
        finally:
            conn.close()


@pytest.mark.slow
def test_no_wait_hands_the_job_to_the_live_workers_and_returns(
    tmp_path: Path, start_workers
) -> None:
    copy_corpus(tmp_path / "docs", limit=3)
    settings = Settings(db_path=tmp_path / ".rifflux" / "index.db", embedding_backend="hash")
    start_workers(settings)
    queue = IndexQueue(settings)
    try:
        wait_until(queue.index_host_workers)
        queued = rifflux(tmp_path, "index", "docs", "--no-wait")
        assert queued.returncode == 0, queued.stderr
        job_id = queued.stdout.strip()
        assert len(job_id) == 32 and queued.stderr == ""
        finished = wait_until(lambda: (job := queue.job(job_id)) and job.finished and job)
        assert finished.state == "completed" and finished.files_done == 3
    finally:
        queue.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("index", "missing-dir", "--in-process"), "does not exist: missing-dir"),
        (("index", "missing-dir", "--no-wait"), "does not exist: missing-dir"),
        (("get-chunk", "nope"), "no index at"),
        (("get-file", "../etc/passwd"), "no index at"),
        (("search", "x", "--top-k", "0"), "top_k must be an integer between 1 and 100 (got 0)"),
        (("search", "x", "--group-by", "page"), "group_by must be one of chunk, file (got 'page')"),
        (("search", "x", "--modified-after", "soon"), "modified_after must be an ISO 8601 date"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(tmp_path: Path, args: tuple, message: str) -> None:
    result = rifflux(tmp_path, *args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_bad_setting_names_the_variable(tmp_path: Path) -> None:
    result = rifflux(tmp_path, "status", RIFFLUX_RRF_K="zero")
    assert result.returncode != 0 and "RIFFLUX_RRF_K='zero' is invalid" in result.stderr


def test_other_schema_version_names_the_rebuild_command(tmp_path: Path) -> None:
    from rifflux.store.connection import open_index

    db = tmp_path / ".rifflux" / "index.db"
    open_index(db).execute("UPDATE index_metadata SET value='999' WHERE key='schema_version'")
    result = rifflux(tmp_path, "search", "x")
    assert result.returncode != 0 and "rifflux index --rebuild" in result.stderr
    copy_corpus(tmp_path / "docs", limit=2)
    rebuilt = rifflux(tmp_path, "index", "docs", "--rebuild", "--in-process")
    assert rebuilt.returncode == 0, rebuilt.stderr


def test_cancel_a_queued_job_and_refuse_an_unknown_one(tmp_path: Path) -> None:
    copy_corpus(tmp_path / "docs", limit=2)
    queue = IndexQueue(Settings(db_path=tmp_path / ".rifflux" / "index.db"))
    try:
        job_id = queue.submit([tmp_path / "docs"])  # No worker: it stays queued.
    finally:
        queue.close()
    cancelled = rifflux(tmp_path, "cancel", job_id)
    assert cancelled.returncode == 0 and job_id in cancelled.stdout
    status = json.loads(rifflux(tmp_path, "status", "--json").stdout)
    assert status["recent_jobs"][0]["state"] == "cancelled"
    again = rifflux(tmp_path, "cancel", job_id)
    assert again.returncode != 0 and "no queued or running job" in again.stderr


def test_search_flags_are_the_request_fields_with_their_defaults() -> None:
    from rifflux.cli import build_parser
    from rifflux.search.request import REQUIRED, SearchRequest, request_fields

    args = build_parser().parse_args(["search", "basil", "--top-k", "3", "--mode", "lexical"])
    assert SearchRequest.from_arguments(vars(args)) == SearchRequest("basil", 3, "lexical")
    defaults = build_parser().parse_args(["search", "basil"])
    for name, default, _spec in request_fields():
        if default is not REQUIRED:
            assert getattr(defaults, name) == default


def test_search_options_are_flags_with_dashes_and_repeatable_lists(tmp_path: Path) -> None:
    copy_corpus(tmp_path / "docs", limit=6)
    settings = Settings(
        db_path=tmp_path / ".rifflux" / "index.db", base_dir=tmp_path, embedding_backend="hash"
    )
    Indexer(settings).run([tmp_path / "docs"])
    args = ["search", "review code", "--fusion", "minmax", "--alpha", "0.25"]
    args += ["--group-by", "file", "--candidate-k", "30", "--min-cosine", "-0.5"]
    args += ["--path-glob", "docs/a*", "--path-glob", "docs/**/b*", "--file-types", "md"]
    args += ["--content-contains", "the", "--modified-after", "2000-01-01", "--json"]
    result = rifflux(tmp_path, *args)
    assert result.returncode == 0, result.stderr
    response = json.loads(result.stdout)
    paths = [r["path"] for r in response["results"]]
    assert paths and len(set(paths)) == len(paths)
    assert all(p.startswith(("docs/a", "docs/b")) for p in paths)
    for r in response["results"]:
        b = r["score_breakdown"]
        assert b["minmax"] == pytest.approx(0.75 * b["lexical_norm"] + 0.25 * b["semantic_norm"])


def test_status_json_is_the_core_status_object_and_the_text_renders_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rifflux.config import Settings
    from rifflux.queue.client import IndexQueue
    from rifflux.search.service import SearchService
    from rifflux.status import index_status

    copy_corpus(tmp_path / "docs", limit=2)
    assert rifflux(tmp_path, "index", "docs", "--in-process").returncode == 0
    monkeypatch.chdir(tmp_path)  # The CLI's default (relative) database path, here too.
    settings = Settings.from_env({"RIFFLUX_EMBEDDING_BACKEND": "hash"})
    service, queue = SearchService(settings), IndexQueue(settings)
    try:
        expected = index_status(service, queue.status)
    finally:
        service.close()
        queue.close()

    shown = json.loads(rifflux(tmp_path, "status", "--json").stdout)
    text = rifflux(tmp_path, "status").stdout

    assert shown == json.loads(json.dumps(expected))
    assert f"files: {expected['files']}" in text
    assert f"vector cache: fresh, generation {expected['generation']}" in text
    assert "; 0 searched by HNSW graph, exact: below HNSW_MIN_ROWS (200000)" in text
    assert "live workers: 0" in text and "watcher: not running" in text
