"""Which dramatiq Workers a worker process runs: the embed queue apart from the index-host
queues when it consumes both and has lexical threads."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import CurrentMessage
from rifflux_testing import REPO_ROOT, wait_until

from workers.child import quiet_second_worker_middleware, split_queues

DECLARED = ["rifflux_embed", "rifflux_plan", "rifflux_write"]


def test_a_process_of_every_queue_gives_the_index_host_queues_their_own_threads() -> None:
    assert split_queues([], DECLARED, 1, 1) == [
        (("rifflux_embed",), 1),
        (("rifflux_plan", "rifflux_write"), 1),
    ]


def test_one_worker_when_there_is_nothing_to_split_or_no_lexical_threads() -> None:
    assert split_queues([], DECLARED, 2, 0) == [((), 2)]
    assert split_queues(["rifflux_embed"], DECLARED, 1, 1) == [(("rifflux_embed",), 1)]
    index_host = ["rifflux_plan", "rifflux_write"]
    assert split_queues(index_host, DECLARED, 1, 1) == [(tuple(index_host), 1)]


# -- boot log (issue 20, finding 9) ------------------------------------------------------


def test_a_worker_boots_without_dramatiqs_duplicate_middleware_warning(tmp_path: Path) -> None:
    """A split worker process runs two dramatiq Workers on one broker; each adds its own
    _WorkerMiddleware, which Dramatiq warned about at every boot (`make run`)."""
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RIFFLUX_", "RIFLUX_"))}
    env.update(
        RIFFLUX_DB_PATH=str(tmp_path / "index.db"),
        RIFFLUX_EMBEDDING_BACKEND="hash",
        PYTHONPATH=str(REPO_ROOT),
    )
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rifflux.cli", "worker", "--processes", "1"],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_until(lambda: "worker.consuming" in log.read_text(), timeout=60)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    text = log.read_text()
    assert '"queues": [["rifflux_embed"], ["rifflux_plan", "rifflux_write"]]' in text
    assert "same type twice" not in text, text


def test_a_real_duplicate_middleware_still_warns(caplog: pytest.LogCaptureFixture) -> None:
    broker = StubBroker()
    quiet_second_worker_middleware(broker)
    with caplog.at_level(logging.WARNING):
        broker.add_middleware(CurrentMessage())
        broker.add_middleware(CurrentMessage())
        dramatiq.Worker(broker, worker_threads=1).start()
        dramatiq.Worker(broker, worker_threads=1).start()
    warnings = [r.getMessage() for r in caplog.records if "same type twice" in r.getMessage()]
    assert len(warnings) == 1 and "CurrentMessage" in warnings[0], warnings
