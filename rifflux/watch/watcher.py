"""Watch roots with watchfiles and keep the index following every edit.

Events are debounced by watchfiles, filtered by the include/exclude globs relative to
the watched root and by the deny list (a secret path, by its name or its realpath,
never starts a job), and handed with their paths to a :class:`JobCoalescer`, which
submits jobs scoped to the paths that changed (a catch-up job at each start covers the
whole roots). The watch loop runs in a
supervised thread: a crash restarts it with capped exponential backoff, and after
``max_consecutive_crashes`` in a row it gives up and says so. Its state is persisted
in the index (``index_metadata.watcher_state``) so ``index_status`` shows it whichever
process runs the watcher.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog
import watchfiles

from rifflux.config import Settings
from rifflux.index.denied import refused_secret
from rifflux.index.scan import matches_any, require_roots, scope_in_roots, to_rel_path
from rifflux.store.connection import open_index, open_index_readonly
from rifflux.store.jobs import JobRecord
from rifflux.store.own_files import IndexFiles
from rifflux.store.reader import IndexReader, get_metadata
from rifflux.store.writer import IndexWriter
from rifflux.watch.coalesce import JobCoalescer, JobQueue

log = structlog.get_logger(__name__)

WATCHER_STATE_KEY = "watcher_state"
# Restart policy after a crash of the watch loop.
RESTART_BASE_SECONDS = 0.5
RESTART_CAP_SECONDS = 30.0
DEFAULT_MAX_CONSECUTIVE_CRASHES = 5
# How often the loop wakes without events to submit owed follow-up jobs (ms).
TICK_MS = 500
# How often an idle loop checks whether its job is stalled (heartbeats, queue depths).
STALL_CHECK_SECONDS = 5.0

WatchFunction = Callable[..., Iterator[set[tuple[watchfiles.Change, str]]]]


class WatchedJobs(JobQueue, Protocol):
    """What the watcher asks of its jobs (a :class:`~rifflux.reindex.Reindexer`): the
    coalescer's submit and reads, why a job is stalled, and a local pool for it."""

    def stall_reason(self, record: JobRecord) -> str | None: ...

    def start_pool(self) -> object: ...


@dataclass(slots=True)
class WatcherState:
    running: bool = False
    roots: list[str] = field(default_factory=list)
    restarts: int = 0
    consecutive_crashes: int = 0
    gave_up: bool = False
    last_error: str | None = None
    last_event_at: float | None = None
    last_event_paths: list[str] = field(default_factory=list)
    last_job_id: str | None = None
    jobs_submitted: int = 0
    pid: int = field(default_factory=os.getpid)
    updated_at: float = 0.0


def read_watcher_state(conn: sqlite3.Connection) -> dict[str, Any]:
    """The last persisted watcher state, or ``{"running": False}`` if none ran."""
    raw = get_metadata(conn, WATCHER_STATE_KEY)
    return json.loads(raw) if raw else {"running": False}


def event_filter(
    roots: Sequence[Path], settings: Settings
) -> Callable[[watchfiles.Change, str], bool]:
    """Keep events for indexable files (and directories, which may hold them); never for
    the index's own files nor for a secret path. A path that is gone is kept when it
    may have been a directory: it has no suffix, or the index holds files under it (a
    folder named "v1.2" moved away leaves one event, for the folder)."""
    resolved = [Path(os.path.abspath(r)) for r in roots]
    own = IndexFiles.for_settings(settings)
    allow = settings.allow_secret_paths

    def keep(_change: watchfiles.Change, raw_path: str) -> bool:
        if own.owns(raw_path):
            return False
        path = Path(raw_path)
        names = (raw_path, os.path.realpath(raw_path))
        if refused_secret(names, is_dir=path.is_dir(), allow=allow) is not None:
            return False
        for root in resolved:
            try:
                rel = path.relative_to(root).as_posix()
            except ValueError:
                continue
            if matches_any(rel, settings.exclude_globs):
                return False
            if matches_any(rel, settings.include_globs):
                return True
            # A directory moved or removed as a whole produces one event for the
            # directory itself, not for the files in it.
            if path.is_dir():
                return True
            if path.exists():
                return False
            return not path.suffix or _stored_under(settings, roots, raw_path)
        return False

    return keep


def _stored_under(settings: Settings, roots: Sequence[Path], raw_path: str) -> bool:
    """True if the index holds a file under the folder ``raw_path`` (gone now)."""
    rebased = scope_in_roots(roots, [raw_path])
    if not rebased:
        return True
    try:
        conn = open_index_readonly(settings.db_path)
    except Exception:
        return True
    try:
        base = settings.base_dir or get_metadata(conn, "base_dir") or os.getcwd()
        return IndexReader(conn).has_files_under(to_rel_path(rebased[0], Path(base)))
    except sqlite3.Error:
        return True
    finally:
        conn.close()


