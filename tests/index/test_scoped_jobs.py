"""Jobs scoped to the paths that changed (the watcher's): the plan scans those paths only,
and the index ends exactly as after a job of the whole roots; wherever that could differ
(a symlink, a root never scanned whole), the plan scans the whole roots."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from rifflux_testing import copy_corpus, index_rows, make_settings, reference_rows

from rifflux.embed.hashing import HashEmbedder
from rifflux.index import pipeline
from rifflux.index.messages import finalize_request, plan_request
from rifflux.index.planner import SCAN_LINKS_KEY
from rifflux.queue.client import IndexQueue
from rifflux.store import jobs
from rifflux.store.connection import open_index
from rifflux.store.reader import get_metadata


def run_job(settings, roots: list[Path], **options: Any) -> jobs.JobRecord:
    """Submit one job as every caller does and run its steps in this process."""
    queue = IndexQueue(settings)
    try:
        job_id = queue.submit(roots, **options)
    finally:
        queue.close()
    chunks: list = []
    embeds: list = []
    request = plan_request(str(settings.db_path), job_id)
    pipeline.plan(settings, request, chunks.append, embeds.append)
    assert embeds == []  # the hash embedder runs inside the chunk step
    for chunk_request in chunks:
        pipeline.chunk(chunk_request, HashEmbedder())
    record = pipeline.finalize(finalize_request(str(settings.db_path), job_id))
    assert record is not None and record.state == "completed", record
    return record


def metadata(settings, key: str) -> str | None:
    conn = open_index(settings.db_path)
    try:
        return get_metadata(conn, key)
    finally:
        conn.close()


def corpus_of(tmp_path: Path) -> Path:
    corpus = copy_corpus(tmp_path / "docs", limit=40)
    (corpus / "v1.2").mkdir()
    (corpus / "v1.2" / "old.md").write_text("# Old release\n\nnotes about the v1.2 release\n")
    (corpus / "v1.2" / "older.md").write_text("# Older\n\nmore notes\n")
    return corpus


def test_a_scoped_job_scans_its_paths_and_ends_as_a_whole_job(tmp_path: Path) -> None:
    corpus = corpus_of(tmp_path)
    settings = make_settings(tmp_path)
    first = run_job(settings, [corpus])
    assert metadata(settings, SCAN_LINKS_KEY) == '{"docs": 0}'
    total = first.files_total

    # An edit, a new file, a deleted file and a folder named like a file moved away.
    edited = sorted(corpus.glob("*.md"))[0]
    deleted = sorted(corpus.glob("*.md"))[5]
    edited.write_text(edited.read_text() + "\n\n## Appendix\n\nscopedjobword appears here\n")
    added = corpus / "new" / "added.md"
    added.parent.mkdir()
    added.write_text("# Added\n\na new note\n")
    deleted.unlink()
    shutil.move(corpus / "v1.2", tmp_path / "moved-away")
    scope = [edited, added, deleted, corpus / "v1.2"]

    record = run_job(settings, [corpus], scope=scope)
    # Only the scoped paths were scanned: the edited and the added file.
    assert (record.files_total, record.files_deleted) == (2, 3)
    assert total > 40
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_a_scoped_job_in_a_root_with_a_symlink_scans_the_whole_root(tmp_path: Path) -> None:
    corpus = corpus_of(tmp_path)
    target = sorted(corpus.glob("*.md"))[3]
    (corpus / "alias.md").symlink_to(target)
    settings = make_settings(tmp_path)
    first = run_job(settings, [corpus])
    assert metadata(settings, SCAN_LINKS_KEY) == '{"docs": 1}'

    # The link's text changes with its target's, and the event names only the target.
    target.write_text(target.read_text() + "\n\nlinkedword added to the target\n")
    record = run_job(settings, [corpus], scope=[target])
    assert record.files_total == first.files_total
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_a_scoped_walk_that_meets_a_new_symlink_scans_the_whole_root(tmp_path: Path) -> None:
    corpus = corpus_of(tmp_path)
    settings = make_settings(tmp_path)
    first = run_job(settings, [corpus])
    link = corpus / "alias.md"
    link.symlink_to(sorted(corpus.glob("*.md"))[3])

    record = run_job(settings, [corpus], scope=[link])
    assert record.files_total == first.files_total + 1
    assert metadata(settings, SCAN_LINKS_KEY) == '{"docs": 1}'
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)

    # The link removed: the next scoped job still scans whole (the record says 1) and
    # records 0, and the one after that is scoped again.
    link.unlink()
    assert run_job(settings, [corpus], scope=[link]).files_total == first.files_total
    assert metadata(settings, SCAN_LINKS_KEY) == '{"docs": 0}'
    edited = sorted(corpus.glob("*.md"))[0]
    edited.write_text(edited.read_text() + "\n\nmore text\n")
    assert run_job(settings, [corpus], scope=[edited]).files_total == 1
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


@pytest.mark.parametrize("job", ["scoped", "forced"])
def test_a_file_replaced_by_a_directory_leaves_the_index(tmp_path: Path, job: str) -> None:
    """A file replaced by a directory of the same name (one empty, one holding a note) is
    a file no longer: the watcher's job for the changed paths and a forced job of the
    whole root each delete its rows, and index what the new directory holds."""
    corpus = corpus_of(tmp_path)
    settings = make_settings(tmp_path)
    run_job(settings, [corpus])
    replaced = sorted(corpus.glob("*.md"))[:2]
    for path in replaced:
        path.unlink()
        path.mkdir()
    (replaced[0] / "inside.md").write_text("# Inside\n\na file in the new directory\n")

    if job == "scoped":
        record = run_job(settings, [corpus], scope=replaced)
    else:
        record = run_job(settings, [corpus], force=True)
    assert record.files_deleted == 2
    stored = {row[0] for row in index_rows(settings.db_path)}
    names = {f"docs/{path.name}" for path in replaced}
    assert not names & stored
    assert f"docs/{replaced[0].name}/inside.md" in stored
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def replace_delete_and_edit(corpus: Path) -> list[Path]:
    """Replace three files by directories (one holding a new note), delete one, edit
    one; returns the changed paths, as the watcher's events name them."""
    names = sorted(corpus.glob("*.md"))
    replaced, deleted, edited = names[:3], names[3], names[4]
    for path in replaced:
        path.unlink()
        path.mkdir()
    (replaced[0] / "inside.md").write_text("# Inside\n\na file in the new directory\n")
    deleted.unlink()
    edited.write_text(edited.read_text() + "\n\n## Later\n\nwatcherjobword\n")
    return [*replaced, deleted, edited]


