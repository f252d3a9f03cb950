"""The plan step streams its scan and its plan: its memory does not grow with the corpus,
and what it plans is what the whole lists gave (the sorted walk, the merge join with
the files table, the batches)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from rifflux_testing import make_settings

from rifflux.index import pipeline
from rifflux.index.messages import plan_request
from rifflux.index.planner import merge_join
from rifflux.index.scan import ScannedFile, scan_roots
from rifflux.queue.client import IndexQueue
from rifflux.store import jobs
from rifflux.store.connection import open_index

FILES_PER_DIR = 500


def tiny_tree(root: Path, files: int) -> Path:
    """``files`` markdown files of ~100 bytes, ``FILES_PER_DIR`` per folder."""
    for n in range(files):
        folder = root / f"part-{n // FILES_PER_DIR:03d}"
        if n % FILES_PER_DIR == 0:
            folder.mkdir(parents=True)
        (folder / f"doc-{n:06d}.md").write_text(
            f"# Note {n}\n\nA tiny file, number {n}, for a plan that reads no text twice.\n"
        )
    return root


def plan_peak(tmp_path: Path, files: int) -> tuple[int, jobs.JobRecord]:
    """Peak bytes Python allocated while one job's plan step ran over a new tree of
    ``files`` files (sending its chunk messages to nowhere), and the job row it left."""
    corpus = tiny_tree(tmp_path / "docs", files)
    # 16 kB batches (MIN_BATCH_BYTES): a larger target makes a plan hold its changed
    # files until 16 batches' worth is seen, since the batch size depends on the total.
    settings = make_settings(tmp_path, batch_target_bytes=16_000)
    queue = IndexQueue(settings)
    try:
        job_id = queue.submit([corpus])
    finally:
        queue.close()
    request = plan_request(str(settings.db_path), job_id)
    sent: list[int] = []
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        outcome = pipeline.plan(settings, request, lambda c: sent.append(len(c.files)), print)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert outcome.batches == len(sent) and sum(sent) == files
    conn = open_index(settings.db_path)
    try:
        record = jobs.get_job(conn, job_id)
    finally:
        conn.close()
    assert record is not None
    return peak, record


def test_a_planner_whose_memory_does_not_grow_with_the_corpus(tmp_path: Path) -> None:
    small, small_job = plan_peak(tmp_path / "small", 400)
    large, large_job = plan_peak(tmp_path / "large", 4_000)
    assert (small_job.files_total, large_job.files_total) == (400, 4_000)
    assert large_job.files_planned == 4_000 and large_job.batches_total > 15
    # Whole lists of the scan, the states and the batches grew with the corpus (0.51 MB
    # and 2.56 MB here); streamed, 0.47 MB and 0.71 MB (one directory's listing, one
    # page of batches, one batch's texts).
    assert large < 2 * small, (small, large)


def test_the_walk_yields_paths_in_sorted_order(tmp_path: Path) -> None:
    # "a-b/x.md" < "a.md" < "a/x.md" by path, while a walk by name visits "a" first.
    for rel in ("a/x.md", "a/b/y.md", "a-b/x.md", "a.md", "a0.md", "b/c.md", "a b/z.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    found = scan_roots(
        [tmp_path, tmp_path / "a"],
        base_dir=tmp_path,
        include_globs=["*.md"],
        exclude_globs=[],
    )
    paths = [f.rel_path for f in found.files]
    assert paths == sorted(paths) and len(paths) == len(set(paths)) == 7


def test_the_merge_join_pairs_rows_and_reports_the_stored_paths_not_scanned() -> None:
    scanned = [ScannedFile(f"/x/{p}", p, 1, 1) for p in ("b", "c", "e")]
    stored = [(p, 1, 1, "h", False) for p in ("a", "c", "d", "f")]
    gone: list[str] = []
    pairs = [(s.rel_path, row and row[0]) for s, row in merge_join(scanned, stored, gone.append)]
    assert pairs == [("b", None), ("c", "c"), ("e", None)]
    assert gone == ["a", "d", "f"]