class FileWatcher:
    """A supervised watch loop feeding a job coalescer."""

    def __init__(
        self,
        settings: Settings,
        roots: Sequence[Path | str],
        queue: WatchedJobs,
        *,
        watch_fn: WatchFunction = watchfiles.watch,
        max_consecutive_crashes: int = DEFAULT_MAX_CONSECUTIVE_CRASHES,
    ) -> None:
        self.settings = settings
        self.roots = [Path(os.path.abspath(r)) for r in roots]
        self.queue = queue
        self.coalescer = JobCoalescer(queue, self.roots)
        self._next_stall_check = 0.0
        self._started_pool = False
        self.watch_fn = watch_fn
        self.max_consecutive_crashes = max_consecutive_crashes
        self.state = WatcherState(roots=[str(r) for r in self.roots])
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> FileWatcher:
        """Start the supervised loop in a thread.

        Raises:
          RootNotFoundError: A root does not exist (one line naming each).
        """
        require_roots(self.roots)
        self._stop.clear()
        self._thread = threading.Thread(target=self._supervise, name="rifflux-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.state.running = False
        self._persist()

    def snapshot(self) -> dict[str, Any]:
        return asdict(self.state)

    # -- supervision -----------------------------------------------------------------

    def _supervise(self) -> None:
        while not self._stop.is_set():
            self.state.running = True
            # Each (re)start catches up with edits made while nobody watched.
            self._record_job(self.coalescer.changed())
            self._persist()
            try:
                self._watch()
                return
            except Exception as exc:
                self.state.restarts += 1
                self.state.consecutive_crashes += 1
                self.state.last_error = f"{type(exc).__name__}: {exc}"
                log.error(
                    "watch.crashed", error=self.state.last_error, restarts=self.state.restarts
                )
                if self.state.consecutive_crashes >= self.max_consecutive_crashes:
                    self.state.running = False
                    self.state.gave_up = True
                    self._persist()
                    log.error("watch.gave_up", crashes=self.state.consecutive_crashes)
                    return
                self.state.running = False
                self._persist()
                delay = min(
                    RESTART_CAP_SECONDS,
                    RESTART_BASE_SECONDS * 2 ** (self.state.consecutive_crashes - 1),
                )
                self._stop.wait(delay)
        self.state.running = False
        self._persist()

    def _watch(self) -> None:
        events = self.watch_fn(
            *self.roots,
            watch_filter=event_filter(self.roots, self.settings),
            debounce=self.settings.file_watcher_debounce_ms,
            stop_event=self._stop,
            rust_timeout=TICK_MS,
            yield_on_timeout=True,
            raise_interrupt=False,
        )
        log.info("watch.started", roots=self.state.roots)
        for changes in events:
            if changes:
                self._on_changes(changes)
            else:
                self._record_job(self.coalescer.tick())
                self._check_stall()
            if self._stop.is_set():
                break

    def _check_stall(self) -> None:
        """The watcher waits on its job too: a stalled job starts a local pool once
        (the watcher's process may start one), and after that is reported in the state."""
        now = time.monotonic()
        if now < self._next_stall_check or self.coalescer.active_job is None:
            return
        self._next_stall_check = now + STALL_CHECK_SECONDS
        record = self.queue.job(self.coalescer.active_job)
        if record is None:
            return
        reason = self.queue.stall_reason(record)
        if reason is None:
            return
        if not self._started_pool:
            self._started_pool = True
            log.warning("watch.job_stalled_starting_pool", job_id=record.id, reason=reason)
            self.queue.start_pool()
        elif self.state.last_error != reason:
            log.error("watch.job_stalled", job_id=record.id, reason=reason)
            self.state.last_error = reason
            self._persist()

    def _on_changes(self, changes: Iterable[tuple[watchfiles.Change, str]]) -> None:
        paths = sorted({path for _, path in changes})
        self.state.consecutive_crashes = 0
        self.state.last_event_at = time.time()
        self.state.last_event_paths = paths[:20]
        log.info("watch.changes", count=len(paths), sample=paths[:5])
        self._record_job(self.coalescer.changed(paths))
        self._persist()

    def _record_job(self, job_id: str | None) -> None:
        if job_id is not None:
            self.state.last_job_id = job_id
            self.state.jobs_submitted = self.coalescer.jobs_submitted
            self._persist()

    def _persist(self) -> None:
        self.state.updated_at = time.time()
        payload = json.dumps(self.snapshot())
        try:
            conn = open_index(self.settings.db_path)
        except Exception:
            log.warning("watch.state_not_saved", exc_info=True)
            return
        try:
            IndexWriter(conn).set_metadata(WATCHER_STATE_KEY, payload)
        finally:
            conn.close()
