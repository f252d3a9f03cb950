"""The file watcher keeps a real index current through real worker processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import watchfiles
from rifflux_testing import index_rows, make_settings, wait_until

from rifflux.config import Settings
from rifflux.errors import IndexLockedError
from rifflux.reindex.runner import JobRunner as IndexQueue
from rifflux.search.service import SearchService
from rifflux.store.connection import open_index
from rifflux.store.jobs import recent_jobs
from rifflux.watch.coalesce import JobCoalescer
from rifflux.watch.watcher import FileWatcher, event_filter, read_watcher_state

pytestmark = pytest.mark.slow


@pytest.fixture
def watched(tmp_path: Path, start_workers) -> Iterator[tuple[Settings, Path, IndexQueue]]:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "seed.md").write_text("# Seed\n\nThe first document.\n")
    settings = make_settings(tmp_path, file_watcher_debounce_ms=200)
    start_workers(settings)
    queue = IndexQueue(settings)
    yield settings, root, queue
    queue.close()


def job_count(settings: Settings) -> int:
    conn = open_index(settings.db_path)
    try:
        return len(recent_jobs(conn, 1000))
    finally:
        conn.close()


def indexed_paths(settings: Settings) -> set[str]:
    return {row[0] for row in index_rows(settings.db_path)}


def found(service: SearchService, text: str, mode: str) -> bool:
    return any(text in r["content"] for r in service.search(text, top_k=5, mode=mode))


def test_an_edit_is_searchable_within_seconds(watched) -> None:
    settings, root, queue = watched
    watcher = FileWatcher(settings, [root], queue).start()
    service = SearchService(settings)
    try:
        wait_until(lambda: "docs/seed.md" in indexed_paths(settings), timeout=60)
        (root / "seed.md").write_text("# Seed\n\nNow about quasar telescopes.\n")
        wait_until(lambda: found(service, "quasar telescopes", "lexical"), timeout=60)
        # Vectors are searchable once the job's finalize step publishes the cache.
        wait_until(lambda: found(service, "quasar telescopes", "semantic"), timeout=60)
    finally:
        watcher.stop()
        service.close()


def test_edits_are_scoped_jobs_and_a_folder_moved_away_is_pruned(watched, tmp_path) -> None:
    settings, root, queue = watched
    for i in range(30):
        (root / f"other-{i:02}.md").write_text(f"# Other {i}\n\nfiller note {i}\n")
    (root / "v1.2").mkdir()
    (root / "v1.2" / "release.md").write_text("# Release\n\nnotes of release one two\n")
    watcher = FileWatcher(settings, [root], queue).start()
    try:
        wait_until(lambda: "docs/v1.2/release.md" in indexed_paths(settings), timeout=60)
        wait_until(lambda: watcher.coalescer.idle, timeout=60)
        before = job_count(settings)
        (root / "seed.md").write_text("# Seed\n\nNow about pulsar timing arrays.\n")
        wait_until(lambda: "pulsar timing" in contents(settings)["docs/seed.md"], timeout=60)
        wait_until(lambda: watcher.coalescer.idle, timeout=60)
        # The edit's job looked at the edited file only, not at the 32 files of the root.
        edit_jobs = newest_jobs(settings, job_count(settings) - before)
        assert [job.files_total for job in edit_jobs] == [1] * len(edit_jobs)

        # A folder whose name has a suffix, moved out: one event, for the folder.
        (root / "v1.2").rename(tmp_path / "elsewhere")
        wait_until(lambda: "docs/v1.2/release.md" not in indexed_paths(settings), timeout=60)
        assert len(indexed_paths(settings)) == 31
    finally:
        watcher.stop()


def contents(settings: Settings) -> dict[str, str]:
    return {row[0]: row[5] for row in index_rows(settings.db_path)}


def newest_jobs(settings: Settings, count: int):
    conn = open_index(settings.db_path)
    try:
        return recent_jobs(conn, count)
    finally:
        conn.close()


def test_a_burst_of_200_writes_costs_at_most_two_jobs(watched) -> None:
    settings, root, queue = watched
    watcher = FileWatcher(settings, [root], queue).start()
    try:
        wait_until(lambda: "docs/seed.md" in indexed_paths(settings), timeout=60)
        wait_until(lambda: watcher.coalescer.idle, timeout=60)
        before = job_count(settings)
        for i in range(200):
            (root / f"note-{i:03}.md").write_text(f"# Note {i}\n\nburst note number {i}\n")
        expected = {f"docs/note-{i:03}.md" for i in range(200)} | {"docs/seed.md"}
        wait_until(lambda: indexed_paths(settings) == expected, timeout=120)
        wait_until(lambda: watcher.coalescer.idle, timeout=60)
        assert 1 <= job_count(settings) - before <= 2
    finally:
        watcher.stop()


def test_delete_removes_and_rename_moves_chunks(watched) -> None:
    settings, root, queue = watched
    (root / "old-name.md").write_text("# Moving\n\nthis text moves with its file\n")
    (root / "doomed.md").write_text("# Doomed\n\nthis file is deleted\n")
    watcher = FileWatcher(settings, [root], queue).start()
    try:
        wait_until(lambda: {"docs/old-name.md", "docs/doomed.md"} <= indexed_paths(settings))
        (root / "doomed.md").unlink()
        (root / "old-name.md").rename(root / "new-name.md")
        wait_until(
            lambda: indexed_paths(settings) == {"docs/seed.md", "docs/new-name.md"}, timeout=60
        )
        contents = {row[0]: row[5] for row in index_rows(settings.db_path)}
        assert "moves with its file" in contents["docs/new-name.md"]
    finally:
        watcher.stop()


def test_files_replaced_by_directories_leave_the_index(watched) -> None:
    """A file replaced by a directory of the same name (empty, or holding a note): the
    watcher's jobs delete the file's rows and index the note, with no other reindex."""
    settings, root, queue = watched
    names = [f"note-{i}.md" for i in range(6)]
    for name in names:
        (root / name).write_text(f"# {name}\n\nthis note becomes a directory\n")
    watcher = FileWatcher(settings, [root], queue).start()
    try:
        wait_until(lambda: {f"docs/{n}" for n in names} <= indexed_paths(settings), timeout=60)
        wait_until(lambda: watcher.coalescer.idle, timeout=60)
        for name in names[:4]:
            (root / name).unlink()
            (root / name).mkdir()
        (root / names[0] / "inside.md").write_text("# Inside\n\na note in the new directory\n")
        expected = {"docs/seed.md", f"docs/{names[0]}/inside.md"}
        expected |= {f"docs/{name}" for name in names[4:]}
        wait_until(lambda: indexed_paths(settings) == expected, timeout=60)
    finally:
        watcher.stop()


def test_a_crashed_watcher_restarts_and_reports_it(watched) -> None:
    settings, root, queue = watched
    calls = []

    def crash_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("simulated watcher crash")
        return watchfiles.watch(*args, **kwargs)

    watcher = FileWatcher(settings, [root], queue, watch_fn=crash_once).start()
    service = SearchService(settings)
    try:
        wait_until(lambda: watcher.state.restarts == 1 and watcher.state.running, timeout=30)
        (root / "after.md").write_text("# After\n\nwritten after the crash: nebula\n")
        wait_until(lambda: found(service, "nebula", "lexical"), timeout=60)
        conn = open_index(settings.db_path)
        try:
            state = read_watcher_state(conn)
        finally:
            conn.close()
        assert state["restarts"] == 1 and "simulated watcher crash" in state["last_error"]
    finally:
        watcher.stop()
        service.close()


def test_a_watcher_that_keeps_crashing_gives_up(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    settings = make_settings(tmp_path)

    class NoJobs:
        def submit(self, paths, **_kw):
            return "job"

        def job(self, job_id):
            return None

        def unfinished_job_for(self, paths):
            return None

    def always_crash(*_args, **_kwargs):
        raise RuntimeError("broken")

    watcher = FileWatcher(
        settings, [root], NoJobs(), watch_fn=always_crash, max_consecutive_crashes=2
    )
    watcher.start()
    wait_until(lambda: watcher.state.gave_up, timeout=10)
    assert watcher.state.restarts == 2 and not watcher.state.running
    watcher.stop()


class FakeQueue:
    """Jobs whose state a test sets; records each job's scope."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.scopes: dict[str, list[str] | None] = {}

    def submit(self, paths, *, scope=None, **_kw):
        job_id = f"j{len(self.states)}"
        self.states[job_id] = "queued"
        self.scopes[job_id] = None if scope is None else list(scope)
        return job_id

    def job(self, job_id):
        from rifflux.store.jobs import JobRecord

        return JobRecord(job_id, [], {}, self.states[job_id])

    def unfinished_job_for(self, paths):
        return None


