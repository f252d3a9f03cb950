"""Dramatiq actors for reindex jobs: thin wrappers over ``rifflux.index.pipeline``.

Start workers with ``rifflux worker`` or ``dramatiq workers.actors --processes N``.
Each worker process loads its embedder once: at boot when it consumes the embed queue
(``workers/child.py`` calls :func:`process_embedder` in a thread beside its consumers),
else on the first embed batch it runs.

Every actor takes one encoded message (``rifflux.index.messages``), never positional
fields. Errors that no retry can fix (``PERMANENT_ERRORS``) are declared ``throws``, so
Dramatiq fails the message at once instead of retrying it; an embed that fails so
records its batch as failed (``batch_failure``), as an exhausted retry does.

A write that no retry fixes (:mod:`rifflux.store.faults`: disk full, file size limit,
read-only, I/O error, a lost WAL), met by any step, fails the whole job at once
(:func:`failing_job_on_write_fault`): the job row is marked ``failed`` with the
one-line reason (retried :data:`FAULT_RECORD_ATTEMPTS` times; the disk may be full for
that write too), one ``job.write_failed`` line goes to stderr and the fault goes into
this process's heartbeat, and the message raises :class:`IndexWriteError`, a
permanent error, instead of being retried. The waiting client learns of it by
whichever of these arrives (``rifflux.reindex.runner``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dramatiq
import structlog
from dramatiq.middleware import CurrentMessage

from rifflux.embed.base import Embedder
from rifflux.embed.factory import embedder_label_for, make_embedder
from rifflux.errors import (
    DiskFullError,
    IndexDamagedError,
    IndexFolderNotWritableError,
    IndexWriteError,
    permanent_errors,
)
from rifflux.index import pipeline
from rifflux.index.messages import (
    BatchFailure,
    ChunkRequest,
    EmbedRequest,
    JobStep,
    VectorsRequest,
    decode_batch_step,
    finalize_request,
)
from rifflux.queue import names
from rifflux.queue.presence import PresenceStore, presence_store_for, report_write_fault
from rifflux.store import faults
from workers import setup
from workers.cpu_slots import chunk_slot

log = structlog.get_logger(__name__)

# This worker process's own settings (broker, embedder threads): set up before the actors
# below declare on the broker. A job's settings come from its JobSpec (``pipeline``).
settings = setup.configure()

# Dramatiq time limits and retry policy, in milliseconds.
EMBED_TIME_LIMIT_MS = 30 * 60_000
WRITE_TIME_LIMIT_MS = 10 * 60_000
PLAN_TIME_LIMIT_MS = 60 * 60_000
# The finalize publishes the vector cache, and a publish builds the HNSW graphs of large
# segments (~1 ms of CPU a row: minutes for each 262,144-row base segment). Dramatiq's
# default of 10 minutes failed a 100k-file job under load with TimeLimitExceeded, every
# retry starting the publish over.
FINALIZE_TIME_LIMIT_MS = 60 * 60_000
MIN_BACKOFF_MS = 500
MAX_BACKOFF_MS = 30_000

# Errors a retry cannot fix (``retryable`` false in rifflux.errors): another model than
# the job's, a message of another Rifflux version, an index of another schema version or
# no index at all, a write fault. Left out: the store's one-line translations of an
# SQLite failure (a full disk, a folder SQLite cannot write, a damaged file), whose cause
# failing_job_on_write_fault reads to fail the job as a write fault, or else Dramatiq
# retries them and the exhausted retry records the failure.
CLASSIFIED_BY_CAUSE = (DiskFullError, IndexFolderNotWritableError, IndexDamagedError)
PERMANENT_ERRORS = tuple(e for e in permanent_errors() if e not in CLASSIFIED_BY_CAUSE)
# Attempts at marking a job failed by a write fault, with a growing pause between them.
FAULT_RECORD_ATTEMPTS = 3
FAULT_RECORD_PAUSE_SECONDS = 0.2
# How long a chunk step's count of live embedding workers is reused.
EMBED_WORKERS_SECONDS = 2.0

_embedder: Embedder | None = None
_embedder_lock = threading.Lock()


def process_embedder() -> Embedder:
    """This process's embedder (the ONNX session is built once and reused)."""
    global _embedder
    if _embedder is None:
        with _embedder_lock:
            if _embedder is None:
                _embedder = make_embedder(settings)
    return _embedder


@functools.cache
def inline_embedder() -> Embedder | None:
    """This process's embedder when it is cheap enough to run inside a chunk step's
    write (the hash one: ~0.1 ms a text), else None: ONNX embeds in its own step, and
    the process that writes rows never loads its model."""
    return process_embedder() if embedder_label_for(settings).startswith("hash:") else None


_embed_workers: tuple[float, int] = (0.0, 1)


