"""The job steps of the pipeline as plain functions, driven in-process in the order workers
run them: plan, chunk (lexical phase), embed, write vectors (vector phase), finalize."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rifflux_testing import (
    copy_corpus,
    files_not_found_lexically,
    index_rows,
    make_settings,
    reference_rows,
    sole_embed,
)

from rifflux.embed.hashing import HashEmbedder
from rifflux.index import pipeline, planner
from rifflux.index.messages import (
    BatchFailure,
    ChunkRequest,
    EmbedRequest,
    VectorsRequest,
    finalize_request,
    plan_request,
)
from rifflux.queue.client import IndexQueue
from rifflux.search.service import SearchService
from rifflux.status import index_counts
from rifflux.store import jobs
from rifflux.store.connection import open_index
from rifflux.store.vector_blobs import quantize_rows


def submit(settings, roots: list[Path], **options: Any) -> str:
    """The job as every caller submits it (its plan message waits in the SQLite broker,
    unconsumed: this module runs the steps itself)."""
    queue = IndexQueue(settings)
    try:
        return queue.submit(roots, **options)
    finally:
        queue.close()


def record(settings, job_id: str) -> jobs.JobRecord:
    conn = open_index(settings.db_path)
    try:
        found = jobs.get_job(conn, job_id)
        assert found is not None
        return found
    finally:
        conn.close()


class Sent:
    """What the plan step sends, collected as the actors would send it."""

    def __init__(self) -> None:
        self.chunks: list[ChunkRequest] = []
        self.embeds: list[EmbedRequest] = []


def plan(settings, job_id: str) -> tuple[pipeline.PlanOutcome, Sent]:
    sent = Sent()
    outcome = pipeline.plan(
        settings,
        plan_request(str(settings.db_path), job_id),
        sent.chunks.append,
        sent.embeds.append,
    )
    return outcome, sent


def chunk(request: ChunkRequest) -> pipeline.RowsOutcome:
    """The chunk step, with its message through the wire encoding."""
    return pipeline.chunk(ChunkRequest.from_dict(request.to_dict()))


def embed_and_write(request: EmbedRequest, embedder=None) -> bool:
    """The embed and vector-write steps, with both messages through their wire encoding."""
    wire = EmbedRequest.from_dict(request.to_dict())
    vectors = pipeline.embed(wire, embedder or HashEmbedder())
    return pipeline.write_vectors(VectorsRequest.from_dict(vectors.to_dict()))


def run_batch(request: ChunkRequest, embedder=None) -> bool:
    """Both phases of one batch; True when the job is ready to finalize."""
    outcome = chunk(request)
    if sole_embed(outcome) is not None:
        return embed_and_write(sole_embed(outcome), embedder)
    return outcome.ready


def run_inline(settings, roots: list[Path]) -> jobs.JobRecord | None:
    """Every step of one job, in order, in this process."""
    job_id = submit(settings, roots)
    _, sent = plan(settings, job_id)
    for request in sent.embeds:
        embed_and_write(request)
    for request in sent.chunks:
        run_batch(request)
    return pipeline.finalize(finalize_request(str(settings.db_path), job_id))


def test_a_redelivered_plan_resends_only_pending_batches(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=30)
    settings = make_settings(tmp_path, batch_target_bytes=20_000)
    job_id = submit(settings, [corpus])
    db = str(settings.db_path)
    first, sent = plan(settings, job_id)
    assert first.batches == len(sent.chunks) > 3 and not first.finalized
    assert sent.embeds == []

    embedder = HashEmbedder()
    for request in sent.chunks[:2]:
        run_batch(request, embedder)
    # Batch 2 is chunked (rows written) but its embed message was lost.
    lost = sole_embed(chunk(sent.chunks[2]))
    assert lost is not None
    _, resent = plan(settings, job_id)
    assert [r.batch_no for r in resent.chunks] == [r.batch_no for r in sent.chunks[3:]]
    assert [r.files for r in resent.chunks] == [r.files for r in sent.chunks[3:]]
    # The chunked batch's embed request is rebuilt from the index, the same as was lost.
    assert resent.embeds == [lost]

    assert not embed_and_write(resent.embeds[0], embedder)
    ready = [run_batch(request, embedder) for request in resent.chunks]
    assert ready[-1] and not any(ready[:-1])
    # A duplicate of a settled batch writes nothing; it still says the job is ready, so a
    # finalize lost after the last write is sent again (finalizing is idempotent).
    assert chunk(sent.chunks[0]) == pipeline.RowsOutcome((), True)
    assert embed_and_write(lost, embedder)
    done = pipeline.finalize(finalize_request(db, job_id))
    assert done is not None and done.state == "completed"
    assert done.files_done == 30 and done.batches_done == done.batches_total


def test_a_failed_batch_fails_the_job_but_others_land(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=20)
    settings = make_settings(tmp_path, batch_target_bytes=20_000)
    job_id = submit(settings, [corpus])
    db = str(settings.db_path)
    _, sent = plan(settings, job_id)
    embedder = HashEmbedder()
    bad = sent.chunks[0]
    bad_paths = bad.paths
    failure = BatchFailure(db, job_id, bad.batch_no, tuple(bad_paths), "RuntimeError: boom")
    assert not pipeline.fail_batch(failure)
    assert not pipeline.fail_batch(BatchFailure.from_dict(failure.to_dict()))
    for request in sent.chunks[1:]:
        run_batch(request, embedder)
    done = pipeline.finalize(finalize_request(db, job_id))
    assert done is not None and done.state == "failed"
    assert done.files_failed == len(bad_paths)
    assert {e["path"] for e in done.errors} == set(bad_paths)
    assert done.files_done + done.files_failed == 20


def test_a_missing_root_fails_the_job_with_its_name(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    (tmp_path / "gone").mkdir()
    job_id = submit(settings, [tmp_path / "gone"])
    (tmp_path / "gone").rmdir()  # Removed between the submit and the plan step.
    outcome, _ = plan(settings, job_id)
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
    _, sent = plan(settings, job_id)
    ready = [run_batch(request) for request in sent.chunks]
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
    assert planner.batch_bytes_for(10_000_000, 256_000) == 256_000
    assert planner.batch_bytes_for(640_000, 256_000) == 40_000
    assert planner.batch_bytes_for(50_000, 256_000) == planner.MIN_BATCH_BYTES


def test_a_cancelled_job_writes_nothing_more(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=10)
    settings = make_settings(tmp_path, batch_target_bytes=20_000)
    job_id = submit(settings, [corpus])
    db = str(settings.db_path)
    _, sent = plan(settings, job_id)
    conn = open_index(db)
    try:
        assert jobs.cancel_job(conn, job_id)
        assert not jobs.cancel_job(conn, job_id)
    finally:
        conn.close()
    assert chunk(sent.chunks[0]) == pipeline.RowsOutcome((), False)
    done = pipeline.finalize(finalize_request(db, job_id))
    assert done is not None and (done.state, done.files_done) == ("cancelled", 0)


def test_every_file_is_keyword_searchable_before_any_vector_is_written(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=12)
    settings = make_settings(tmp_path, batch_target_bytes=20_000)
    job_id = submit(settings, [corpus])
    _, sent = plan(settings, job_id)
    assert record(settings, job_id).phase == "lexical"
    embeds = [sole_embed(chunk(request)) for request in sent.chunks]
    job = record(settings, job_id)
    assert job.phase == "embedding" and job.files_written == job.files_planned == 12
    assert job.chunks_to_embed > 0 and job.chunks_embedded == 0

    service = SearchService(settings)
    try:
        assert files_not_found_lexically(service, corpus, "docs") == []
        counts = index_counts(service)
        assert counts["embeddings"] == 0 < counts["chunks"]
        assert service.search("agent instructions", top_k=5, mode="semantic") == []
        hybrid = service.search("agent instructions", top_k=5, mode="hybrid")
        assert hybrid and all(h["score_breakdown"]["semantic_rank"] is None for h in hybrid)
    finally:
        service.close()

    ready = [embed_and_write(request) for request in embeds if request is not None]
    assert ready[-1] and not any(ready[:-1])
    assert record(settings, job_id).phase == "finalizing"
    done = pipeline.finalize(finalize_request(str(settings.db_path), job_id))
    assert done is not None and (done.state, done.phase) == ("completed", "done")
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_a_vector_never_lands_on_a_chunk_rewritten_since_it_was_embedded(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    note = docs / "note.md"
    note.write_text("# Note\n\nThe first text of this note, about copper kettles.\n")
    settings = make_settings(tmp_path)
    first_job = submit(settings, [docs])
    _, first = plan(settings, first_job)
    old_embed = sole_embed(chunk(first.chunks[0]))
    assert old_embed is not None
    # The file changes and a second job writes its new rows before the first job's
    # vectors arrive.
    note.write_text("# Note\n\nA rewritten text of this note, about silver spoons.\n")
    second_job = submit(settings, [docs])
    _, second = plan(settings, second_job)
    new_embed = sole_embed(chunk(second.chunks[0]))
    assert new_embed is not None

    embed_and_write(old_embed)
    rows = index_rows(settings.db_path)
    assert [(r[5], r[7]) for r in rows] == [(rows[0][5], None)]
    assert "silver spoons" in rows[0][5]

    embed_and_write(new_embed)
    rows = index_rows(settings.db_path)
    expected = HashEmbedder().embed_batch([text for _, text in new_embed.texts])[0]
    assert rows[0][7] == quantize_rows(expected.reshape(1, -1)).tobytes()


def test_files_left_without_vectors_are_embedded_by_the_next_job(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=8)
    settings = make_settings(tmp_path, batch_target_bytes=20_000)
    job_id = submit(settings, [corpus])
    db = str(settings.db_path)
    _, sent = plan(settings, job_id)
    lost = [sole_embed(outcome) for outcome in map(chunk, sent.chunks)]
    # Every vector phase fails for good: the rows stay, keyword-searchable.
    for request in lost:
        assert request is not None
        pipeline.fail_batch(BatchFailure(db, job_id, request.batch_no, request.paths, "boom"))
    failed = pipeline.finalize(finalize_request(db, job_id))
    assert failed is not None and failed.state == "failed"

    again = submit(settings, [corpus])
    outcome, resent = plan(settings, again)
    assert resent.chunks == [] and outcome.batches == len(resent.embeds) >= 1
    assert sorted(p for r in resent.embeds for p in r.paths) == sorted(
        p for r in sent.chunks for p in r.paths
    )
    assert [embed_and_write(r) for r in resent.embeds][-1]
    done = pipeline.finalize(finalize_request(db, again))
    assert done is not None and done.state == "completed"
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_a_chunk_step_with_an_inline_embedder_settles_its_batch_with_the_same_rows(
    tmp_path: Path,
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=12)
    settings = make_settings(tmp_path, batch_target_bytes=20_000)
    job_id = submit(settings, [corpus])
    _, sent = plan(settings, job_id)
    embedder = HashEmbedder(settings.hash_embedding_dim)
    outcomes = [pipeline.chunk(ChunkRequest.from_dict(r.to_dict()), embedder) for r in sent.chunks]
    assert len(outcomes) > 1 and all(sole_embed(o) is None for o in outcomes)
    assert outcomes[-1].ready and not any(o.ready for o in outcomes[:-1])
    job = record(settings, job_id)
    assert job.phase == "finalizing"
    assert job.files_done == job.files_planned == 12
    assert job.chunks_embedded == job.chunks_to_embed > 0
    done = pipeline.finalize(finalize_request(str(settings.db_path), job_id))
    assert done is not None and (done.state, done.phase) == ("completed", "done")
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_an_inline_embedder_of_another_model_leaves_the_vectors_to_the_embed_step(
    tmp_path: Path,
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=6)
    settings = make_settings(tmp_path)
    job_id = submit(settings, [corpus])
    _, sent = plan(settings, job_id)
    other = HashEmbedder(settings.hash_embedding_dim + 1)
    outcomes = [pipeline.chunk(r, other) for r in sent.chunks]
    assert all(sole_embed(o) is not None for o in outcomes)
    assert record(settings, job_id).chunks_embedded == 0


def after_the_first_batch(tmp_path: Path, **settings_options: Any) -> tuple[Any, str, Sent]:
    """(settings, job id, messages) of a 30-file job planned in small batches, after its
    first batch ran and any publish its vector write started in the background ended."""
    corpus = copy_corpus(tmp_path / "docs", limit=30)
    settings = make_settings(tmp_path, batch_target_bytes=20_000, **settings_options)
    job_id = submit(settings, [corpus])
    _, sent = plan(settings, job_id)
    assert len(sent.chunks) > 2
    run_batch(sent.chunks[0])
    with pipeline._publishing:
        pass
    return settings, job_id, sent


def test_a_publish_during_a_job_builds_no_graph_and_the_finalize_builds_them(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Mid-job publishes write segments the next ones rewrite: a graph there (~1 ms of
    CPU a row) would be built for nothing. The finalize's publish builds them."""
    from rifflux.vectors.segments import read_manifest, vectors_dir

    monkeypatch.setattr(pipeline, "PUBLISH_EVERY_SECONDS", 0.0)
    settings, job_id, sent = after_the_first_batch(tmp_path, vector_index="hnsw")
    mid = read_manifest(vectors_dir(settings.db_path))[0]
    assert mid is not None and mid.rows > 0
    assert all(s.hnsw is None and s.hnsw_recall is None for s in mid.segments)
    for request in sent.chunks[1:]:
        run_batch(request)
    pipeline.finalize(finalize_request(str(settings.db_path), job_id))
    final = read_manifest(vectors_dir(settings.db_path))[0]
    assert final is not None and final.rows > mid.rows
    assert all(s.hnsw is not None and s.hnsw_recall is not None for s in final.segments)