def plan_forced_job(settings, corpus: Path) -> tuple[str, list]:
    """A forced job of ``corpus``, planned; its id and its chunk requests (not run)."""
    queue = IndexQueue(settings)
    try:
        forced_id = queue.submit([corpus], force=True)
    finally:
        queue.close()
    batches: list = []
    pipeline.plan(
        settings, plan_request(str(settings.db_path), forced_id), batches.append, [].append
    )
    return forced_id, batches


def finish(settings, job_id: str, batches: list) -> None:
    for request in batches:
        pipeline.chunk(request, HashEmbedder())
    record = pipeline.finalize(finalize_request(str(settings.db_path), job_id))
    assert record is not None and record.state == "completed"


def test_a_batch_planned_before_a_later_job_does_not_undo_that_job(tmp_path: Path) -> None:
    """A forced job is planned; then files are replaced by directories, deleted, edited,
    and the watcher's scoped job for them runs to its end; then the forced job's batches
    are chunked (their files read now). The index ends as the files are now."""
    corpus = corpus_of(tmp_path)
    settings = make_settings(tmp_path)
    run_job(settings, [corpus])
    forced_id, batches = plan_forced_job(settings, corpus)
    run_job(settings, [corpus], scope=replace_delete_and_edit(corpus))

    finish(settings, forced_id, batches)
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_a_batch_read_before_a_later_job_does_not_undo_that_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forced job's chunk step has read its batch's files when they are replaced by
    directories, deleted and edited, and the watcher's scoped job for them runs to its
    end before that step takes the write lock: the step's older read is not written
    over the later job. The index ends as the files are now."""
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for i in range(8):  # Small: one batch holds them all.
        (corpus / f"note-{i}.md").write_text(f"# Note {i}\n\nA short note, number {i}.\n")
    settings = make_settings(tmp_path)
    run_job(settings, [corpus])
    forced_id, batches = plan_forced_job(settings, corpus)
    assert len(batches) == 1  # The one read holds every file the later job changes.
    read_planned = pipeline.read_planned
    changed: list[Path] = []

    def read_then_change(*args: Any, **kwargs: Any) -> Any:
        read = read_planned(*args, **kwargs)
        if not changed:  # The forced job's read; the later job reads through here too.
            changed.extend(replace_delete_and_edit(corpus))
            run_job(settings, [corpus], scope=changed)
        return read

    monkeypatch.setattr(pipeline, "read_planned", read_then_change)
    finish(settings, forced_id, batches)
    assert changed
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_a_root_never_scanned_whole_is_scanned_whole(tmp_path: Path) -> None:
    corpus = corpus_of(tmp_path)
    settings = make_settings(tmp_path)
    one = sorted(corpus.glob("*.md"))[0]
    record = run_job(settings, [corpus], scope=[one])
    assert record.files_total > 40
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)


def test_a_worker_that_knows_no_scope_runs_the_whole_job(tmp_path: Path) -> None:
    """A scoped job's options stay readable by a worker of the version before: the
    scope is one more key, and a spec without a scope stores none."""
    from rifflux.index.jobspec import JobSpec

    spec = JobSpec.from_settings(make_settings(tmp_path), scope=("/a/b.md",))
    assert spec.to_dict()["scope"] == ["/a/b.md"]
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert "scope" not in JobSpec.from_settings(make_settings(tmp_path)).to_dict()