@functools.cache
def _presence_store() -> PresenceStore:
    return presence_store_for(dramatiq.get_broker(), settings)


def embed_workers() -> int:
    """Live worker processes consuming the embed queue (presence heartbeats, read at most
    every ``EMBED_WORKERS_SECONDS``), at least 1: what a chunk step sizes its embed units
    for (:func:`rifflux.index.units.units_for`)."""
    global _embed_workers
    read_at, count = _embed_workers
    if time.monotonic() - read_at < EMBED_WORKERS_SECONDS:
        return count
    try:
        live = _presence_store().live_workers()
        count = max(1, sum(1 for w in live if names.EMBED_QUEUE in (w.get("queues") or ())))
    except Exception as exc:  # A sizing hint: one unit a batch is always correct.
        log.warning("worker.presence_unread", error=_line(exc))
        count = 1
    _embed_workers = (time.monotonic(), count)
    return count


def last_error(message_data: dict[str, Any], retry_data: dict[str, Any]) -> str:
    """The exception line of the last attempt's traceback, with the attempt count."""
    lines = str(message_data.get("options", {}).get("traceback", "")).strip().splitlines()
    last = lines[-1] if lines else "unknown error"
    return f"{last} (after {retry_data.get('retries', '?')} retries)"


def _line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _record_fault(db_path: str, job_id: str, reason: str) -> bool:
    """Mark the job failed with ``reason``; False if even that write failed every time."""
    for attempt in range(1, FAULT_RECORD_ATTEMPTS + 1):
        try:
            return pipeline.record_write_fault(db_path, job_id, reason)
        except Exception as exc:  # The fault is reported on stderr anyway.
            if attempt == FAULT_RECORD_ATTEMPTS:
                log.warning("job.fault_not_recorded", job_id=job_id, error=_line(exc))
                return False
            time.sleep(FAULT_RECORD_PAUSE_SECONDS * attempt)
    return False


@contextmanager
def failing_job_on_write_fault(db_path: str, job_id: str, *, record: bool = True) -> Iterator[None]:
    """Turn a write fault in the body into a failed job and a permanent error.

    ``record=False`` (an embed step, which may run on a host without the index) only
    reports the fault: on stderr and in the heartbeat.
    """
    try:
        yield
    except PERMANENT_ERRORS:
        raise
    except Exception as exc:
        reason = faults.exception_reason(exc, db_path)
        if reason is None:
            raise
        recorded = _record_fault(db_path, job_id, reason) if record else False
        log.error("job.write_failed", job_id=job_id, reason=reason, recorded=recorded)
        report_write_fault(dramatiq.get_broker(), job_id, reason)
        raise IndexWriteError(reason) from exc


def _retries_so_far() -> int:
    message = CurrentMessage.get_current_message()
    return int(message.options.get("retries", 0)) if message is not None else 0


@dramatiq.actor(
    actor_name=names.PLAN_ACTOR,
    queue_name=names.PLAN_QUEUE,
    max_retries=3,
    time_limit=PLAN_TIME_LIMIT_MS,
    min_backoff=MIN_BACKOFF_MS,
    max_backoff=MAX_BACKOFF_MS,
    throws=PERMANENT_ERRORS,
)
def plan_job(message: dict[str, Any]) -> None:
    request = JobStep.from_dict(message, "plan")
    structlog.contextvars.bind_contextvars(job_id=request.job_id)
    try:
        with failing_job_on_write_fault(request.db_path, request.job_id):
            pipeline.plan(settings, request, _send_chunk, _send_embed)
    finally:
        structlog.contextvars.unbind_contextvars("job_id")


@dramatiq.actor(
    actor_name=names.CHUNK_ACTOR,
    queue_name=names.WRITE_QUEUE,
    max_retries=8,
    time_limit=WRITE_TIME_LIMIT_MS,
    min_backoff=MIN_BACKOFF_MS,
    max_backoff=MAX_BACKOFF_MS,
    throws=PERMANENT_ERRORS,
)
def chunk_batch(message: dict[str, Any]) -> None:
    """The lexical phase of a batch: chunk and write its rows, then send its embed step."""
    request = ChunkRequest.from_dict(message)
    with failing_job_on_write_fault(request.db_path, request.job_id):
        retried = pipeline.with_retries(request, request.retries + _retries_so_far())
        with chunk_slot(request.db_path):
            outcome = pipeline.chunk(retried, inline_embedder(), embed_workers=embed_workers())
        for embed in outcome.embeds:
            _send_embed(embed)
        if outcome.ready:
            _send_finalize(request.db_path, request.job_id)


