"""Worker presence: heartbeats that tell the front process which workers are alive.

Every worker process records a heartbeat on boot and every few seconds after; it
removes it on clean shutdown, and a killed worker simply stops being "live" once its
last heartbeat is older than ``LIVE_WORKER_SECONDS``. Where the heartbeats live
follows the broker: the SQLite broker's file, Redis itself, or (RabbitMQ) a small
SQLite file next to the index, which sees the index host's workers only.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import dramatiq
import structlog
from dramatiq.middleware import Middleware

from rifflux.config import Settings
from rifflux.store.connection import connect, retry_on_busy, write_transaction

log = structlog.get_logger(__name__)

HEARTBEAT_SECONDS = 5.0
"""How often a worker process records that it is alive."""
LIVE_WORKER_SECONDS = 15.0
"""A worker whose last heartbeat is older than this is not counted as alive."""
REDIS_KEY = "rifflux:workers"


class PresenceStore(Protocol):
    def record_heartbeat(self, worker_id: str, queues: Iterable[str]) -> None: ...

    def remove_heartbeat(self, worker_id: str) -> None: ...

    def remove_process(self, hostname: str, pid: int) -> None: ...

    def live_workers(
        self, max_age_seconds: float = LIVE_WORKER_SECONDS
    ) -> list[dict[str, Any]]: ...


def worker_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class SQLitePresence:
    """Heartbeats in a ``workers`` table of an SQLite file (WAL, busy retry)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._local = threading.local()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS workers (worker_id TEXT PRIMARY KEY, hostname TEXT,"
                " pid INTEGER, queues TEXT, started_at REAL, last_seen REAL)"
            )
            self._local.conn = conn
        return conn

    def record_heartbeat(self, worker_id: str, queues: Iterable[str]) -> None:
        conn = self._conn()
        host, pid, _ = worker_id.split(":", 2)
        now = time.time()

        def run() -> None:
            with write_transaction(conn):
                conn.execute(
                    "INSERT INTO workers VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(worker_id) "
                    "DO UPDATE SET last_seen = excluded.last_seen, queues = excluded.queues",
                    (worker_id, host, int(pid), json.dumps(sorted(queues)), now, now),
                )

        retry_on_busy(run)

    def remove_heartbeat(self, worker_id: str) -> None:
        conn = self._conn()

        def run() -> None:
            with write_transaction(conn):
                conn.execute("DELETE FROM workers WHERE worker_id = ?", (worker_id,))

        retry_on_busy(run)

    def remove_process(self, hostname: str, pid: int) -> None:
        """Forget the heartbeats of a process known to be dead (its pool reaped it)."""
        if not self.path.exists():
            return
        conn = self._conn()

        def run() -> None:
            with write_transaction(conn):
                conn.execute("DELETE FROM workers WHERE hostname = ? AND pid = ?", (hostname, pid))

        retry_on_busy(run)

    def live_workers(self, max_age_seconds: float = LIVE_WORKER_SECONDS) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        rows = self._conn().execute(
            "SELECT * FROM workers WHERE last_seen >= ? ORDER BY worker_id",
            (time.time() - max_age_seconds,),
        )
        return [
            {
                "worker_id": row["worker_id"],
                "hostname": row["hostname"],
                "pid": row["pid"],
                "queues": json.loads(row["queues"]),
                "last_seen": row["last_seen"],
            }
            for row in rows
        ]


class RedisPresence:
    """Heartbeats in one Redis hash, so embed-only hosts are counted too."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def record_heartbeat(self, worker_id: str, queues: Iterable[str]) -> None:
        host, pid, _ = worker_id.split(":", 2)
        entry = {
            "hostname": host,
            "pid": int(pid),
            "queues": sorted(queues),
            "last_seen": time.time(),
        }
        self.client.hset(REDIS_KEY, worker_id, json.dumps(entry))

    def remove_heartbeat(self, worker_id: str) -> None:
        self.client.hdel(REDIS_KEY, worker_id)

    def remove_process(self, hostname: str, pid: int) -> None:
        prefix = f"{hostname}:{pid}:"
        for key in self.client.hkeys(REDIS_KEY):
            name = key.decode() if isinstance(key, bytes) else key
            if name.startswith(prefix):
                self.client.hdel(REDIS_KEY, name)

    def live_workers(self, max_age_seconds: float = LIVE_WORKER_SECONDS) -> list[dict[str, Any]]:
        cutoff = time.time() - max_age_seconds
        live = []
        for worker_id, raw in sorted(self.client.hgetall(REDIS_KEY).items()):
            entry = json.loads(raw)
            if entry["last_seen"] >= cutoff:
                key = worker_id.decode() if isinstance(worker_id, bytes) else worker_id
                live.append({"worker_id": key, **entry})
        return live


def presence_store_for(broker: dramatiq.Broker, settings: Settings) -> PresenceStore:
    from rifflux.queue.sqlite_broker import SQLiteBroker

    if isinstance(broker, SQLiteBroker):
        return SQLitePresence(broker.path)
    client = getattr(broker, "client", None)
    if client is not None and hasattr(client, "hset"):
        return RedisPresence(client)
    return SQLitePresence(settings.db_path.resolve().parent / "workers.db")


class PresenceMiddleware(Middleware):
    """Records one heartbeat per worker process from boot to shutdown.

    A worker process may run more than one ``dramatiq.Worker`` (``workers.child`` gives
    the index-host queues their own threads, apart from the embed queue's): its heartbeat
    lists the queues of every Worker still running in it, so status and stall detection
    see one live process that consumes all of them.
    """

    def __init__(
        self, store: PresenceStore, *, interval_seconds: float = HEARTBEAT_SECONDS
    ) -> None:
        self.store = store
        self.interval_seconds = interval_seconds
        self.worker_id: str | None = None
        self._queues: dict[int, list[str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _all_queues(self) -> list[str]:
        with self._lock:
            return sorted({q for queues in self._queues.values() for q in queues})

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        queues = sorted(worker.consumer_whitelist or broker.get_declared_queues())
        with self._lock:
            self._queues[id(worker)] = queues
            first = self.worker_id is None
            worker_id = self.worker_id = self.worker_id or worker_tag()
        self.store.record_heartbeat(worker_id, self._all_queues())
        if first:
            self._stop = stop = threading.Event()

            def beat() -> None:
                while not stop.wait(self.interval_seconds):
                    try:
                        self.store.record_heartbeat(worker_id, self._all_queues())
                    except Exception:
                        log.warning("worker.heartbeat_failed", worker=worker_id, exc_info=True)

            self._thread = threading.Thread(target=beat, name="rifflux-heartbeat", daemon=True)
            self._thread.start()
        log.info("worker.booted", worker=worker_id, queues=queues)

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        # Workers of one process stop concurrently: each update of the heartbeat happens
        # under the lock, so one still running can never re-record it after the last
        # one removed it.
        with self._lock:
            self._queues.pop(id(worker), None)
            worker_id = self.worker_id
            if worker_id is None:
                return
            if self._queues:
                queues = sorted({q for qs in self._queues.values() for q in qs})
                self.store.record_heartbeat(worker_id, queues)
                return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_seconds)
            self._thread = None
        with self._lock:
            self.store.remove_heartbeat(worker_id)
            self.worker_id = None
        log.info("worker.stopped", worker=worker_id)
