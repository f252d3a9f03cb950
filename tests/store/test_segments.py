"""FTS5 segment merging after large jobs (rifflux.store.segments): the finalize of a job that
rewrote a large share of the index leaves every FTS5 table in one segment with the same
rankings; a small edit job leaves the segments alone."""

from __future__ import annotations

import sqlite3
from contextlib import closing, nullcontext
from pathlib import Path

import pytest
from rifflux_testing import copy_corpus, make_settings, sole_embed

from rifflux.embed.hashing import HashEmbedder
from rifflux.index import pipeline
from rifflux.index.indexer import Indexer
from rifflux.index.messages import EmbedRequest, VectorsRequest, finalize_request, plan_request
from rifflux.queue.client import IndexQueue
from rifflux.search.lexical import lexical_search
from rifflux.store import jobs
from rifflux.store.connection import PAGE_SIZE, open_index, transaction
from rifflux.store.fts import FTS_TABLE
from rifflux.store.paths import PATH_TABLE
from rifflux.store.segments import (
    FTS5_TABLES,
    MergePolicy,
    merge_after_job,
    merge_pending,
    merges_deferred,
    optimize,
    segment_count,
)

QUERIES = (
    "agent instructions for testing",
    "azure deployment security review",
    '"code review" python',
    "mcp server tools",
    "terraform",
    "the",
)


def run_until_finalize(settings, corpus: Path) -> str:
    """Submit a job and run every step but finalize, in this process (as the workers would)."""
    queue = IndexQueue(settings)
    try:
        job_id = queue.submit([corpus])
    finally:
        queue.close()
    chunks, embeds = [], []
    pipeline.plan(
        settings, plan_request(str(settings.db_path), job_id), chunks.append, embeds.append
    )
    for request in chunks:
        outcome = pipeline.chunk(request)
        if sole_embed(outcome) is not None:
            embeds.append(sole_embed(outcome))
    for embed in embeds:
        vectors = pipeline.embed(EmbedRequest.from_dict(embed.to_dict()), HashEmbedder())
        pipeline.write_vectors(VectorsRequest.from_dict(vectors.to_dict()))
    return job_id


def finalize(settings, job_id: str) -> jobs.JobRecord:
    record = pipeline.finalize(finalize_request(str(settings.db_path), job_id))
    assert record is not None and record.state == "completed"
    return record


def rankings(db: Path) -> list[list[tuple[int, tuple[str, int], float]]]:
    conn = open_index(db)
    try:
        return [[(h.row_id, h.key, h.bm25) for h in lexical_search(conn, q, 20)] for q in QUERIES]
    finally:
        conn.close()


def segments(db: Path, table: str = FTS_TABLE) -> int:
    conn = open_index(db)
    try:
        return segment_count(conn, table)
    finally:
        conn.close()


def test_a_large_jobs_finalize_merges_the_fts_index_and_a_small_job_does_not(
    tmp_path: Path,
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=40)
    settings = make_settings(tmp_path, batch_target_bytes=20_000)
    job_id = run_until_finalize(settings, corpus)
    unmerged = segments(settings.db_path)
    assert unmerged > 1  # one segment per batch's transaction, not yet automerged to one
    before = rankings(settings.db_path)
    assert all(before[:-1]), "every test query finds something"

    finalize(settings, job_id)  # the job wrote every chunk of the index
    assert segments(settings.db_path) == 1
    assert segments(settings.db_path, PATH_TABLE) == 1
    assert rankings(settings.db_path) == before  # same rows, order and bm25() values

    edited = sorted(corpus.rglob("*.md"))[0]
    edited.write_text(edited.read_text() + "\n\nA terraform note about zygomorphic review.\n")
    job_id = run_until_finalize(settings, corpus)
    record = finalize(settings, job_id)
    conn = open_index(settings.db_path)
    total = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    conn.close()
    assert 0 < record.chunks_written < 0.25 * total  # a one-file job
    # its deletes and inserts (one statement each) are left for automerge
    assert 1 < segments(settings.db_path) <= 3