@dramatiq.actor(
    actor_name=names.EMBED_ACTOR,
    queue_name=names.EMBED_QUEUE,
    max_retries=5,
    time_limit=EMBED_TIME_LIMIT_MS,
    min_backoff=MIN_BACKOFF_MS,
    max_backoff=MAX_BACKOFF_MS,
    throws=PERMANENT_ERRORS,
)
def embed_batch(message: dict[str, Any]) -> None:
    request = EmbedRequest.from_dict(message)
    try:
        vectors = pipeline.embed(request, process_embedder())
    except PERMANENT_ERRORS as exc:
        # Not retried (``throws``): the batch fails now, recorded on the index host.
        failure = BatchFailure(
            request.db_path, request.job_id, request.batch_no, request.paths, _line(exc)
        )
        batch_failure.send(failure.to_dict())
        raise
    vectors = pipeline.with_retries(vectors, vectors.retries + _retries_so_far())
    with failing_job_on_write_fault(request.db_path, request.job_id, record=False):
        write_batch.send_with_options(
            args=(vectors.to_dict(),), on_retry_exhausted=names.FAILED_ACTOR
        )
    log.info(
        "job.batch_embedded",
        job_id=request.job_id,
        batch=request.batch_no,
        unit=request.unit,
        units=request.units,
        vectors=len(vectors.vectors),
    )


@dramatiq.actor(
    actor_name=names.WRITE_ACTOR,
    queue_name=names.PLAN_QUEUE,
    max_retries=8,
    time_limit=WRITE_TIME_LIMIT_MS,
    min_backoff=MIN_BACKOFF_MS,
    max_backoff=MAX_BACKOFF_MS,
    throws=PERMANENT_ERRORS,
)
def write_batch(message: dict[str, Any]) -> None:
    """The vector phase of a batch: attach its vectors and settle it (on the plan queue,
    so that it does not wait for every chunk message of the job: see ``names``)."""
    request = VectorsRequest.from_dict(message)
    request = pipeline.with_retries(request, request.retries + _retries_so_far())
    with failing_job_on_write_fault(request.db_path, request.job_id):
        if pipeline.write_vectors(request):
            _send_finalize(request.db_path, request.job_id)


@dramatiq.actor(
    actor_name=names.FAILED_ACTOR,
    queue_name=names.WRITE_QUEUE,
    max_retries=8,
    throws=PERMANENT_ERRORS,
)
def batch_failed(message_data: dict[str, Any], exception_data: dict[str, Any]) -> None:
    """Dramatiq's on_retry_exhausted callback for a chunk, embed or vector write that kept
    failing."""
    request = decode_batch_step(message_data["args"][0])
    error = last_error(message_data, exception_data)
    failure = BatchFailure(
        request.db_path, request.job_id, request.batch_no, tuple(request.paths), error
    )
    with failing_job_on_write_fault(request.db_path, request.job_id):
        if pipeline.fail_batch(failure):
            _send_finalize(request.db_path, request.job_id)


@dramatiq.actor(
    actor_name=names.BATCH_FAILURE_ACTOR,
    queue_name=names.WRITE_QUEUE,
    max_retries=8,
    throws=PERMANENT_ERRORS,
)
def batch_failure(message: dict[str, Any]) -> None:
    """Record a batch that failed with an error retrying cannot fix."""
    failure = BatchFailure.from_dict(message)
    with failing_job_on_write_fault(failure.db_path, failure.job_id):
        if pipeline.fail_batch(failure):
            _send_finalize(failure.db_path, failure.job_id)


@dramatiq.actor(
    actor_name=names.PLAN_FAILED_ACTOR,
    queue_name=names.WRITE_QUEUE,
    max_retries=8,
    throws=PERMANENT_ERRORS,
)
def plan_failed(message_data: dict[str, Any], exception_data: dict[str, Any]) -> None:
    """Dramatiq's on_retry_exhausted callback for a plan that kept failing."""
    request = JobStep.from_dict(message_data["args"][0], "plan")
    with failing_job_on_write_fault(request.db_path, request.job_id):
        pipeline.fail_plan(request, last_error(message_data, exception_data))


@dramatiq.actor(
    actor_name=names.FINALIZE_ACTOR,
    queue_name=names.PLAN_QUEUE,
    max_retries=8,
    time_limit=FINALIZE_TIME_LIMIT_MS,
    throws=PERMANENT_ERRORS,
)
def finalize_job(message: dict[str, Any]) -> None:
    request = JobStep.from_dict(message, "finalize")
    with failing_job_on_write_fault(request.db_path, request.job_id):
        pipeline.finalize(request)


def _send_chunk(request: ChunkRequest) -> None:
    chunk_batch.send_with_options(args=(request.to_dict(),), on_retry_exhausted=names.FAILED_ACTOR)


def _send_embed(request: EmbedRequest) -> None:
    embed_batch.send_with_options(args=(request.to_dict(),), on_retry_exhausted=names.FAILED_ACTOR)


def _send_finalize(db_path: str, job_id: str) -> None:
    finalize_job.send(finalize_request(db_path, job_id).to_dict())
