"""Embed units sized to the pool, and pulled one at a time: a job of N units on W workers
keeps every worker busy until fewer than W units remain.

The sizing (``rifflux.index.units``) is checked as the pure function it is; the dispatch
with real SQLite broker consumers leasing as a one-thread worker process's do
(``workers.child.threads_prefetch``), finishing in the order a virtual clock gives (no
wall time: which worker frees first is decided by the units' text counts).
"""

from __future__ import annotations

import heapq
from pathlib import Path

import pytest
from dramatiq.message import Message

from rifflux.index.units import (
    MAX_UNITS,
    MIN_UNIT_TEXTS,
    TAIL_MIN_UNIT_TEXTS,
    UNITS_PER_WORKER,
    deal,
    units_for,
)
from rifflux.queue.sqlite_broker import SQLiteBroker
from workers.child import threads_prefetch

QUEUE = "rifflux_embed"


def batch_texts(batch: int, count: int) -> list[tuple[str, str]]:
    return [(f"b{batch}-t{n:03d}", "word " * (1 + (n * 7) % 23)) for n in range(count)]


@pytest.mark.parametrize("workers", [2, 4, 8, 16, 32])
@pytest.mark.parametrize("batches", [1, 3, 18, 30])
def test_a_job_has_units_for_every_worker_of_the_pool(workers: int, batches: int) -> None:
    texts = 100
    units = units_for(texts, batches, workers)
    assert 1 <= units <= min(MAX_UNITS, texts // MIN_UNIT_TEXTS)
    # Enough units for UNITS_PER_WORKER a worker, unless that would cut below the floor.
    assert batches * units >= min(UNITS_PER_WORKER * workers, batches * (texts // MIN_UNIT_TEXTS))


def test_a_pool_of_one_or_two_keeps_one_unit_a_batch_when_the_job_has_enough_batches() -> None:
    assert units_for(500, 1, 1) == 1
    assert units_for(500, 16, 2) == units_for(500, 30, 2) == 1
    assert units_for(5, 1, 16) == 1  # Too few texts to split.


def test_dealt_units_hold_every_text_once_in_counts_within_one() -> None:
    texts = batch_texts(0, 45)
    units = deal(texts, 4)
    assert sorted(t for unit in units for t in unit) == sorted(texts)
    assert max(map(len, units)) - min(map(len, units)) <= 1
    lengths = [sum(len(text) for _, text in unit) for unit in units]
    longest = max(len(text) for _, text in texts)
    assert max(lengths) - min(lengths) <= longest
    assert len(deal(texts[:2], 4)) == 2  # Fewer texts than units: a unit each.


@pytest.mark.parametrize("workers", [3, 4, 16])
def test_no_worker_idles_while_at_least_as_many_units_as_workers_wait(
    tmp_path: Path, workers: int
) -> None:
    batches = 6
    per_batch = [40 + 9 * b for b in range(batches)]
    units = [
        unit
        for b, count in enumerate(per_batch)
        for unit in deal(batch_texts(b, count), units_for(count, batches, workers))
    ]
    assert len(units) >= workers
    broker = SQLiteBroker(tmp_path / "queue.db")
    try:
        broker.declare_queue(QUEUE)
        for n, unit in enumerate(units):
            message = Message(
                queue_name=QUEUE, actor_name="embed", args=(n, len(unit)), kwargs={}, options={}
            )
            broker.enqueue(message)
        # One consumer per worker process, leasing as its one embed thread's Worker does.
        consumers = [
            broker.consume(QUEUE, prefetch=threads_prefetch(1), timeout=1) for _ in range(workers)
        ]
        clock = 0.0
        running: list[tuple[float, int, object]] = []
        waiting = len(units)

        def take(worker: int) -> None:
            nonlocal waiting
            message = next(consumers[worker])
            if message is not None:
                waiting -= 1
                heapq.heappush(running, (clock + message.args[1], worker, message))

        for worker in range(workers):
            take(worker)
        while running:
            # Every worker runs a unit while units wait; one holds no second unit.
            assert len(running) == workers or waiting == 0
            for _, worker, _ in running:
                assert next(consumers[worker]) is None
            clock, worker, message = heapq.heappop(running)
            consumers[worker].ack(message)
            take(worker)
        assert waiting == 0
    finally:
        broker.close()


def test_the_last_batches_go_out_as_smaller_units() -> None:
    """The tail (the last eighth of the batches, at least one) has twice the units, of at
    least TAIL_MIN_UNIT_TEXTS texts; the batches before it are as without a batch_no."""
    batches, texts = 18, 98
    plain = [units_for(texts, batches, 16, b) for b in range(batches)]
    assert plain[:-2] == [units_for(texts, batches, 16)] * (batches - 2)
    assert plain[-2:] == [min(2 * plain[0], texts // TAIL_MIN_UNIT_TEXTS)] * 2
    assert units_for(texts, batches, 2, batches - 1) == 2  # a pool of two splits it too
    assert units_for(texts, batches, 2, 0) == 1
    assert units_for(texts, 1, 16, 0) == min(2 * UNITS_PER_WORKER * 16, texts // 4, MAX_UNITS)
    assert units_for(6, batches, 16, batches - 1) == 1  # too few texts to split
