"""Queue and actor names shared by the front process (which enqueues by name) and workers,
and the plan message that starts a job.

plan and write run where the index database lives; embed runs on any host. An
embed-only host starts its workers with ``--queues rifflux_embed``. The write queue
carries the lexical phase of a batch (``chunk_batch``: chunk and write the
keyword-searchable rows); the plan queue carries the job's own steps (``plan_job``,
``finalize_job``) and the vector phase (``write_batch``: attach the vectors). A plan
enqueues every batch's chunk message at once, so a vector write on the write queue
waited behind all of them: every batch's vectors landed in a serial tail after the last
batch was chunked (1.4-2.3 s of a 10-12 s hash-embedder job of awesome-copilot, 0.4-0.7 s
with the vector phase on the plan queue).
"""

from dramatiq import Message

from rifflux.index.messages import plan_request

PLAN_QUEUE = "rifflux_plan"
EMBED_QUEUE = "rifflux_embed"
WRITE_QUEUE = "rifflux_write"
ALL_QUEUES = (PLAN_QUEUE, EMBED_QUEUE, WRITE_QUEUE)
INDEX_HOST_QUEUES = (PLAN_QUEUE, WRITE_QUEUE)

PLAN_ACTOR = "plan_job"
CHUNK_ACTOR = "chunk_batch"
EMBED_ACTOR = "embed_batch"
WRITE_ACTOR = "write_batch"
FAILED_ACTOR = "batch_failed"
PLAN_FAILED_ACTOR = "plan_failed"
FINALIZE_ACTOR = "finalize_job"
# A batch that failed for good without retries (an error retrying cannot fix).
BATCH_FAILURE_ACTOR = "batch_failure"


def plan_message(db_path: str, job_id: str) -> Message:
    """The message that starts a job at its plan step (or restarts one that lost its
    messages: the persisted plan re-sends only pending batches)."""
    return Message(
        queue_name=PLAN_QUEUE,
        actor_name=PLAN_ACTOR,
        args=(plan_request(db_path, job_id).to_dict(),),
        kwargs={},
        options={"on_retry_exhausted": PLAN_FAILED_ACTOR},
    )