def test_a_change_whose_submit_meets_a_locked_index_is_owed_not_lost() -> None:
    queue = FakeQueue()
    coalescer = JobCoalescer(queue, [Path("/docs")])
    real_submit = queue.submit

    def locked(paths, **kw):
        raise IndexLockedError("the index /docs/.rifflux/index.db is locked (…)")

    queue.submit = locked  # type: ignore[method-assign]
    assert coalescer.changed(["/docs/a.md"]) is None
    assert coalescer.tick() is None  # Still locked: still owed.
    queue.submit = real_submit  # type: ignore[method-assign]
    assert coalescer.tick() == "j0"
    assert queue.scopes["j0"] == ["/docs/a.md"]


def test_coalescer_skips_while_queued_and_owes_one_follow_up_while_running() -> None:
    queue = FakeQueue()
    coalescer = JobCoalescer(queue, [Path("/docs")])
    assert coalescer.changed() == "j0"
    assert coalescer.changed() is None  # queued: its scan will see the change
    queue.states["j0"] = "running"
    assert coalescer.changed() is None and coalescer.changed() is None
    assert coalescer.tick() is None  # still running
    queue.states["j0"] = "completed"
    assert coalescer.tick() == "j1"
    assert coalescer.tick() is None
    queue.states["j1"] = "completed"
    assert coalescer.idle