def test_a_job_younger_than_the_publish_interval_publishes_only_at_its_finalize(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interval counts from the job's start as well as from the last publish: a fresh
    index (no cache yet) is not published after a young job's first batch, and is once
    the job has run for the interval."""
    from rifflux.vectors.segments import read_manifest, vectors_dir

    # An hour: however slow the machine, the job below is younger than that.
    monkeypatch.setattr(pipeline, "PUBLISH_EVERY_SECONDS", 3600.0)
    settings, job_id, _ = after_the_first_batch(tmp_path)
    assert read_manifest(vectors_dir(settings.db_path)) is None
    started = record(settings, job_id).started_at
    assert started is not None
    # The same job, seen as if it had started an interval and more ago: due.
    pipeline.publish_if_due(settings.db_path, started - 2 * pipeline.PUBLISH_EVERY_SECONDS)
    with pipeline._publishing:
        pass
    published = read_manifest(vectors_dir(settings.db_path))[0]
    assert published is not None and published.rows > 0


def test_the_finalize_merges_the_fts_index_beside_its_publish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each half waits for the other to have started: run one after the other, they time
    out; and an error of the merge still reaches the step."""
    corpus = copy_corpus(tmp_path / "docs", limit=5)
    settings = make_settings(tmp_path)
    started = {"merge": threading.Event(), "publish": threading.Event()}
    real_merge, real_publish = pipeline.merge_after_job, pipeline.publish_quietly

    def merge(*args: Any, **kwargs: Any) -> Any:
        started["merge"].set()
        assert started["publish"].wait(10), "the publish did not run beside the merge"
        return real_merge(*args, **kwargs)

    def publish(*args: Any, **kwargs: Any) -> Any:
        started["publish"].set()
        assert started["merge"].wait(10), "the merge did not run beside the publish"
        return real_publish(*args, **kwargs)

    monkeypatch.setattr(pipeline, "merge_after_job", merge)
    monkeypatch.setattr(pipeline, "publish_quietly", publish)
    done = run_inline(settings, [corpus])
    assert done is not None and done.state == "completed"

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("merge failed")

    monkeypatch.setattr(pipeline, "merge_after_job", broken)
    monkeypatch.setattr(pipeline, "publish_quietly", real_publish)
    with pytest.raises(RuntimeError, match="merge failed"):
        run_inline(settings, [corpus])


def test_a_batch_embedded_as_units_settles_with_its_last_unit_and_stores_the_same_rows(
    tmp_path: Path,
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=12)
    settings = make_settings(tmp_path, batch_target_bytes=20_000)
    job_id = submit(settings, [corpus])
    db = str(settings.db_path)
    _, sent = plan(settings, job_id)
    # Chunk steps of a pool of 16 embedding workers: each batch goes out as several units.
    units = [
        unit
        for request in sent.chunks
        for unit in pipeline.chunk(
            ChunkRequest.from_dict(request.to_dict()), embed_workers=16
        ).embeds
    ]
    assert len(units) > len(sent.chunks) and max(u.units for u in units) > 1
    job = record(settings, job_id)
    # Written last unit first; each unit's duplicate (a redelivery) changes nothing.
    ready = []
    for unit in reversed(units):
        ready.append(embed_and_write(unit))
        assert not embed_and_write(unit) or ready[-1]
    assert ready[-1] and not any(ready[:-1])
    job = record(settings, job_id)
    assert job.batches_done == job.batches_total and job.files_done == 12
    assert job.chunks_embedded == job.chunks_to_embed > 0
    done = pipeline.finalize(finalize_request(db, job_id))
    assert done is not None and done.state == "completed"
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_a_batch_is_written_only_when_every_unit_of_it_is(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=6)
    settings = make_settings(tmp_path)
    job_id = submit(settings, [corpus])
    _, sent = plan(settings, job_id)
    units = [u for r in sent.chunks for u in pipeline.chunk(r, embed_workers=16).embeds]
    widest = max(units, key=lambda u: u.units).batch_no
    first = [u for u in units if u.batch_no == widest]
    assert len(first) > 2
    for unit in first[:-1]:
        embed_and_write(unit)
        embed_and_write(unit)
    conn = open_index(settings.db_path)
    try:
        assert jobs.batch_state(conn, job_id, first[0].batch_no) == "chunked"
    finally:
        conn.close()
    embed_and_write(first[-1])
    conn = open_index(settings.db_path)
    try:
        assert jobs.batch_state(conn, job_id, first[0].batch_no) == "written"
    finally:
        conn.close()


def test_the_chunk_step_reads_the_files_and_skips_one_changed_since_the_plan(
    tmp_path: Path,
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=4)
    settings = make_settings(tmp_path)
    job_id = submit(settings, [corpus])
    db = str(settings.db_path)
    _, sent = plan(settings, job_id)
    # No text travels in a chunk message: the plan's size, mtime and sha256 of each file.
    assert all("text" not in str(r.to_dict()) for r in sent.chunks)
    changed, touched, *_ = sorted(corpus.rglob("*.md"))
    changed.write_text(changed.read_text() + "\nA line written after the plan.\n")
    stat = touched.stat()
    os.utime(touched, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    ready = [run_batch(request) for request in sent.chunks]
    assert ready[-1]
    done = pipeline.finalize(finalize_request(db, job_id))
    assert done is not None and done.state == "completed"
    changed_path = f"docs/{changed.relative_to(corpus).as_posix()}"
    assert done.errors == [{"path": changed_path, "error": pipeline.CHANGED_WHILE_QUEUED}]
    assert done.files_done == 3
    stored = {row[0] for row in index_rows(settings.db_path)}
    assert changed_path not in stored
    # The same bytes with a new mtime are what the plan saw: indexed, with the new mtime.
    touched_path = f"docs/{touched.relative_to(corpus).as_posix()}"
    conn = open_index(db)
    try:
        row = conn.execute("SELECT mtime_ns FROM files WHERE path = ?", (touched_path,)).fetchone()
    finally:
        conn.close()
    assert row is not None and row[0] == touched.stat().st_mtime_ns


def test_a_job_keeps_grep_rows_as_its_submitter_says_whatever_its_workers_say(
    tmp_path: Path,
) -> None:
    """``RIFFLUX_GREP_INDEX`` travels in the job's spec: a job submitted with it off,
    run by workers with it on, removes the grep rows; one submitted with it on writes
    them again for every file."""
    corpus = copy_corpus(tmp_path / "docs", limit=12)
    worker = make_settings(tmp_path)
    submitter_off = replace(worker, grep_index=False)

    def grep_files() -> int:
        conn = open_index(worker.db_path)
        try:
            return int(conn.execute("SELECT count(*) FROM grep_files").fetchone()[0])
        finally:
            conn.close()

    def run(submitter) -> None:
        job_id = submit(submitter, [corpus])
        _, sent = plan(worker, job_id)
        for request in sent.chunks:
            run_batch(request)
        pipeline.finalize(finalize_request(str(worker.db_path), job_id))

    run(worker)
    assert grep_files() == 12
    run(submitter_off)
    assert grep_files() == 0
    run(worker)
    assert grep_files() == 12
