"""The SQLite broker's doorbell: another process's enqueue wakes a waiting consumer at
once instead of at its next poll, and a dead listener is forgotten."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from dramatiq.message import Message

from rifflux.queue.doorbell import SUPPORTED, Doorbell
from rifflux.queue.sqlite_broker import SQLiteBroker
from rifflux.store.own_files import IndexFiles

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="abstract Unix sockets are Linux's")

# A consumer process: listens (consume), then waits up to 120 s for its queue to change
# and says whether it was woken, and by whom (in-process notify counts as "woken").
CONSUMER = """
import sys
from rifflux.queue.sqlite_broker import SQLiteBroker

broker = SQLiteBroker(sys.argv[1], max_poll_seconds=3600)
broker.declare_queue("q")
broker.consume("q")
marks = broker._change_marks(["q"])
print("ready", flush=True)
broker._wait_for_change(marks, 120)
print("woken" if broker._change_marks(["q"]) != marks else "timeout", flush=True)
broker.close()
"""


def test_an_enqueue_in_another_process_wakes_a_waiting_consumer(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    SQLiteBroker(path).close()  # the schema, before two processes race to make it
    consumer = subprocess.Popen(
        [sys.executable, "-c", CONSUMER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert consumer.stdout is not None
        assert consumer.stdout.readline().strip() == "ready"
        producer = SQLiteBroker(path)
        producer.declare_queue("q")
        producer.enqueue(Message(queue_name="q", actor_name="a", args=(), kwargs={}, options={}))
        producer.close()
        # Polling alone would wake it after 120 s at the earliest (its poll is 1 h).
        out, _ = consumer.communicate(timeout=60)
        assert out.strip() == "woken"
    finally:
        consumer.kill()
        consumer.wait()
    # Its listener deregistered when its broker closed.
    assert os.listdir(tmp_path / "queue.db.doorbells") == []


def test_a_listener_hears_rings_and_a_dead_one_is_forgotten(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    heard: list[str] = []
    got = threading.Event()

    def wake(name: str) -> None:
        heard.append(name)
        got.set()

    listening, ringing = Doorbell(path), Doorbell(path)
    listening.listen(wake)
    listening.listen(wake)  # once per process: a second call binds nothing
    (registered,) = os.listdir(listening.folder)
    # A registration whose process died (nobody binds its name): forgotten on a ring.
    (listening.folder / ("0" * 32)).touch()
    ringing.ring("rifflux_chunk")
    assert got.wait(10) and heard == ["rifflux_chunk"]
    assert os.listdir(listening.folder) == [registered]
    # A process does not ring itself (its consumers were woken in-process).
    got.clear()
    listening.ring("rifflux_plan")
    ringing.ring("rifflux_write")
    assert got.wait(10) and heard == ["rifflux_chunk", "rifflux_write"]
    listening.close()
    ringing.close()
    assert os.listdir(listening.folder) == []
    ringing.ring("nobody listens")  # no error


def test_the_doorbell_folder_is_one_of_the_index_files(tmp_path: Path) -> None:
    own = IndexFiles.for_db(tmp_path / "index.db")
    assert own.owns(tmp_path / "queue.db.doorbells" / "0123abcd")
