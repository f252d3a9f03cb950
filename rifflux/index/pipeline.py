"""The indexing pipeline: plan, embed, write, finalize, as plain functions.

plan (index host)     → scans, diffs, refreshes metadata, sends embed batches with the
                        file texts and the embed hashes that already have vectors.
embed (anywhere)      → chunks and batch-embeds only new texts; never opens the index.
write (index host)    → applies one batch in one transaction, idempotently, with job counts.
finalize (index host) → prunes vanished files, settles the job state, publishes vectors.

Two drivers call these functions: the in-process :class:`~rifflux.index.indexer.Indexer`
runs the stages of one run back to back (:func:`survey`, ``prepare_batch``,
``IndexWriter.apply_batch``, :func:`refresh_unchanged`, :func:`doomed_paths`), and the
Dramatiq actors (``workers/actors.py``) run the job steps below, one message each. The
steps take and return the typed messages of :mod:`rifflux.index.messages`; sending is the
caller's (``SendBatch``), so nothing here imports Dramatiq or ``rifflux.queue``.

A job describes itself (globs, bounds, chunk sizes captured at submission in its
``options``), so workers with another environment still index exactly what the front
process asked for. Every step is idempotent: a redelivered message changes nothing twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from rifflux.config import Settings
from rifflux.embed.base import Embedder
from rifflux.embed.factory import embedder_label_for
from rifflux.errors import EmbeddingModelMismatch, RiffluxError
from rifflux.index.allowed import is_within, real
from rifflux.index.changes import (
    Decision,
    FileWork,
    Tally,
    batch_by_bytes,
    decide,
    decode_text,
    load_states,
    paths_to_prune,
    sort_decisions,
)
from rifflux.index.messages import (
    BatchFailure,
    EmbedRequest,
    JobStep,
    WriteRequest,
)
from rifflux.index.prepare import prepare_batch
from rifflux.index.scan import ScanResult, scan_roots
from rifflux.store import jobs
from rifflux.store.connection import open_index, transaction
from rifflux.store.own_files import IndexFiles
from rifflux.store.reader import IndexReader
from rifflux.store.writer import IndexWriter
from rifflux.vectors.publish import publish_quietly

log = structlog.get_logger(__name__)

# Bounded list of skipped files kept in a job row for status display.
MAX_SKIPPED_KEPT = 200
# A job is split into at least this many batches when it has enough text...
MIN_BATCHES = 16
# ...but no batch is made smaller than this (one ONNX call's worth of chunks).
MIN_BATCH_BYTES = 16_000

SendBatch = Callable[[EmbedRequest], None]


# -- settings a job carries ----------------------------------------------------------


def job_options(
    settings: Settings,
    *,
    force: bool,
    prune_missing: bool,
    allowed_roots: Sequence[Path] = (),
) -> dict[str, Any]:
    """Everything a worker needs to reproduce the front process's indexing settings.

    ``allowed_roots`` (absolute) bound where the plan step follows symlinks, beside the
    job's own roots: the MCP server passes its allowed roots.
    """
    return {
        "force": force,
        "prune_missing": prune_missing,
        "include_globs": list(settings.include_globs),
        "exclude_globs": list(settings.exclude_globs),
        "max_file_bytes": settings.max_file_bytes,
        "max_chunk_chars": settings.max_chunk_chars,
        "min_chunk_chars": settings.min_chunk_chars,
        "batch_target_bytes": settings.batch_target_bytes,
        "base_dir": str(settings.base_dir) if settings.base_dir else None,
        "allowed_roots": [str(p) for p in allowed_roots],
    }


def job_settings(settings: Settings, db_path: str, options: dict[str, Any]) -> Settings:
    return settings.with_overrides(
        db_path=Path(db_path),
        include_globs=tuple(options["include_globs"]),
        exclude_globs=tuple(options["exclude_globs"]),
        max_file_bytes=options["max_file_bytes"],
        max_chunk_chars=options["max_chunk_chars"],
        min_chunk_chars=options["min_chunk_chars"],
        batch_target_bytes=options["batch_target_bytes"],
        base_dir=Path(options["base_dir"]) if options.get("base_dir") else None,
        allowed_roots=tuple(options.get("allowed_roots", ())),
    )


# -- stages shared by the in-process indexer and the job steps -------------------------


def resolve_base_dir(conn: sqlite3.Connection, settings: Settings) -> Path:
    """The directory stored paths are relative to; recorded in the index on first use."""
    writer = IndexWriter(conn)
    stored = writer.metadata("base_dir")
    if settings.base_dir is not None:
        base = Path(os.path.abspath(settings.base_dir))
    elif stored:
        base = Path(stored)
    else:
        base = Path(os.getcwd())
    if stored != base.as_posix():
        writer.set_metadata("base_dir", base.as_posix())
    return base


def check_embedding_model(conn: sqlite3.Connection, label: str, *, force: bool) -> None:
    """Refuse to mix vectors of two models in one index unless re-embedding everything."""
    stored = IndexReader(conn).metadata("embedding_model")
    if stored and stored != label and not force:
        raise EmbeddingModelMismatch(
            f"the index was embedded with {stored!r} but the configured embedder is "
            f"{label!r}; reindex with `rifflux index --force PATH...` to re-embed it"
        )


def scan_for(conn: sqlite3.Connection, settings: Settings, roots: Sequence[Path]) -> ScanResult:
    """Scan ``roots``; symlinks are followed only into them or ``settings.allowed_roots``."""
    base = resolve_base_dir(conn, settings)
    return scan_roots(
        roots,
        base_dir=base,
        include_globs=settings.include_globs,
        exclude_globs=settings.exclude_globs,
        index_files=IndexFiles.for_settings(settings),
        link_roots=[Path(p) for p in settings.allowed_roots],
    )


def decide_all(
    conn: sqlite3.Connection, scan: ScanResult, settings: Settings, *, force: bool
) -> Iterator[Decision]:
    """Decisions for every scanned file, lazily (a changed file's text is read here)."""
    states = load_states(IndexReader(conn).file_states())
    for scanned in scan.files:
        yield decide(
            scanned,
            states.get(scanned.rel_path),
            force=force,
            max_file_bytes=settings.max_file_bytes,
        )


@dataclass(slots=True)
class Survey:
    """What a scan found: the files to (re-)chunk (lazily, sorted) and every other verdict.

    ``tally`` fills while ``works`` is consumed.
    """

    scan: ScanResult
    works: Iterator[FileWork]
    tally: Tally


def survey(
    conn: sqlite3.Connection,
    settings: Settings,
    roots: Sequence[Path],
    *,
    label: str,
    force: bool,
) -> Survey:
    """Check the index's model, scan ``roots`` and diff them with the stored files.

    Raises EmbeddingModelMismatch (and the scan's RiffluxErrors) before anything is read.
    """
    check_embedding_model(conn, label, force=force)
    scan = scan_for(conn, settings, roots)
    tally = Tally()
    works = sort_decisions(decide_all(conn, scan, settings, force=force), tally)
    return Survey(scan, works, tally)


def refresh_unchanged(conn: sqlite3.Connection, tally: Tally) -> int:
    """Store the new mtime/size of files whose content hash did not change."""
    updates = [(d.mtime_ns, d.size_bytes, d.rel_path) for d in tally.metadata]
    return IndexWriter(conn).update_file_stats(updates)


def doomed_paths(conn: sqlite3.Connection, found: Survey) -> list[str]:
    """Stored files under the scanned roots that the scan no longer keeps."""
    return paths_to_prune(
        IndexReader(conn).stored_paths(), found.tally.kept, found.scan.root_prefixes
    )


def batch_bytes_for(total_bytes: int, target_bytes: int) -> int:
    """Batch size for a job: the target, smaller when needed to keep workers busy.

    A small job split into only a few large batches would leave all but a few worker
    processes idle; at least ``MIN_BATCHES`` batches (of at least ``MIN_BATCH_BYTES``)
    spread it over every worker.
    """
    return max(MIN_BATCH_BYTES, min(target_bytes, total_bytes // MIN_BATCHES))


def read_works(
    base_dir: Path,
    rel_paths: Sequence[str],
    max_file_bytes: int,
    bounds: Sequence[Path] | None = None,
) -> tuple[list[FileWork], list[str]]:
    """Read the planned files now; files that vanished or turned unindexable are listed.

    With ``bounds`` (realpaths), a file whose realpath now lies outside them (it was
    swapped for a symlink after the scan, e.g. before a redelivered plan) counts as
    vanished and is not read.
    """
    works: list[FileWork] = []
    vanished: list[str] = []
    for rel_path in rel_paths:
        path = Path(rel_path) if rel_path.startswith("/") else base_dir / rel_path
        if bounds is not None and not is_within(path, bounds):
            vanished.append(rel_path)
            continue
        try:
            st = path.stat()
            data = path.read_bytes()
        except OSError:
            vanished.append(rel_path)
            continue
        text = decode_text(data) if len(data) <= max_file_bytes else None
        if text is None:
            vanished.append(rel_path)
            continue
        sha256 = hashlib.sha256(data).hexdigest()
        works.append(FileWork(rel_path, st.st_mtime_ns, len(data), sha256, text))
    return works, vanished


# -- the job steps ---------------------------------------------------------------------


@dataclass(slots=True)
class PlanOutcome:
    batches: int
    ready_to_finalize: bool


def plan(settings: Settings, request: JobStep, send_batch: SendBatch) -> PlanOutcome:
    """Plan the job once (persisted), then send every batch that is still pending.

    A redelivered plan message (its worker died) finds the persisted plan and re-sends
    only pending batches; the write step ignores a batch it already settled.
    """
    db_path, job_id = request.db_path, request.job_id
    conn = open_index(db_path)
    try:
        job = jobs.get_job(conn, job_id)
        if job is None or job.finished:
            return PlanOutcome(0, False)
        cfg = job_settings(settings, db_path, job.options)
        label = embedder_label_for(cfg)
        if not job.planned and not _make_plan(conn, cfg, job, label):
            return PlanOutcome(0, False)
        base_dir = resolve_base_dir(conn, cfg)
        # A file swapped for a symlink out of bounds since the scan is not read.
        bounds = [real(p) for p in (*job.roots, *cfg.allowed_roots)]
        reader = IndexReader(conn)
        pending = jobs.pending_batches(conn, job_id)
        for batch_no, paths in pending:
            works, vanished = read_works(base_dir, paths, cfg.max_file_bytes, bounds)
            send_batch(
                EmbedRequest(
                    db_path=db_path,
                    job_id=job_id,
                    batch_no=batch_no,
                    files=tuple(works),
                    known=tuple(sorted(reader.known_vector_hashes(paths, label))),
                    model=label,
                    max_chunk_chars=cfg.max_chunk_chars,
                    min_chunk_chars=cfg.min_chunk_chars,
                    vanished=tuple(vanished),
                )
            )
        return PlanOutcome(len(pending), not pending)
    finally:
        conn.close()


def _make_plan(conn: sqlite3.Connection, cfg: Settings, job: jobs.JobRecord, label: str) -> bool:
    """Scan, diff and persist the job's batches; False if the job failed instead."""
    job_id, options = job.id, job.options
    with transaction(conn):
        jobs.update_job(conn, job_id, state="running", started_at=time.time())
    try:
        found = survey(conn, cfg, [Path(r) for r in job.roots], label=label, force=options["force"])
    except RiffluxError as exc:
        _fail_job(conn, job_id, str(exc))
        return False
    tally = found.tally
    # Keep only what batching needs; the text is read again when sent.
    changed = [FileWork(w.rel_path, w.mtime_ns, w.size_bytes, w.sha256, "") for w in found.works]
    skipped = [{"path": s.rel_path, "reason": s.reason} for s in found.scan.skipped]
    skipped += [{"path": d.rel_path, "reason": d.reason} for d in tally.skipped]
    target = batch_bytes_for(sum(w.size_bytes for w in changed), cfg.batch_target_bytes)
    batches = [[w.rel_path for w in b] for b in batch_by_bytes(changed, target)]
    refresh_unchanged(conn, tally)
    prune = doomed_paths(conn, found) if options["prune_missing"] else []

    with transaction(conn):
        current = jobs.get_job(conn, job_id)
        if current is not None and not current.planned:
            # (Otherwise another delivery of this plan message got here first.)
            jobs.add_batches(conn, job_id, batches)
            jobs.update_job(
                conn,
                job_id,
                planned=True,
                prune_paths=prune,
                skipped=skipped[:MAX_SKIPPED_KEPT],
                files_total=len(found.scan.files),
                batches_total=len(batches),
                files_skipped=len(skipped) + tally.unchanged + len(tally.metadata),
            )
    log.info(
        "job.planned",
        job_id=job_id,
        files=len(found.scan.files),
        batches=len(batches),
        changed=len(changed),
        unchanged=tally.unchanged,
        metadata_only=len(tally.metadata),
        skipped=len(skipped),
        prune=len(prune),
    )
    return True


def embed(request: EmbedRequest, embedder: Embedder) -> WriteRequest:
    """Chunk the batch's files and embed new texts; returns the write step's message."""
    if embedder.label != request.model:
        raise EmbeddingModelMismatch(
            f"this worker embeds with {embedder.label!r} but the job expects "
            f"{request.model!r}; start workers with the same RIFFLUX_EMBEDDING_BACKEND"
        )
    prepared = prepare_batch(
        request.files,
        embedder=embedder,
        max_chars=request.max_chunk_chars,
        min_chars=request.min_chunk_chars,
        known_hashes=request.known,
    )
    return WriteRequest(
        db_path=request.db_path,
        job_id=request.job_id,
        batch_no=request.batch_no,
        batch=prepared,
        vanished=request.vanished,
    )


def with_retries(request: WriteRequest, retries: int) -> WriteRequest:
    return dataclasses.replace(request, retries=retries)


def write(request: WriteRequest) -> bool:
    """Apply one prepared batch; True when this was the job's last outstanding batch."""
    job_id, batch_no, batch = request.job_id, request.batch_no, request.batch
    conn = open_index(request.db_path)
    try:
        job = jobs.get_job(conn, job_id)
        if job is None or job.state == "cancelled" or jobs.batch_settled(conn, job_id, batch_no):
            return False
        vanished = list(request.vanished)
        retries = request.retries
        outcome: dict[str, bool] = {}

        def bookkeeping(tx: sqlite3.Connection) -> None:
            # Inside the write transaction: a redelivered batch that raced us changes nothing.
            if not jobs.mark_batch(tx, job_id, batch_no, "written"):
                raise _AlreadyWritten
            jobs.add_counts(
                tx,
                job_id,
                files_done=len(batch.files),
                files_skipped=len(vanished),
                chunks_embedded=len(batch.vectors),
                batches_done=1,
                retries=retries,
            )
            jobs.add_errors(
                tx, job_id, [{"path": p, "error": "vanished before indexing"} for p in vanished]
            )
            outcome["ready"] = _ready(tx, job_id)

        def count_busy_retry(_attempt: int, _exc: BaseException) -> None:
            nonlocal retries
            retries += 1

        try:
            stats = IndexWriter(conn).apply_batch(
                batch, also=bookkeeping, on_retry=count_busy_retry
            )
        except _AlreadyWritten:
            return False
        if stats.stale_paths:
            with transaction(conn):
                jobs.add_errors(
                    conn,
                    job_id,
                    [
                        {"path": p, "error": "vectors missing; re-run to embed"}
                        for p in stats.stale_paths
                    ],
                )
        log.info(
            "job.batch_written",
            job_id=job_id,
            batch=batch_no,
            files=stats.files_written,
            chunks=stats.chunks_written,
            vectors_new=stats.vectors_new,
            vectors_reused=stats.vectors_reused,
        )
        return outcome.get("ready", False)
    finally:
        conn.close()


class _AlreadyWritten(Exception):
    """Raised inside a write transaction to roll back a duplicate batch."""


def _ready(conn: sqlite3.Connection, job_id: str) -> bool:
    """True when the plan is persisted and no batch is pending any more."""
    job = jobs.get_job(conn, job_id)
    return job is not None and job.planned and not jobs.pending_batches(conn, job_id)


def fail_batch(failure: BatchFailure) -> bool:
    """Record a batch that cannot be written; True when the job can finalize."""
    job_id, batch_no, paths = failure.job_id, failure.batch_no, failure.paths
    conn = open_index(failure.db_path)
    try:
        with transaction(conn):
            if jobs.mark_batch(conn, job_id, batch_no, "failed"):
                jobs.add_counts(conn, job_id, files_failed=len(paths), batches_done=1)
                jobs.add_errors(conn, job_id, [{"path": p, "error": failure.error} for p in paths])
                ready = _ready(conn, job_id)
            else:
                ready = False
        log.error(
            "job.batch_failed",
            job_id=job_id,
            batch=batch_no,
            paths=list(paths),
            error=failure.error,
        )
        return ready
    finally:
        conn.close()


def finalize(request: JobStep) -> jobs.JobRecord | None:
    """Prune vanished files and settle the job: completed, or failed if a batch failed."""
    db_path, job_id = request.db_path, request.job_id
    conn = open_index(db_path)
    try:
        job = jobs.get_job(conn, job_id)
        if job is None or job.finished:
            return job
        prune = list(job.prune_paths)
        # Vector cache: publish before the job reads as completed, again after the prune.
        publish_quietly(db_path, source="finalize")
        with transaction(conn):
            current = jobs.get_job(conn, job_id)
            if current is not None and not current.finished:
                deleted = IndexWriter(conn).delete_files(prune)
                state = "failed" if current.files_failed else "completed"
                jobs.update_job(conn, job_id, state=state, finished_at=time.time())
                jobs.add_counts(conn, job_id, files_deleted=deleted)
        publish_quietly(db_path, source="finalize")
        record = jobs.get_job(conn, job_id)
        if record is not None:
            log.info(
                "job.finished",
                job_id=job_id,
                state=record.state,
                files_done=record.files_done,
                files_failed=record.files_failed,
                files_deleted=record.files_deleted,
                chunks_embedded=record.chunks_embedded,
                duration_s=round((record.finished_at or 0) - (record.started_at or 0), 3),
            )
        return record
    finally:
        conn.close()


def _fail_job(conn: sqlite3.Connection, job_id: str, error: str) -> None:
    with transaction(conn):
        jobs.add_errors(conn, job_id, [{"path": "", "error": error}])
        jobs.update_job(conn, job_id, state="failed", finished_at=time.time())
    log.error("job.failed", job_id=job_id, error=error)


def fail_plan(request: JobStep, error: str) -> None:
    """Record a plan step that cannot succeed: the job fails with the error."""
    conn = open_index(request.db_path)
    try:
        job = jobs.get_job(conn, request.job_id)
        if job is not None and not job.finished:
            _fail_job(conn, request.job_id, error)
    finally:
        conn.close()
