"""The queue client is transport: it submits jobs and reads their state, and starts and
waits on nothing (the local pool and the wait live in ``rifflux.reindex``)."""

from __future__ import annotations

from pathlib import Path

from rifflux_testing import make_settings

from rifflux.queue.client import IndexQueue


def test_the_transport_submits_and_reads_but_starts_and_waits_on_nothing(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    queue = IndexQueue(make_settings(tmp_path))
    try:
        for name in ("wait", "start_pool", "stop_pool", "pool", "launcher"):
            assert not hasattr(queue, name), name
        job_id = queue.submit([docs])  # No worker: it stays queued.
        record = queue.job(job_id)
        assert record is not None and record.state == "queued"
        assert queue.unfinished_job_for([docs]) == job_id
        assert queue.cancel(job_id) and not queue.cancel(job_id)
        assert not queue.has_unfinished_jobs()
    finally:
        queue.close()
