"""The same actors on Dramatiq's Redis and RabbitMQ brokers (real servers on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rifflux_testing import copy_corpus, index_rows, make_settings
from test_jobs_e2e import reference_rows, run_job

from rifflux.queue import names
from rifflux.queue.brokers import make_broker
from rifflux.queue.client import IndexQueue

REDIS_URL = "redis://127.0.0.1:6379/0"
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"
# One test at a time on the shared servers: each flushes the rifflux queues there.
pytestmark = pytest.mark.xdist_group("shared-brokers")


def flush_rifflux_queues(url: str) -> None:
    """Start from empty queues: other runs may have left messages on the shared server."""
    broker = make_broker(url)
    try:
        for queue in names.ALL_QUEUES:
            broker.declare_queue(queue)
        broker.flush_all()
    finally:
        broker.close()


@pytest.mark.slow
@pytest.mark.redis
def test_redis_split_topology_embed_only_worker(tmp_path: Path, start_workers) -> None:
    flush_rifflux_queues(REDIS_URL)
    corpus = copy_corpus(tmp_path / "docs", limit=30)
    settings = make_settings(tmp_path, broker_url=REDIS_URL, batch_target_bytes=20_000)
    # The index host consumes plan and write; an "embed host" consumes embed only.
    start_workers(settings, queues=names.INDEX_HOST_QUEUES)
    start_workers(settings, queues=(names.EMBED_QUEUE,))
    record = run_job(settings, corpus)
    assert record.state == "completed", record.errors
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)
    queue = IndexQueue(settings)
    try:
        live = queue.live_workers()
        assert {tuple(w["queues"]) for w in live} >= {
            tuple(sorted(names.INDEX_HOST_QUEUES)),
            (names.EMBED_QUEUE,),
        }
        assert queue.index_host_workers()
    finally:
        queue.close()


@pytest.mark.slow
@pytest.mark.rabbitmq
def test_rabbitmq_runs_the_same_job(tmp_path: Path, start_workers) -> None:
    flush_rifflux_queues(RABBITMQ_URL)
    corpus = copy_corpus(tmp_path / "docs", limit=30)
    settings = make_settings(tmp_path, broker_url=RABBITMQ_URL, batch_target_bytes=20_000)
    start_workers(settings, processes=2)
    record = run_job(settings, corpus)
    assert record.state == "completed", record.errors
    assert index_rows(settings.db_path) == reference_rows(tmp_path, corpus, settings)
