"""Worker heartbeats: which workers are alive, recorded by a middleware in real workers."""

from __future__ import annotations

import os
import time
from pathlib import Path

import dramatiq
from dramatiq import Worker

from rifflux.queue.presence import PresenceMiddleware, SQLitePresence, worker_tag
from rifflux.queue.sqlite_broker import SQLiteBroker


def test_heartbeats_list_recent_workers_only(tmp_path: Path) -> None:
    presence = SQLitePresence(tmp_path / "queue.db")
    tag = worker_tag()
    presence.record_heartbeat(tag, ["search", "embed"])
    [live] = presence.live_workers()
    assert live["worker_id"] == tag
    assert live["queues"] == ["embed", "search"]
    assert live["pid"] == os.getpid()
    time.sleep(0.05)
    assert presence.live_workers(max_age_seconds=0.01) == []
    presence.remove_heartbeat(tag)
    assert presence.live_workers() == []


def test_middleware_tracks_a_running_worker_until_it_stops(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    presence = SQLitePresence(path)
    heartbeat = PresenceMiddleware(presence, interval_seconds=0.1)
    broker = SQLiteBroker(path, middleware=[heartbeat])
    dramatiq.set_broker(broker)
    broker.declare_queue("presence-test")
    worker = Worker(broker, worker_threads=1, worker_timeout=100)
    worker.start()
    try:
        [first] = presence.live_workers()
        assert first["worker_id"] == heartbeat.worker_id
        assert first["queues"] == ["presence-test"]
        time.sleep(0.35)
        [later] = presence.live_workers()
        assert later["last_seen"] > first["last_seen"]
    finally:
        worker.stop()
    assert presence.live_workers() == []
    broker.close()
