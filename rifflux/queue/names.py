"""Queue and actor names shared by the front process (which enqueues by name) and workers.

plan and write run where the index database lives; embed runs on any host. An
embed-only host starts its workers with ``--queues rifflux_embed``.
"""

PLAN_QUEUE = "rifflux_plan"
EMBED_QUEUE = "rifflux_embed"
WRITE_QUEUE = "rifflux_write"
ALL_QUEUES = (PLAN_QUEUE, EMBED_QUEUE, WRITE_QUEUE)
INDEX_HOST_QUEUES = (PLAN_QUEUE, WRITE_QUEUE)

PLAN_ACTOR = "plan_job"
EMBED_ACTOR = "embed_batch"
WRITE_ACTOR = "write_batch"
FAILED_ACTOR = "batch_failed"
PLAN_FAILED_ACTOR = "plan_failed"
FINALIZE_ACTOR = "finalize_job"
# A batch that failed for good without retries (an error retrying cannot fix).
BATCH_FAILURE_ACTOR = "batch_failure"
