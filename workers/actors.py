"""Dramatiq actors for reindex jobs: thin wrappers over ``rifflux.queue.tasks``.

Start workers with ``rifflux worker`` or ``dramatiq workers.actors --processes N``.
Each worker process loads its embedder once, on the first embed batch it runs.
"""

from __future__ import annotations

import threading
from typing import Any

import dramatiq
import structlog
from dramatiq.middleware import CurrentMessage

from rifflux.embed.base import Embedder
from rifflux.embed.factory import make_embedder
from rifflux.queue import names, tasks
from workers.setup import settings

log = structlog.get_logger(__name__)

# Dramatiq time limits and retry policy, in milliseconds.
EMBED_TIME_LIMIT_MS = 30 * 60_000
WRITE_TIME_LIMIT_MS = 10 * 60_000
PLAN_TIME_LIMIT_MS = 60 * 60_000
MIN_BACKOFF_MS = 500
MAX_BACKOFF_MS = 30_000

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


def last_error(message_data: dict[str, Any], retry_data: dict[str, Any]) -> str:
    """The exception line of the last attempt's traceback, with the attempt count."""
    lines = str(message_data.get("options", {}).get("traceback", "")).strip().splitlines()
    last = lines[-1] if lines else "unknown error"
    return f"{last} (after {retry_data.get('retries', '?')} retries)"


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
)
def plan_job(db_path: str, job_id: str) -> None:
    structlog.contextvars.bind_contextvars(job_id=job_id)
    try:

        def send_batch(batch_no: int, payload: dict[str, Any]) -> None:
            embed_batch.send_with_options(
                args=(db_path, job_id, batch_no, payload), on_retry_exhausted=names.FAILED_ACTOR
            )

        outcome = tasks.plan(settings, db_path, job_id, send_batch)
        if outcome.ready_to_finalize:
            finalize_job.send(db_path, job_id)
    finally:
        structlog.contextvars.unbind_contextvars("job_id")


@dramatiq.actor(
    actor_name=names.EMBED_ACTOR,
    queue_name=names.EMBED_QUEUE,
    max_retries=5,
    time_limit=EMBED_TIME_LIMIT_MS,
    min_backoff=MIN_BACKOFF_MS,
    max_backoff=MAX_BACKOFF_MS,
)
def embed_batch(db_path: str, job_id: str, batch_no: int, payload: dict[str, Any]) -> None:
    prepared = tasks.embed(payload, process_embedder())
    write_batch.send_with_options(
        args=(db_path, job_id, batch_no, prepared),
        kwargs={"retries": _retries_so_far()},
        on_retry_exhausted=names.FAILED_ACTOR,
    )
    log.info("job.batch_embedded", job_id=job_id, batch=batch_no, vectors=len(prepared["vectors"]))


@dramatiq.actor(
    actor_name=names.WRITE_ACTOR,
    queue_name=names.WRITE_QUEUE,
    max_retries=8,
    time_limit=WRITE_TIME_LIMIT_MS,
    min_backoff=MIN_BACKOFF_MS,
    max_backoff=MAX_BACKOFF_MS,
)
def write_batch(
    db_path: str, job_id: str, batch_no: int, prepared: dict[str, Any], retries: int = 0
) -> None:
    if tasks.write(db_path, job_id, batch_no, prepared, retries + _retries_so_far()):
        finalize_job.send(db_path, job_id)


@dramatiq.actor(actor_name=names.FAILED_ACTOR, queue_name=names.WRITE_QUEUE, max_retries=8)
def batch_failed(message_data: dict[str, Any], exception_data: dict[str, Any]) -> None:
    """Dramatiq's on_retry_exhausted callback for a batch that kept failing."""
    db_path, job_id, batch_no, payload = message_data["args"][:4]
    paths = [f["rel_path"] for f in payload["files"]]
    error = last_error(message_data, exception_data)
    if tasks.fail_batch(db_path, job_id, batch_no, paths, error):
        finalize_job.send(db_path, job_id)


@dramatiq.actor(actor_name=names.PLAN_FAILED_ACTOR, queue_name=names.WRITE_QUEUE, max_retries=8)
def plan_failed(message_data: dict[str, Any], exception_data: dict[str, Any]) -> None:
    """Dramatiq's on_retry_exhausted callback for a plan that kept failing."""
    db_path, job_id = message_data["args"][:2]
    error = last_error(message_data, exception_data)
    tasks.fail_plan(db_path, job_id, error)


@dramatiq.actor(actor_name=names.FINALIZE_ACTOR, queue_name=names.PLAN_QUEUE, max_retries=8)
def finalize_job(db_path: str, job_id: str) -> None:
    tasks.finalize(db_path, job_id)