def test_coalescer_scopes_jobs_to_the_changed_paths_and_owes_the_rest() -> None:
    from rifflux.watch.coalesce import MAX_SCOPE_PATHS

    queue = FakeQueue()
    coalescer = JobCoalescer(queue, [Path("/docs")])
    assert coalescer.changed(["/docs/a"]) == "j0"
    assert queue.scopes["j0"] == ["/docs/a"]
    # Queued: a path it covers (under its folder) is left to it, any other is owed.
    assert coalescer.changed(["/docs/a/x.md"]) is None and not coalescer.dirty
    assert coalescer.changed(["/docs/b.md"]) is None and coalescer.dirty
    queue.states["j0"] = "running"
    assert coalescer.changed(["/docs/a/x.md", "/docs/c.md"]) is None
    queue.states["j0"] = "completed"
    assert coalescer.tick() == "j1"
    assert queue.scopes["j1"] == ["/docs/a/x.md", "/docs/b.md", "/docs/c.md"]
    # A change that names no path, or too many paths owed: the whole roots.
    queue.states["j1"] = "running"
    assert coalescer.changed() is None
    queue.states["j1"] = "completed"
    assert coalescer.tick() == "j2" and queue.scopes["j2"] is None
    assert coalescer.changed(["/docs/z.md"]) is None  # a whole-roots job covers it
    queue.states["j2"] = "running"
    coalescer.changed([f"/docs/{i}.md" for i in range(MAX_SCOPE_PATHS + 1)])
    queue.states["j2"] = "completed"
    assert coalescer.tick() == "j3" and queue.scopes["j3"] is None
    assert coalescer.changed([f"/docs/{i}.md" for i in range(MAX_SCOPE_PATHS + 1)]) is None
    queue.states["j3"] = "completed"
    assert coalescer.idle


def test_coalescers_of_two_processes_queue_one_job_for_one_change(tmp_path: Path) -> None:
    # Two queues on one index stand for two HTTP workers of one server (each runs
    # auto-reindex-on-search), or two servers watching the same roots. No workers: the
    # jobs stay where the test puts them.
    from rifflux.store.jobs import update_job

    root = tmp_path / "docs"
    root.mkdir()
    settings = make_settings(tmp_path)
    first, second = IndexQueue(settings), IndexQueue(settings)
    try:
        one, other = JobCoalescer(first, [root]), JobCoalescer(second, [root])
        job = one.changed()
        assert job is not None
        assert other.changed() is None  # the other process's queued job will see it
        conn = open_index(settings.db_path)
        try:
            update_job(conn, job, state="running")
            assert other.changed() is None and other.tick() is None  # owed, not doubled
            update_job(conn, job, state="completed")
        finally:
            conn.close()
        follow_up = other.tick()
        assert follow_up is not None and one.changed() is None
        assert job_count(settings) == 2
        # Another job's roots or settings are not the same job.
        assert JobCoalescer(first, [tmp_path]).changed() not in (None, follow_up)
        forced = second.submit([root], force=True)
        assert second.unfinished_job_for([root]) == follow_up != forced
    finally:
        first.close()
        second.close()


