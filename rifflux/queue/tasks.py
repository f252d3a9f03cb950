"""The steps of a reindex job as plain functions; ``workers/actors.py`` runs them on Dramatiq.

plan (index host)  → scans, diffs, refreshes metadata, sends embed batches with the
                     file texts and the embed hashes that already have vectors.
embed (anywhere)   → chunks and batch-embeds only new texts; never opens the index.
write (index host) → applies one batch in one transaction, idempotently, with job counts.
finalize (index host) → prunes vanished files, settles the job state.

A job describes itself (globs, bounds, chunk sizes captured at submission), so workers
with another environment still index exactly what the front process asked for.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Callable, Sequence
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
    FileWork,
    Tally,
    batch_by_bytes,
    decode_text,
    paths_to_prune,
    sort_decisions,
)
from rifflux.index.indexer import (
    check_embedding_model,
    decide_all,
    resolve_base_dir,
    scan_for,
    stored_paths,
)
from rifflux.index.prepare import PreparedBatch, prepare_batch
from rifflux.queue import jobs
from rifflux.store.connection import open_index, retry_on_busy, write_transaction
from rifflux.store.writer import (
    apply_batch,
    apply_metadata_updates,
    delete_file_rows,
    known_vector_hashes,
)
from rifflux.vectors.publish import publish_quietly

log = structlog.get_logger(__name__)

# Bounded lists kept in a job's options for status display.
MAX_SKIPPED_KEPT = 200
# A job is split into at least this many batches when it has enough text...
MIN_BATCHES = 16
# ...but no batch is made smaller than this (one ONNX call's worth of chunks).
MIN_BATCH_BYTES = 16_000

SendBatch = Callable[[int, dict[str, Any]], None]


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


@dataclass(slots=True)
class PlanOutcome:
    batches: int
    ready_to_finalize: bool


def _in_tx(conn: sqlite3.Connection, body: Callable[[], Any]) -> Any:
    def run() -> Any:
        with write_transaction(conn):
            return body()

    return retry_on_busy(run)


def plan(settings: Settings, db_path: str, job_id: str, send_batch: SendBatch) -> PlanOutcome:
    """Plan the job once (persisted), then send every batch that is still pending.

    A redelivered plan message (its worker died) finds the persisted plan and re-sends
    only pending batches; the write step ignores a batch it already settled.
    """
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
        pending = jobs.pending_batches(conn, job_id)
        for batch_no, paths in pending:
            works, vanished = read_works(base_dir, paths, cfg.max_file_bytes, bounds)
            known = known_vector_hashes(conn, paths, label)
            payload = embed_payload(works, known, cfg, label)
            payload["vanished"] = vanished
            send_batch(batch_no, payload)
        return PlanOutcome(len(pending), not pending)
    finally:
        conn.close()


def _make_plan(conn: sqlite3.Connection, cfg: Settings, job: jobs.JobRecord, label: str) -> bool:
    """Scan, diff and persist the job's batches; False if the job failed instead."""
    job_id, options = job.id, job.options
    _in_tx(conn, lambda: jobs.update_job(conn, job_id, state="running", started_at=time.time()))
    try:
        check_embedding_model(conn, label, force=options["force"])
        scan = scan_for(conn, cfg, [Path(r) for r in job.roots])
    except RiffluxError as exc:
        _fail_job(conn, job_id, str(exc))
        return False
    tally = Tally()
    # Keep only what batching needs; the text is read again when sent.
    changed = [
        FileWork(w.rel_path, w.mtime_ns, w.size_bytes, w.sha256, "")
        for w in sort_decisions(decide_all(conn, scan, cfg, force=options["force"]), tally)
    ]
    skipped = [{"path": s.rel_path, "reason": s.reason} for s in scan.skipped]
    skipped += [{"path": d.rel_path, "reason": d.reason} for d in tally.skipped]
    target = batch_bytes_for(sum(w.size_bytes for w in changed), cfg.batch_target_bytes)
    batches = [[w.rel_path for w in b] for b in batch_by_bytes(changed, target)]
    apply_metadata_updates(conn, tally.metadata)
    prune = (
        paths_to_prune(stored_paths(conn), tally.kept, scan.root_prefixes)
        if options["prune_missing"]
        else []
    )

    def persist() -> None:
        current = jobs.get_job(conn, job_id)
        if current is None or current.planned:
            return  # another delivery of this plan message got here first
        opts = dict(current.options)
        opts.update(planned=True, prune_paths=prune, skipped=skipped[:MAX_SKIPPED_KEPT])
        jobs.add_batches(conn, job_id, batches)
        jobs.update_job(
            conn,
            job_id,
            options=opts,
            files_total=len(scan.files),
            batches_total=len(batches),
            files_skipped=len(skipped) + tally.unchanged + len(tally.metadata),
        )

    _in_tx(conn, persist)
    log.info(
        "job.planned",
        job_id=job_id,
        files=len(scan.files),
        batches=len(batches),
        changed=len(changed),
        unchanged=tally.unchanged,
        metadata_only=len(tally.metadata),
        skipped=len(skipped),
        prune=len(prune),
    )
    return True


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


