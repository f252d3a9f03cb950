"""The job steps of the pipeline as plain functions, driven in-process in the order workers
run them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rifflux_testing import copy_corpus, make_settings

from rifflux.embed.hashing import HashEmbedder
from rifflux.index import pipeline
from rifflux.index.messages import (
    BatchFailure,
    EmbedRequest,
    WriteRequest,
    finalize_request,
    plan_request,
)
from rifflux.store import jobs
from rifflux.store.connection import open_index


def submit(settings, roots: list[Path], **options: Any) -> str:
    conn = open_index(settings.db_path)
    try:
        opts = pipeline.job_options(
            settings,
            force=options.get("force", False),
            prune_missing=options.get("prune_missing", True),
        )
        return jobs.create_job(conn, [str(r) for r in roots], opts)
    finally:
        conn.close()


def record(settings, job_id: str) -> jobs.JobRecord:
    conn = open_index(settings.db_path)
    try:
        found = jobs.get_job(conn, job_id)
        assert found is not None
        return found
    finally:
        conn.close()


def embed_and_write(request: EmbedRequest, embedder=None) -> bool:
    """The embed and write steps, with both messages through their wire encoding."""
    wire = EmbedRequest.from_dict(request.to_dict())
    prepared = pipeline.embed(wire, embedder or HashEmbedder())
    return pipeline.write(WriteRequest.from_dict(prepared.to_dict()))


def run_inline(settings, roots: list[Path]) -> jobs.JobRecord | None:
    """Every step of one job, in order, in this process."""
    job_id = submit(settings, roots)
    db = str(settings.db_path)
    sent: list[EmbedRequest] = []
    pipeline.plan(settings, plan_request(db, job_id), sent.append)
    for request in sent:
        embed_and_write(request)
    return pipeline.finalize(finalize_request(db, job_id))


def test_a_redelivered_plan_resends_only_pending_batches(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=30)
    settings = make_settings(tmp_path, batch_target_bytes=20_000)
    job_id = submit(settings, [corpus])
    db = str(settings.db_path)
    sent: list[EmbedRequest] = []
    first = pipeline.plan(settings, plan_request(db, job_id), sent.append)
    assert first.batches == len(sent) > 3 and not first.ready_to_finalize

    embedder = HashEmbedder()
    for request in sent[:2]:
        embed_and_write(request, embedder)
    resent: list[EmbedRequest] = []
    pipeline.plan(settings, plan_request(db, job_id), resent.append)
    assert [r.batch_no for r in resent] == [r.batch_no for r in sent[2:]]
    assert [r.files for r in resent] == [r.files for r in sent[2:]]

    ready = [embed_and_write(request, embedder) for request in resent]
    assert ready[-1] and not any(ready[:-1])
    # A duplicate write of a settled batch changes nothing and does not re-finalize.
    assert not embed_and_write(sent[0], embedder)
    done = pipeline.finalize(finalize_request(db, job_id))
    assert done is not None and done.state == "completed"
    assert done.files_done == 30 and done.batches_done == done.batches_total


def test_a_failed_batch_fails_the_job_but_others_land(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=20)
    settings = make_settings(tmp_path, batch_target_bytes=20_000)
    job_id = submit(settings, [corpus])
    db = str(settings.db_path)
    sent: list[EmbedRequest] = []
    pipeline.plan(settings, plan_request(db, job_id), sent.append)
    embedder = HashEmbedder()
    bad = sent[0]
    bad_paths = bad.paths
    failure = BatchFailure(db, job_id, bad.batch_no, tuple(bad_paths), "RuntimeError: boom")
    assert not pipeline.fail_batch(failure)
    assert not pipeline.fail_batch(BatchFailure.from_dict(failure.to_dict()))
    for request in sent[1:]:
        embed_and_write(request, embedder)
    done = pipeline.finalize(finalize_request(db, job_id))
    assert done is not None and done.state == "failed"
    assert done.files_failed == len(bad_paths)
    assert {e["path"] for e in done.errors} == set(bad_paths)
    assert done.files_done + done.files_failed == 20


def test_a_missing_root_fails_the_job_with_its_name(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    job_id = submit(settings, [tmp_path / "gone"])
    outcome = pipeline.plan(
        settings, plan_request(str(settings.db_path), job_id), lambda request: None
    )
    assert outcome.batches == 0
    failed = record(settings, job_id)
    assert failed.state == "failed" and "gone" in failed.errors[0]["error"]


def test_files_vanishing_between_plan_and_send_are_counted(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=5)
    settings = make_settings(tmp_path)
    job_id = submit(settings, [corpus])
    db = str(settings.db_path)
    conn = open_index(db)
    try:
        # Plan without sending, then delete a planned file before the send.
        job = jobs.get_job(conn, job_id)
        assert job is not None
        assert pipeline._make_plan(conn, settings, job, "hash:384")
    finally:
        conn.close()
    victim = sorted(corpus.rglob("*.md"))[0]
    victim.unlink()
    sent: list[EmbedRequest] = []
    pipeline.plan(settings, plan_request(db, job_id), sent.append)
    ready = [embed_and_write(request) for request in sent]
    assert ready[-1]
    done = pipeline.finalize(finalize_request(db, job_id))
    assert done is not None and done.state == "completed"
    assert done.files_done == 4 and any("vanished" in e["error"] for e in done.errors)


def test_prune_happens_at_finalize(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=5)
    settings = make_settings(tmp_path)
    first = run_inline(settings, [corpus])
    assert first is not None and (first.state, first.files_deleted) == ("completed", 0)
    sorted(corpus.rglob("*.md"))[0].unlink()
    done = run_inline(settings, [corpus])
    assert done is not None and (done.state, done.files_deleted) == ("completed", 1)
    conn = open_index(settings.db_path)
    assert conn.execute("SELECT COUNT(*) FROM files").fetchone()[0] == 4


def test_small_jobs_are_split_to_keep_every_worker_busy() -> None:
    assert pipeline.batch_bytes_for(10_000_000, 256_000) == 256_000
    assert pipeline.batch_bytes_for(640_000, 256_000) == 40_000
    assert pipeline.batch_bytes_for(50_000, 256_000) == pipeline.MIN_BATCH_BYTES


def test_a_cancelled_job_writes_nothing_more(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=10)
    settings = make_settings(tmp_path, batch_target_bytes=20_000)
    job_id = submit(settings, [corpus])
    db = str(settings.db_path)
    sent: list[EmbedRequest] = []
    pipeline.plan(settings, plan_request(db, job_id), sent.append)
    conn = open_index(db)
    try:
        assert jobs.cancel_job(conn, job_id)
        assert not jobs.cancel_job(conn, job_id)
    finally:
        conn.close()
    assert not embed_and_write(sent[0])
    done = pipeline.finalize(finalize_request(db, job_id))
    assert done is not None and (done.state, done.files_done) == ("cancelled", 0)