def test_index_status_shows_the_watcher_state(watched) -> None:
    from rifflux.mcp.tools import ToolContext, index_status

    settings, root, queue = watched
    open_index(settings.db_path).close()  # index_status never creates the index it reads.
    watcher = FileWatcher(settings, [root], queue).start()
    ctx = ToolContext.from_settings(settings)
    try:
        wait_until(lambda: index_status(ctx)["watcher"].get("last_job_id"), timeout=30)
        state = index_status(ctx)["watcher"]
        assert state["running"] and state["roots"] == [str(root)]
    finally:
        watcher.stop()
        ctx.close()
    assert index_status_after_stop(settings)["running"] is False


def index_status_after_stop(settings: Settings) -> dict:
    conn = open_index(settings.db_path)
    try:
        return read_watcher_state(conn)
    finally:
        conn.close()


def test_auto_reindex_on_search_starts_one_job_per_interval(tmp_path: Path, start_workers) -> None:
    from rifflux.mcp.tools import ToolContext, search_rifflux

    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nauto reindexed pulsar\n")
    settings = make_settings(
        tmp_path,
        auto_reindex_on_search=True,
        auto_reindex_paths=(str(root),),
        auto_reindex_min_interval_seconds=3600,
        allowed_roots=(str(tmp_path),),
    )
    start_workers(settings)
    open_index(settings.db_path).close()  # A search never creates the index it reads.
    ctx = ToolContext.from_settings(settings)
    try:
        for _ in range(5):
            search_rifflux(ctx, "pulsar", mode="lexical")
        wait_until(lambda: search_rifflux(ctx, "pulsar", mode="lexical")["count"] == 1)
        assert job_count(settings) == 1
    finally:
        ctx.close()


def test_an_index_in_the_folder_above_the_watched_root_still_sees_edits(
    tmp_path: Path, start_workers
) -> None:
    # RIFFLUX_DB_PATH=./index.db with docs/ watched: the index's folder holds the root.
    root = tmp_path / "docs"
    root.mkdir()
    (root / "seed.md").write_text("# Seed\n\nThe first document.\n")
    settings = make_settings(tmp_path, db_path=tmp_path / "index.db", file_watcher_debounce_ms=200)
    start_workers(settings)
    queue = IndexQueue(settings)
    watcher = FileWatcher(settings, [root], queue).start()
    try:
        wait_until(lambda: "docs/seed.md" in indexed_paths(settings), timeout=60)
        (root / "new.md").write_text("# New\n\nA note about heliotrope gardens.\n")
        wait_until(lambda: "docs/new.md" in indexed_paths(settings), timeout=60)
    finally:
        watcher.stop()
        queue.close()


def test_only_the_index_own_files_are_ignored(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, db_path=tmp_path / "index.db")
    keep = event_filter([tmp_path], settings)
    ignored = ["index.db", "index.db-wal", "index.db-shm", "queue.db", "queue.db-wal"]
    ignored += ["workers.log", "workers.log.1", "workers.log.3", "index.db.vectors/manifest.json"]
    for name in ignored:
        assert not keep(watchfiles.Change.modified, str(tmp_path / name)), name
    for name in ["notes.md", "docs/index.md", "index.md", "queue.txt"]:
        assert keep(watchfiles.Change.modified, str(tmp_path / name)), name


def test_secret_paths_never_start_a_job(tmp_path: Path) -> None:
    """The deny list applies to watched paths: by name, by directory and by realpath."""
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "install.md").symlink_to("../.ssh/id_rsa")
    secrets = [".ssh/notes.md", ".ssh", "docs/install.md", "docs/id_deploy.md", "docs/.env.md"]
    for allow, expected in ((False, False), (True, True)):
        settings = make_settings(tmp_path, allow_secret_paths=allow, include_globs=("*.md",))
        keep = event_filter([tmp_path], settings)
        for name in secrets:
            assert keep(watchfiles.Change.modified, str(tmp_path / name)) is expected, name
        assert keep(watchfiles.Change.modified, str(tmp_path / "docs" / "guide.md"))
