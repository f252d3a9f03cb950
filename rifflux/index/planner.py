"""The plan step's scan and diff, streamed: memory follows the change, not the corpus.

A plan walks the roots in sorted path order (:func:`~rifflux.index.scan.iter_scan`) and
merges that stream with the files table read in path order, a page at a time
(:func:`~rifflux.store.knowledge.file_states`), as a merge join: each scanned file meets
its stored state, if any, and a stored file the scan passes by is one the scan no longer
lists (pruned when it lies under a scanned root). The batches of changed files are
persisted as they fill. Nothing holds every scanned path, every stored state or every
batch at once (the plan of 100k files held all three, several hundred MB): what a plan
keeps grows only with its work (the paths to prune, the files lacking vectors, the first
``MAX_SKIPPED_KEPT`` skips) and with one directory's listing.

The batches are the ones the whole list would give: the batch size depends on the total
bytes to chunk only while that total is below ``MIN_BATCHES`` batches of the target
(:func:`~rifflux.index.pipeline.batch_bytes_for`), so the changed files are held until
that much is seen or the scan ends, and streamed after.

A scoped job (the watcher's: the paths that changed) scans only those paths
(:func:`~rifflux.index.scan.scan_scope`) and reads only their stored rows
(:func:`~rifflux.store.knowledge.file_states_at`): its plan costs what changed, not the
corpus. It is exact only where no symlink is involved, so it runs only when the last
whole scan of every root of the job met no symlink (recorded per root in
``index_metadata.scan_links``) and the scoped walk meets none either; otherwise the plan
scans the whole roots, as a job without a scope does.

The batches are written in several short transactions before the job row reads
``planned``; nothing is sent until it does, so a plan that dies half-way leaves batches
no one reads, and the next delivery of the plan message deletes them first
(:func:`~rifflux.store.jobs.delete_batches`) and plans again from the start.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from rifflux.config import Settings
from rifflux.index.changes import (
    FileWork,
    StoredFileState,
    batch_by_bytes,
    decide,
)
from rifflux.index.kinds import KNOWLEDGE_VERSION
from rifflux.index.scan import (
    ScannedFile,
    ScanStats,
    SkippedFile,
    SkipSink,
    is_under,
    iter_scan,
    root_prefixes,
    scan_scope,
    to_rel_path,
)
from rifflux.store import jobs
from rifflux.store.connection import transaction
from rifflux.store.knowledge import file_states, file_states_at
from rifflux.store.own_files import IndexFiles
from rifflux.store.reader import IndexReader, get_metadata
from rifflux.store.writer import IndexWriter

# A job is split into at least this many batches when it has enough text...
MIN_BATCHES = 16
# ...but no batch is made smaller than this (one ONNX call's worth of chunks).
MIN_BATCH_BYTES = 16_000
# Bounded list of skipped files kept in a job row for status display.
MAX_SKIPPED_KEPT = 200
# Paths per transaction of persisted batches, and metadata refreshes per transaction.
WRITE_EVERY = 500
# index_metadata key: symlinks the last whole scan of each root met ({root: count}).
SCAN_LINKS_KEY = "scan_links"


def batch_bytes_for(total_bytes: int, target_bytes: int) -> int:
    """Batch size for a job: the target, smaller when needed to keep workers busy.

    A small job split into only a few large batches would leave all but a few worker
    processes idle; at least ``MIN_BATCHES`` batches (of at least ``MIN_BATCH_BYTES``)
    spread it over every worker.
    """
    return max(MIN_BATCH_BYTES, min(target_bytes, total_bytes // MIN_BATCHES))


def batches_of(works: Iterator[FileWork], target_bytes: int) -> Iterator[list[FileWork]]:
    """``batch_by_bytes(works, batch_bytes_for(total, target_bytes))`` without holding
    every work: the batch size grows with the total up to its largest value, so it is
    known once that value is reached (at ``MIN_BATCHES`` targets' worth, or at once for a
    target of ``MIN_BATCH_BYTES`` or less) or the works end."""
    largest = max(MIN_BATCH_BYTES, target_bytes)
    head: list[FileWork] = []
    size = 0
    if batch_bytes_for(size, target_bytes) < largest:
        for work in works:
            head.append(work)
            size += work.size_bytes
            if batch_bytes_for(size, target_bytes) == largest:
                break
    yield from batch_by_bytes(itertools.chain(head, works), batch_bytes_for(size, target_bytes))


@dataclass(slots=True)
class Capped:
    """The first ``keep`` items appended, and how many were."""

    keep: int
    items: list[SkippedFile] = field(default_factory=list)
    count: int = 0

    def append(self, item: SkippedFile, /) -> None:
        self.count += 1
        if len(self.items) < self.keep:
            self.items.append(item)


@dataclass(slots=True)
class PlanFound:
    """What a streamed plan found (its batches are already persisted)."""

    root_prefixes: list[str]
    # The stored paths the scan covered, when it was scoped (None: the whole roots).
    scope: list[str] | None = None
    scan_skipped: Capped = field(default_factory=lambda: Capped(MAX_SKIPPED_KEPT))
    decision_skipped: Capped = field(default_factory=lambda: Capped(MAX_SKIPPED_KEPT))
    files: int = 0
    changed: int = 0
    unchanged: int = 0
    metadata: int = 0
    batches: int = 0
    prune: list[str] = field(default_factory=list)
    unembedded: list[str] = field(default_factory=list)

    @property
    def skipped(self) -> list[dict[str, str]]:
        """The first ``MAX_SKIPPED_KEPT`` skips: the scan's, then the decisions'."""
        both = self.scan_skipped.items + self.decision_skipped.items
        return [{"path": s.rel_path, "reason": s.reason} for s in both[:MAX_SKIPPED_KEPT]]

    @property
    def skipped_count(self) -> int:
        return self.scan_skipped.count + self.decision_skipped.count


def stream_plan(
    conn: sqlite3.Connection,
    cfg: Settings,
    job_id: str,
    roots: Sequence[Path],
    base_dir: Path,
    *,
    force: bool,
    prune_missing: bool,
    scope: Sequence[str] | None = None,
) -> PlanFound:
    """Scan ``roots`` (only the ``scope`` paths under them, where that is exact: see the
    module docstring), diff them with the files table, persist the job's batches of
    changed files (batch 0 on), refresh the metadata of touched but unchanged files, and
    return the rest of the plan. The embed-only batches (``found.unembedded``) and the
    job row are the caller's, in the transaction that marks the job planned.

    Raises RootNotFoundError before anything is written.
    """
    found = PlanFound(root_prefixes(roots, base_dir))
    stats = ScanStats()
    rules = _ScanRules(
        base_dir=base_dir,
        include_globs=cfg.include_globs,
        exclude_globs=cfg.exclude_globs,
        skipped=found.scan_skipped,
        index_files=IndexFiles.for_settings(cfg),
        allow_secret_paths=cfg.allow_secret_paths,
    )
    scoped = _scan_scope(conn, roots, scope, found, rules) if scope else None
    scanned: Iterable[ScannedFile]
    if scoped is not None:
        found.scope = [to_rel_path(path, base_dir) for path in scope or ()]
        scanned = scoped
    else:
        scanned = iter_scan(roots, **rules, stats=stats)
    with transaction(conn):
        jobs.delete_batches(conn, job_id)
    lacking = IndexReader(conn).paths_without_vectors()
    lacking_set = set(lacking)
    rechunked: set[str] = set()
    stored: Iterable[tuple[str, int, int, str, bool]] = (
        file_states(conn, KNOWLEDGE_VERSION)
        if found.scope is None
        else file_states_at(conn, KNOWLEDGE_VERSION, found.scope)
    )
    refresh: list[tuple[int, int, str]] = []
    prune_under = found.root_prefixes if found.scope is None else found.scope

    def gone(path: str) -> None:
        if prune_missing and any(is_under(path, p) for p in prune_under):
            found.prune.append(path)

    def works() -> Iterator[FileWork]:
        for scanned_file, state in merge_join(scanned, stored, gone):
            found.files += 1
            decision = decide(
                scanned_file,
                None if state is None else StoredFileState(state[1], state[2], state[3]),
                force=force or (state is not None and state[4]),
                max_file_bytes=cfg.max_file_bytes,
            )
            if decision.kind == "skip":
                found.decision_skipped.append(SkippedFile(decision.rel_path, decision.reason))
                if state is not None:
                    gone(decision.rel_path)
            elif decision.kind == "unchanged":
                found.unchanged += 1
            elif decision.kind == "metadata":
                found.metadata += 1
                refresh.append((decision.mtime_ns, decision.size_bytes, decision.rel_path))
                if len(refresh) >= WRITE_EVERY:
                    IndexWriter(conn).update_file_stats(refresh)
                    refresh.clear()
            elif (work := decision.work) is not None:
                found.changed += 1
                if work.rel_path in lacking_set:
                    rechunked.add(work.rel_path)
                # Keep only what batching needs; the chunk step reads the text again.
                yield FileWork(work.rel_path, work.mtime_ns, work.size_bytes, work.sha256, "")

    pending: list[list[jobs.BatchFile]] = []
    for batch in batches_of(works(), cfg.batch_target_bytes):
        # What the plan saw of each file: the chunk step reads it and checks it against this.
        pending.append([[w.rel_path, w.mtime_ns, w.size_bytes, w.sha256] for w in batch])
        if sum(map(len, pending)) >= WRITE_EVERY:
            found.batches += _persist(conn, job_id, pending, found.batches)
    found.batches += _persist(conn, job_id, pending, found.batches)
    IndexWriter(conn).update_file_stats(refresh)
    if found.scope is None:
        _record_links(conn, found.root_prefixes, stats.links)
    doomed = set(found.prune)
    found.unembedded = [p for p in lacking if p not in rechunked and p not in doomed]
    return found


class _ScanRules(TypedDict):
    """The arguments a job's scan is judged by, whole (:func:`iter_scan`) or scoped
    (:func:`scan_scope`) alike."""

    base_dir: Path
    include_globs: Sequence[str]
    exclude_globs: Sequence[str]
    skipped: SkipSink
    index_files: IndexFiles
    allow_secret_paths: bool


def _scan_scope(
    conn: sqlite3.Connection,
    roots: Sequence[Path],
    scope: Sequence[str],
    found: PlanFound,
    rules: _ScanRules,
) -> list[ScannedFile] | None:
    """The scoped scan's files, or None where only a scan of the whole roots is exact:
    a root whose last whole scan met a symlink (or that was never scanned whole), or a
    scoped walk that meets one."""
    recorded = _recorded_links(conn)
    if any(recorded.get(prefix, 1) for prefix in found.root_prefixes):
        return None
    return scan_scope(roots, scope, **rules)


def _recorded_links(conn: sqlite3.Connection) -> dict[str, int]:
    raw = get_metadata(conn, SCAN_LINKS_KEY)
    return {str(k): int(v) for k, v in json.loads(raw).items()} if raw else {}


def _record_links(conn: sqlite3.Connection, prefixes: Sequence[str], links: int) -> None:
    """Record, per root, the symlinks its whole scan met (the job's count for each of its
    roots: a root beside one with links is not scoped until scanned whole alone)."""
    recorded = _recorded_links(conn)
    updated = {**recorded, **{prefix: links for prefix in prefixes}}
    if updated != recorded:
        IndexWriter(conn).set_metadata(SCAN_LINKS_KEY, json.dumps(updated, sort_keys=True))


def _persist(
    conn: sqlite3.Connection, job_id: str, pending: list[list[jobs.BatchFile]], first: int
) -> int:
    """Write ``pending`` as the job's batches ``first``...; returns how many (and empties it)."""
    count = len(pending)
    if count:
        with transaction(conn):
            jobs.add_batches(conn, job_id, pending, first=first)
        pending.clear()
    return count


def merge_join(
    scanned: Iterable[ScannedFile],
    stored: Iterable[tuple[str, int, int, str, bool]],
    gone: Callable[[str], None],
) -> Iterator[tuple[ScannedFile, tuple[str, int, int, str, bool] | None]]:
    """Each scanned file with its stored row (None: not stored); ``gone`` gets every
    stored path that is not scanned. Both inputs sorted by path."""
    rows = iter(stored)
    row = next(rows, None)
    for scanned_file in scanned:
        path = scanned_file.rel_path
        while row is not None and row[0] < path:
            gone(row[0])
            row = next(rows, None)
        if row is not None and row[0] == path:
            yield scanned_file, row
            row = next(rows, None)
        else:
            yield scanned_file, None
    while row is not None:
        gone(row[0])
        row = next(rows, None)
