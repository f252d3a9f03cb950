"""Reindex jobs run by real dramatiq worker processes on the SQLite broker."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from pathlib import Path

import pytest
from rifflux_testing import copy_corpus, index_rows, reference_rows, wait_until
from rifflux_testing import queue_settings as shared_queue_settings

from rifflux.config import Settings
from rifflux.queue.sqlite_broker import SQLiteBroker
from rifflux.reindex.runner import JobRunner as IndexQueue
from rifflux.search.service import SearchService
from rifflux.store.connection import connect, open_index
from rifflux.store.jobs import JobRecord

pytestmark = pytest.mark.slow

TEST_ACTORS = "rifflux_test_actors"


def queue_settings(tmp_path: Path, **overrides: object) -> Settings:
    return shared_queue_settings(tmp_path, lease_seconds=3, **overrides)


def run_job(settings: Settings, corpus: Path, timeout: float = 120) -> JobRecord:
    queue = IndexQueue(settings)
    try:
        job_id = queue.submit([corpus])
        return queue.wait(job_id, timeout=timeout)
    finally:
        queue.close()


def test_two_worker_processes_store_exactly_what_one_process_stores(
    tmp_path: Path, start_workers
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=200)
    settings = queue_settings(tmp_path)
    start_workers(settings, processes=2)
    record = run_job(settings, corpus)
    assert record.state == "completed", record.errors
    assert record.files_total == record.files_done == 200
    assert record.batches_total > 10 and record.batches_done == record.batches_total
    stored = index_rows(settings.db_path)
    assert stored == reference_rows(tmp_path, corpus, settings)
    # Each batch embeds its texts that had no vector when the job was planned: at least
    # every distinct vector stored, at most one per stored chunk.
    assert len({row[7] for row in stored}) <= record.chunks_embedded <= len(stored)

    # A second job over the unchanged corpus embeds nothing and changes nothing.
    again = run_job(settings, corpus)
    assert (again.state, again.files_done, again.chunks_embedded) == ("completed", 0, 0)
    assert again.files_skipped == again.files_unchanged == 200
    assert index_rows(settings.db_path) == stored


def test_four_worker_processes_embedding_in_units_store_exactly_what_one_process_stores(
    tmp_path: Path, start_workers
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=60)
    settings = queue_settings(tmp_path)
    # The test actors embed in their own step (no inline hash embedding), as ONNX does.
    start_workers(settings, processes=4, module=TEST_ACTORS)
    queue = IndexQueue(settings)
    try:
        wait_until(lambda: len(queue.live_workers()) == 4)
    finally:
        queue.close()
    record = run_job(settings, corpus)
    assert record.state == "completed", record.errors
    assert record.files_done == 60 and record.batches_done == record.batches_total
    conn = connect(settings.db_path)
    try:
        units = [row[0] for row in conn.execute("SELECT units_done FROM job_batches")]
    finally:
        conn.close()
    # Sized for 4 workers: batches went out as several embed units (bit n: unit n written).
    assert any(done > 1 for done in units)
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_killing_a_worker_mid_job_loses_and_duplicates_nothing(
    tmp_path: Path, start_workers
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=120)
    settings = queue_settings(tmp_path)
    victim = start_workers(settings, module=TEST_ACTORS, RIFFLUX_TEST_EMBED_DELAY="0.3")
    start_workers(settings, module=TEST_ACTORS, RIFFLUX_TEST_EMBED_DELAY="0.3")
    queue = IndexQueue(settings)
    try:
        job_id = queue.submit([corpus])
        wait_until(lambda: (queue.job(job_id) or JobRecord("", [], {}, "")).batches_done >= 2)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        record = queue.wait(job_id, timeout=120)
    finally:
        queue.close()
    assert record.state == "completed", record.errors
    assert record.files_done == 120
    stored = index_rows(settings.db_path)
    assert stored == reference_rows(tmp_path, corpus, settings)


def test_a_locked_database_is_retried_until_the_batch_lands(tmp_path: Path, start_workers) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=40)
    settings = queue_settings(tmp_path)
    start_workers(settings, module=TEST_ACTORS, RIFFLUX_TEST_EMBED_DELAY="0.5")
    queue = IndexQueue(settings)
    try:
        job_id = queue.submit([corpus])
        wait_until(lambda: (queue.job(job_id) or JobRecord("", [], {}, "")).planned)
        locker = connect(settings.db_path)
        locker.execute("BEGIN IMMEDIATE")
        # Held until a write outlasted SQLite's own busy timeout and the writer backed off
        # to retry, however late a loaded machine lets it reach the lock.
        log = tmp_path / "workers-0.log"
        wait_until(lambda: '"sqlite.busy_retry"' in log.read_text(errors="replace"), timeout=120)
        locker.execute("COMMIT")
        locker.close()
        record = queue.wait(job_id, timeout=120)
    finally:
        queue.close()
    assert record.state == "completed", record.errors
    assert record.retries >= 1
    assert record.files_done == 40


def test_an_embedder_of_another_model_fails_each_batch_once_without_retries(
    tmp_path: Path, start_workers
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=30)
    settings = queue_settings(tmp_path)
    attempts = tmp_path / "attempts.txt"
    start_workers(
        settings,
        module=TEST_ACTORS,
        RIFFLUX_TEST_EMBED_DIM="8",
        RIFFLUX_TEST_EMBED_ATTEMPTS=str(attempts),
    )
    record = run_job(settings, corpus)
    assert record.state == "failed"
    assert record.files_failed == 30 and record.batches_done == record.batches_total > 1
    assert all("EmbeddingModelMismatch" in e["error"] for e in record.errors), record.errors
    # One attempt per batch: EmbeddingModelMismatch is declared `throws`, not retried.
    tried = attempts.read_text().split()
    assert sorted(tried, key=int) == [str(n) for n in range(record.batches_total)]


def test_a_batch_that_always_fails_is_dead_lettered_and_fails_the_job(
    tmp_path: Path, start_workers
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=60)
    poison = corpus / "zz-poison.md"
    poison.write_text("# Poison\n\nThis file's batch always fails.\n" + "filler text " * 3000)
    settings = queue_settings(tmp_path)
    start_workers(
        settings, module=TEST_ACTORS, RIFFLUX_TEST_POISON="zz-poison", RIFFLUX_TEST_MAX_RETRIES="1"
    )
    record = run_job(settings, corpus)
    assert record.state == "failed"
    failed_paths = {e["path"] for e in record.errors}
    assert "docs/zz-poison.md" in failed_paths
    assert any("poisoned batch" in e["error"] for e in record.errors)
    assert record.files_failed >= 1
    assert record.files_done + record.files_failed == 61
    # The poisoned batch failed in its vector phase: its rows stay keyword-searchable,
    # without vectors; every other file has all its vectors.
    rows = index_rows(settings.db_path)
    assert {row[0] for row in rows} == {f"docs/{p.name}" for p in corpus.glob("*.md")}
    unembedded = {row[0] for row in rows if row[7] is None}
    assert "docs/zz-poison.md" in unembedded and len(unembedded) == record.files_failed
    broker = SQLiteBroker(settings.resolved_broker_url.split("sqlite:///")[1].split("?")[0])
    try:
        letters = broker.dead_letters()
    finally:
        broker.close()
    assert any(letter["actor_name"] == "embed_batch" for letter in letters)


def test_searches_keep_succeeding_while_a_job_runs(tmp_path: Path, start_workers) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=80)
    settings = queue_settings(tmp_path)
    start_workers(settings, processes=2, module=TEST_ACTORS, RIFFLUX_TEST_EMBED_DELAY="0.2")
    open_index(settings.db_path).close()  # Searches never create the index they read.
    service = SearchService(settings)
    outcomes: list[object] = []
    stop = threading.Event()

    def search_loop() -> None:
        while not stop.is_set():
            try:
                for mode in ("lexical", "semantic", "hybrid"):
                    service.search("agent instructions for testing", top_k=5, mode=mode)
                outcomes.append(True)
            except (sqlite3.Error, Exception) as exc:
                outcomes.append(exc)

    thread = threading.Thread(target=search_loop)
    thread.start()
    try:
        record = run_job(settings, corpus)
    finally:
        stop.set()
        thread.join()
        service.close()
    assert record.state == "completed"
    failures = [o for o in outcomes if o is not True]
    assert failures == [] and len(outcomes) > 10


def test_a_worker_with_other_settings_indexes_the_job_as_its_spec_says(
    tmp_path: Path, start_workers
) -> None:
    """The job's JobSpec, not the worker's environment, decides globs, chunk sizes and
    batches: rows equal an in-process index built with the submitter's settings."""
    corpus = copy_corpus(tmp_path / "docs", limit=60)
    (corpus / "notes.txt").write_text("plain text notes that only a *.txt glob indexes\n")
    settings = queue_settings(
        tmp_path, max_chunk_chars=800, min_chunk_chars=100, include_globs=("*.md",)
    )
    start_workers(
        settings,
        RIFFLUX_MAX_CHUNK_CHARS="3000",
        RIFFLUX_MIN_CHUNK_CHARS="0",
        RIFFLUX_INDEX_INCLUDE_GLOBS="*.txt",
        RIFFLUX_BATCH_TARGET_BYTES="1000000",
    )
    record = run_job(settings, corpus)
    assert record.state == "completed", record.errors
    assert record.files_total == record.files_done == 60
    # The spec's 20 kB batches; the worker's own target would cut ~16 (MIN_BATCHES).
    markdown_bytes = sum(p.stat().st_size for p in corpus.rglob("*.md"))
    assert record.batches_total >= markdown_bytes // settings.batch_target_bytes > 16
    stored = index_rows(settings.db_path)
    assert not any(row[0].endswith(".txt") for row in stored)
    assert stored == reference_rows(tmp_path, corpus, settings)