def embed_payload(
    batch: Sequence[FileWork], known: set[str], cfg: Settings, label: str
) -> dict[str, Any]:
    return {
        "files": [
            {
                "rel_path": w.rel_path,
                "mtime_ns": w.mtime_ns,
                "size_bytes": w.size_bytes,
                "sha256": w.sha256,
                "text": w.text,
            }
            for w in batch
        ],
        "known": sorted(known),
        "model": label,
        "max_chunk_chars": cfg.max_chunk_chars,
        "min_chunk_chars": cfg.min_chunk_chars,
    }


def embed(payload: dict[str, Any], embedder: Embedder) -> dict[str, Any]:
    """Chunk the batch's files and embed new texts; returns the write payload."""
    if embedder.label != payload["model"]:
        raise EmbeddingModelMismatch(
            f"this worker embeds with {embedder.label!r} but the job expects "
            f"{payload['model']!r}; start workers with the same RIFFLUX_EMBEDDING_BACKEND"
        )
    works = [
        FileWork(f["rel_path"], f["mtime_ns"], f["size_bytes"], f["sha256"], f["text"])
        for f in payload["files"]
    ]
    prepared = prepare_batch(
        works,
        embedder=embedder,
        max_chars=payload["max_chunk_chars"],
        min_chars=payload["min_chunk_chars"],
        known_hashes=payload["known"],
    )
    return {**prepared.to_payload(), "vanished": payload.get("vanished", [])}


def write(
    db_path: str, job_id: str, batch_no: int, payload: dict[str, Any], retries: int = 0
) -> bool:
    """Apply one prepared batch; True when this was the job's last outstanding batch."""
    batch = PreparedBatch.from_payload(payload)
    conn = open_index(db_path)
    try:
        job = jobs.get_job(conn, job_id)
        if job is None or job.state == "cancelled" or jobs.batch_settled(conn, job_id, batch_no):
            return False
        vanished: list[str] = list(payload.get("vanished", []))
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
            stats = apply_batch(conn, batch, also=bookkeeping, on_retry=count_busy_retry)
        except _AlreadyWritten:
            return False
        if stats.stale_paths:
            _in_tx(
                conn,
                lambda: jobs.add_errors(
                    conn,
                    job_id,
                    [
                        {"path": p, "error": "vectors missing; re-run to embed"}
                        for p in stats.stale_paths
                    ],
                ),
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


def fail_batch(db_path: str, job_id: str, batch_no: int, paths: Sequence[str], error: str) -> bool:
    """Record a batch that exhausted its retries; True when the job can finalize."""
    conn = open_index(db_path)
    try:

        def body() -> bool:
            if not jobs.mark_batch(conn, job_id, batch_no, "failed"):
                return False
            jobs.add_counts(conn, job_id, files_failed=len(paths), batches_done=1)
            jobs.add_errors(conn, job_id, [{"path": p, "error": error} for p in paths])
            return _ready(conn, job_id)

        ready = _in_tx(conn, body)
        log.error("job.batch_failed", job_id=job_id, batch=batch_no, paths=list(paths), error=error)
        return ready
    finally:
        conn.close()


def finalize(db_path: str, job_id: str) -> jobs.JobRecord | None:
    """Prune vanished files and settle the job: completed, or failed if a batch failed."""
    conn = open_index(db_path)
    try:
        job = jobs.get_job(conn, job_id)
        if job is None or job.finished:
            return job
        prune = list(job.options.get("prune_paths", []))

        def settle() -> None:
            current = jobs.get_job(conn, job_id)
            if current is None or current.finished:
                return
            deleted = delete_file_rows(conn, prune)
            state = "failed" if current.files_failed else "completed"
            jobs.update_job(conn, job_id, state=state, finished_at=time.time())
            jobs.add_counts(conn, job_id, files_deleted=deleted)

        # Vector cache: publish before the job reads as completed, again after the prune.
        publish_quietly(db_path, source="finalize")
        _in_tx(conn, settle)
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
    def body() -> None:
        jobs.add_errors(conn, job_id, [{"path": "", "error": error}])
        jobs.update_job(conn, job_id, state="failed", finished_at=time.time())

    _in_tx(conn, body)
    log.error("job.failed", job_id=job_id, error=error)


def fail_plan(db_path: str, job_id: str, error: str) -> None:
    """Record a plan step that exhausted its retries: the job fails with the error."""
    conn = open_index(db_path)
    try:
        job = jobs.get_job(conn, job_id)
        if job is not None and not job.finished:
            _fail_job(conn, job_id, error)
    finally:
        conn.close()