def test_the_in_process_indexer_merges_after_a_full_run(tmp_path: Path) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=30)
    settings = make_settings(tmp_path, batch_target_bytes=20_000)
    Indexer(settings).run([corpus])
    assert segments(settings.db_path) == 1
    edited = sorted(corpus.rglob("*.md"))[0]
    edited.write_text(edited.read_text() + "\n\nOne more zygomorphic line.\n")
    report = Indexer(settings).run([corpus])
    assert report.files_indexed == 1
    assert 1 < segments(settings.db_path) <= 3  # not one segment per chunk written


def file_state(db: Path) -> tuple[int, int, int]:
    """(auto_vacuum, free pages, main file bytes after a checkpoint)."""
    conn = open_index(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        mode = conn.execute("PRAGMA auto_vacuum").fetchone()[0]
        return mode, conn.execute("PRAGMA freelist_count").fetchone()[0], db.stat().st_size
    finally:
        conn.close()


def test_a_full_run_gives_the_pages_it_freed_back_with_the_same_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=30)
    kept = make_settings(
        tmp_path, db_path=tmp_path / "kept" / "index.db", batch_target_bytes=20_000
    )
    with monkeypatch.context() as patch:
        patch.setattr("rifflux.store.segments.release_free_pages", lambda conn: 0)
        Indexer(kept).run([corpus])
    released = make_settings(
        tmp_path, db_path=tmp_path / "released" / "index.db", batch_target_bytes=20_000
    )
    Indexer(released).run([corpus])
    mode, free_kept, bytes_kept = file_state(kept.db_path)
    assert mode == 2 and free_kept > 0  # the merge freed pages: the check proves something
    assert file_state(released.db_path) == (2, 0, bytes_kept - free_kept * PAGE_SIZE)
    assert rankings(released.db_path) == rankings(kept.db_path)


def test_segment_count_reads_fts5s_structure_record(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "t.db")
    conn.execute("CREATE VIRTUAL TABLE chunks_fts USING fts5(heading_path, content)")
    assert segment_count(conn) == 0
    assert segment_count(conn, "missing_table") == 0
    for n in range(3):  # one segment per transaction (automerge waits for 4 on a level)
        with conn:
            conn.execute("INSERT INTO chunks_fts VALUES ('h', ?)", (f"word{n} common",))
    assert segment_count(conn) == 3
    assert optimize(conn) == {FTS_TABLE: 3}
    assert segment_count(conn) == 1
    assert optimize(conn) == {}  # already one segment: nothing to do
    conn.close()


@pytest.mark.parametrize(
    ("written", "total", "due"),
    [
        (0, 0, False),
        (1, 4, True),
        (24, 100, False),
        (25, 100, True),
        (100_000, 10**7, True),
        (99_999, 10**7, False),
    ],
)
def test_the_policy_merges_only_after_jobs_that_wrote_a_large_share(
    written: int, total: int, due: bool
) -> None:
    assert MergePolicy().due(written, total) is due


def test_a_merge_that_fails_leaves_the_index_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE chunks (id INTEGER PRIMARY KEY)")
    conn.execute("CREATE VIRTUAL TABLE chunks_fts USING fts5(heading_path, content)")
    for n in range(2):
        with conn:
            conn.execute("INSERT INTO chunks VALUES (?)", (n + 1,))
            conn.execute("INSERT INTO chunks_fts VALUES ('h', ?)", (f"word{n}",))
    read_only = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:  # the write fails: logged, not raised, nothing changed
        assert merge_after_job(read_only, 2) == {}
    finally:
        read_only.close()
    assert segment_count(conn) == 2
    assert merge_after_job(conn, 2) == {FTS_TABLE: 2}
    assert segment_count(conn) == 1
    conn.close()


def automerge_rows(db: Path) -> list[tuple[str, str]]:
    conn = open_index(db)
    try:
        return [
            (table, str(row[0]))
            for table in FTS5_TABLES
            for row in conn.execute(f"SELECT v FROM {table}_config WHERE k = 'automerge'")
        ]
    finally:
        conn.close()


def pending(db: Path) -> bool:
    with closing(open_index(db)) as conn:
        return merge_pending(conn)


