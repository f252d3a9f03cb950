"""Worker heartbeats: which workers are alive, recorded by a middleware in real workers."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import dramatiq
from dramatiq import Worker
from rifflux_testing import wait_until

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
        # A later heartbeat (every 0.1 s) refreshes it.
        wait_until(lambda: presence.live_workers()[0]["last_seen"] > first["last_seen"])
        [later] = presence.live_workers()
        assert later["worker_id"] == first["worker_id"]
    finally:
        worker.stop()
    assert presence.live_workers() == []
    broker.close()


def test_a_heartbeat_says_when_every_message_fails_and_which_write_fault_it_met(
    tmp_path: Path,
) -> None:
    path = tmp_path / "queue.db"
    presence = SQLitePresence(path)
    heartbeat = PresenceMiddleware(presence, interval_seconds=0.1)
    broker = SQLiteBroker(path, middleware=[heartbeat])
    dramatiq.set_broker(broker)
    outcomes = iter([None, "disk I/O error", "disk I/O error"])

    @dramatiq.actor(queue_name="presence-test")
    def step() -> None:
        error = next(outcomes)
        if error is not None:
            raise sqlite3.OperationalError(error)

    worker = Worker(broker, worker_threads=1, worker_timeout=100)
    worker.start()
    try:
        step.send()
        wait_until(lambda: (presence.live_workers()[0]["health"] or {}).get("last_ok"))
        for _ in range(2):
            step.send()
        broker.join("presence-test")
        wait_until(lambda: (presence.live_workers()[0]["health"] or {}).get("failing_since"))
        heartbeat.report_write_fault("job-1", "index write failed: disk I/O error (x)")
        [live] = presence.live_workers()
    finally:
        worker.stop()
        broker.close()
    health = live["health"]
    assert health["last_error"] == "OperationalError: disk I/O error"
    assert health["failing_since"] > health["last_ok"]
    assert health["write_fault"]["job_id"] == "job-1"
    assert health["write_fault"]["reason"] == "index write failed: disk I/O error (x)"


def test_an_older_queue_file_gets_the_health_column(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE workers (worker_id TEXT PRIMARY KEY, hostname TEXT, pid INTEGER, "
        "queues TEXT, started_at REAL, last_seen REAL)"
    )
    old.close()
    presence = SQLitePresence(path)
    presence.record_heartbeat(worker_tag(), ["rifflux_plan"], {"failing_since": None})
    [live] = presence.live_workers()
    assert live["health"] == {"failing_since": None}


def test_a_heartbeat_of_a_process_gone_from_this_host_is_not_live(tmp_path: Path) -> None:
    presence = SQLitePresence(tmp_path / "queue.db")
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    host = socket.gethostname()
    gone = f"{host}:{ended.pid}:00000000"
    elsewhere = f"another-host:{ended.pid}:00000000"
    here = worker_tag()
    for tag in (gone, elsewhere, here):
        presence.record_heartbeat(tag, ["rifflux_plan"])
    # All three are seconds old; the one whose process this host no longer runs is dead.
    assert {w["worker_id"] for w in presence.heartbeats()} == {gone, elsewhere, here}
    assert {w["worker_id"] for w in presence.live_workers()} == {elsewhere, here}

    # A heartbeat first recorded before its pid's process started is another process's.
    conn = sqlite3.connect(tmp_path / "queue.db")
    with conn:
        conn.execute("UPDATE workers SET started_at = 0 WHERE worker_id = ?", (here,))
    conn.close()
    assert {w["worker_id"] for w in presence.live_workers()} == {elsewhere}


def test_a_heartbeat_names_the_device_its_worker_embeds_on(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    presence = SQLitePresence(path)
    gpu = PresenceMiddleware(presence, interval_seconds=0.1, device="cuda:1")
    broker = SQLiteBroker(path, middleware=[gpu])
    dramatiq.set_broker(broker)
    broker.declare_queue("presence-test")
    worker = Worker(broker, worker_threads=1, worker_timeout=100)
    worker.start()
    try:
        [live] = presence.live_workers()
        # A heartbeat that does not say (a worker of an older version) embeds on the CPU.
        presence.record_heartbeat(worker_tag(), ["rifflux_embed"], {"last_ok": None})
        devices = {w["worker_id"]: w["device"] for w in presence.heartbeats()}
    finally:
        worker.stop()
        broker.close()
    assert live["device"] == live["health"]["device"] == "cuda:1"
    assert sorted(devices.values()) == ["cpu", "cuda:1"]
