"""Worker presence: heartbeats that tell the front process which workers are alive.

Every worker process records a heartbeat on boot and every few seconds after; it
removes it on clean shutdown, and a killed worker simply stops being "live" once its
last heartbeat is older than ``LIVE_WORKER_SECONDS``. Where the heartbeats live
follows the broker: the SQLite broker's file, Redis itself, or (RabbitMQ) a small
SQLite file next to the index, which sees the index host's workers only.

A heartbeat carries the process's ``health`` (:meth:`PresenceMiddleware.health`): since
when every message it ran has failed and the last error, when one last succeeded, and
the last write fault it met (:mod:`rifflux.store.faults`), with the job. So the stall
detector tells "no live consumer" from "consumers alive and failing", and a client
learns that its job cannot be written even when the job record cannot be.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import dramatiq
import structlog
from dramatiq.middleware import Middleware

from rifflux.config import Settings
from rifflux.store.connection import connect, retry_on_busy, write_transaction

log = structlog.get_logger(__name__)

ERROR_CHARS = 300
"""A heartbeat's ``last_error`` is cut to this many characters."""
HEARTBEAT_SECONDS = 5.0
"""How often a worker process records that it is alive."""
LIVE_WORKER_SECONDS = 15.0
"""A worker whose last heartbeat is older than this is not counted as alive."""
REDIS_KEY = "rifflux:workers"


Health = Mapping[str, Any]


class PresenceStore(Protocol):
    def record_heartbeat(
        self, worker_id: str, queues: Iterable[str], health: Health | None = None
    ) -> None: ...

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
                " pid INTEGER, queues TEXT, started_at REAL, last_seen REAL, health TEXT)"
            )
            _add_health_column(conn)
            self._local.conn = conn
        return conn

    def record_heartbeat(
        self, worker_id: str, queues: Iterable[str], health: Health | None = None
    ) -> None:
        conn = self._conn()
        host, pid, _ = worker_id.split(":", 2)
        now = time.time()
        encoded = json.dumps(dict(health)) if health else None

        def run() -> None:
            with write_transaction(conn):
                conn.execute(
                    "INSERT INTO workers VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(worker_id) "
                    "DO UPDATE SET last_seen = excluded.last_seen, queues = excluded.queues, "
                    "health = excluded.health",
                    (worker_id, host, int(pid), json.dumps(sorted(queues)), now, now, encoded),
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
                "health": json.loads(row["health"]) if row["health"] else None,
            }
            for row in rows
        ]


def _add_health_column(conn: sqlite3.Connection) -> None:
    """Give a ``workers`` table of an older queue file its ``health`` column."""
    if "health" in {row["name"] for row in conn.execute("PRAGMA table_info(workers)")}:
        return
    try:
        conn.execute("ALTER TABLE workers ADD COLUMN health TEXT")
    except sqlite3.OperationalError as exc:
        if "duplicate column" not in str(exc):  # Another process added it first.
            raise


class RedisPresence:
    """Heartbeats in one Redis hash, so embed-only hosts are counted too."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def record_heartbeat(
        self, worker_id: str, queues: Iterable[str], health: Health | None = None
    ) -> None:
        host, pid, _ = worker_id.split(":", 2)
        entry = {
            "hostname": host,
            "pid": int(pid),
            "queues": sorted(queues),
            "last_seen": time.time(),
            "health": dict(health) if health else None,
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
                live.append({"worker_id": key, "health": None, **entry})
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
        # Health (see health()), updated after every message.
        self._failing_since: float | None = None
        self._last_error: str | None = None
        self._last_ok: float | None = None
        self._write_fault: dict[str, Any] | None = None

    def _all_queues(self) -> list[str]:
        with self._lock:
            return sorted({q for queues in self._queues.values() for q in queues})

    def health(self) -> dict[str, Any]:
        """``failing_since`` (epoch seconds: every message since has failed, or None),
        ``last_error`` (one line), ``last_ok`` (the last message that succeeded) and
        ``write_fault`` (``{"job_id", "reason", "at"}`` of the last write no retry fixes)."""
        with self._lock:
            return self._health()

    def _health(self) -> dict[str, Any]:
        return {
            "failing_since": self._failing_since,
            "last_error": self._last_error,
            "last_ok": self._last_ok,
            "write_fault": self._write_fault,
        }

    def after_process_message(
        self, broker: dramatiq.Broker, message: Any, *, result: Any = None, exception: Any = None
    ) -> None:
        now = time.time()
        with self._lock:
            if exception is None:
                self._failing_since = None
                self._last_ok = now
                return
            started = self._failing_since is None
            self._failing_since = self._failing_since or now
            line = " ".join(f"{type(exception).__name__}: {exception}".split())
            self._last_error = line[:ERROR_CHARS]
            worker_id = self.worker_id
        if started and worker_id is not None:
            # Say so now, not at the next beat: a client may be deciding it is stalled.
            try:
                self.store.record_heartbeat(worker_id, self._all_queues(), self.health())
            except Exception as exc:
                log.warning("worker.heartbeat_failed", worker=worker_id, error=str(exc))

    def report_write_fault(self, job_id: str, reason: str) -> None:
        """Publish a write fault of ``job_id`` now (best effort: the heartbeat's own
        database may be the one that is full) and with every later heartbeat."""
        with self._lock:
            self._write_fault = {"job_id": job_id, "reason": reason, "at": time.time()}
            worker_id = self.worker_id
        if worker_id is None:
            return
        try:
            self.store.record_heartbeat(worker_id, self._all_queues(), self.health())
        except Exception:  # The fault is reported on stderr as well.
            log.warning("worker.heartbeat_failed", worker=worker_id, job_id=job_id)

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        queues = sorted(worker.consumer_whitelist or broker.get_declared_queues())
        with self._lock:
            self._queues[id(worker)] = queues
            first = self.worker_id is None
            worker_id = self.worker_id = self.worker_id or worker_tag()
        self.store.record_heartbeat(worker_id, self._all_queues(), self.health())
        if first:
            self._stop = stop = threading.Event()

            def beat() -> None:
                while not stop.wait(self.interval_seconds):
                    try:
                        self.store.record_heartbeat(worker_id, self._all_queues(), self.health())
                    except Exception as exc:
                        log.warning("worker.heartbeat_failed", worker=worker_id, error=str(exc))

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
                self.store.record_heartbeat(worker_id, queues, self._health())
                return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_seconds)
            self._thread = None
        with self._lock:
            self.store.remove_heartbeat(worker_id)
            self.worker_id = None
        log.info("worker.stopped", worker=worker_id)


def report_write_fault(broker: dramatiq.Broker, job_id: str, reason: str) -> None:
    """Put a write fault in this worker process's heartbeat (see :class:`PresenceMiddleware`)."""
    for middleware in broker.middleware:
        if isinstance(middleware, PresenceMiddleware):
            middleware.report_write_fault(job_id, reason)