def test_a_full_jobs_batches_leave_their_merges_to_its_finalize(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=20)
    deferred = make_settings(
        tmp_path, db_path=tmp_path / "d" / "index.db", batch_target_bytes=30_000
    )
    job_id = run_until_finalize(deferred, corpus)
    conn = open_index(deferred.db_path)
    batches = jobs.get_job(conn, job_id).batches_total
    conn.close()
    assert 8 <= batches < 16  # (FTS5 merges 16 segments of a level in any case)
    assert segments(deferred.db_path) >= batches  # one per batch's transaction at least
    assert pending(deferred.db_path)
    assert automerge_rows(deferred.db_path) == []  # the setting is back to FTS5's default

    merged = make_settings(tmp_path, db_path=tmp_path / "m" / "index.db", batch_target_bytes=30_000)
    with monkeypatch.context() as patch:
        patch.setattr(MergePolicy, "defers_merges", lambda self, planned, stored: False)
        merged_job = run_until_finalize(merged, corpus)
    assert not pending(merged.db_path)
    assert rankings(deferred.db_path) == rankings(merged.db_path)

    finalize(deferred, job_id)
    finalize(merged, merged_job)
    assert segments(deferred.db_path) == 1
    assert not pending(deferred.db_path)
    assert rankings(deferred.db_path) == rankings(merged.db_path)


def test_a_pending_merge_is_done_by_the_next_finalize_even_of_a_small_job(tmp_path: Path) -> None:
    conn = open_index(tmp_path / "index.db")
    try:
        conn.execute(
            "INSERT INTO files(id, path, mtime_ns, size_bytes, sha256, indexed_at) "
            "VALUES (1, 'a.md', 0, 0, '', 0)"
        )
        for n in range(3):
            with transaction(conn), merges_deferred(conn):
                conn.execute(
                    "INSERT INTO chunks(chunk_id, file_id, chunk_index, heading_path, content, "
                    "embed_sha256) VALUES (?, 1, ?, 'h', ?, ?)",
                    (f"c{n}", n, f"word{n} common", f"s{n}"),
                )
        assert segment_count(conn) == 3 and merge_pending(conn)
        assert not MergePolicy().due(1, 1000)  # the next job alone would not earn it
        assert merge_after_job(conn, 1)[FTS_TABLE] == 3
        assert segment_count(conn) == 1 and not merge_pending(conn)
    finally:
        conn.close()


def test_deferring_merges_keeps_a_tables_own_automerge_setting(tmp_path: Path) -> None:
    conn = open_index(tmp_path / "index.db")
    try:
        conn.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rank) VALUES ('automerge', 8)")
        with transaction(conn), merges_deferred(conn):
            pass
        row = conn.execute(f"SELECT v FROM {FTS_TABLE}_config WHERE k = 'automerge'").fetchone()
        assert row[0] == 8
        with pytest.raises(RuntimeError, match="inside a write transaction"), merges_deferred(conn):
            pass
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("planned", "stored", "defers"),
    [(0, 0, False), (1, 0, True), (24, 100, False), (25, 100, True), (1, 1_000, False)],
)
def test_a_job_defers_its_merges_only_when_it_writes_a_large_share_of_the_files(
    planned: int, stored: int, defers: bool
) -> None:
    assert MergePolicy().defers_merges(planned, stored) is defers


def big_write(conn: sqlite3.Connection, n: int) -> None:
    """One transaction's FTS5 rows: enough postings (~100 leaf pages) for automerge to
    work on (it merges in proportion to the pages a transaction writes)."""
    rows = [(f"w{n}x{i} w{i % 997} w{i % 89} common",) for i in range(12_000)]
    conn.executemany("INSERT INTO chunks_fts(content) VALUES (?)", rows)


def test_deferred_merges_leave_each_transactions_segment_where_automerge_folds_them(
    tmp_path: Path,
) -> None:
    counts = {}
    for deferred in (False, True):
        conn = open_index(tmp_path / f"{deferred}.db")
        try:
            for n in range(6):
                with transaction(conn), merges_deferred(conn) if deferred else nullcontext():
                    big_write(conn, n)
            counts[deferred] = segment_count(conn)
            assert merge_pending(conn) is deferred
        finally:
            conn.close()
    assert counts[False] < 6  # automerge folded four of them
    assert counts[True] == 6
