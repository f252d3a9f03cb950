"""Worker presence: heartbeats that tell the front process which workers are alive.

Every worker process records a heartbeat on boot and every few seconds after; it
removes it on clean shutdown. A heartbeat names its host and pid (``worker_tag``): one
of this host whose process no longer runs (``kill -9``, an OOM kill, a crash of a whole
pool) is not live, whatever its age (:func:`process_gone`); one of another host stops
being live once it is older than ``LIVE_WORKER_SECONDS``. Where the heartbeats live
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
PID_REUSE_SLACK_SECONDS = 2.0
"""A process that started this long after a heartbeat was first recorded is not the
one that recorded it (the boot time and clock ticks of ``/proc`` are coarse)."""
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

    def heartbeats(self, max_age_seconds: float = LIVE_WORKER_SECONDS) -> list[dict[str, Any]]: ...


def worker_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def process_gone(hostname: str, pid: int, started_at: float | None = None) -> bool:
    """True if the process of a heartbeat is known not to run: it was on this host and
    its pid is free, a zombie's, or (``started_at``: when the heartbeat was first
    recorded) a process started since, which reused the pid. A process of another host,
    or one that cannot be looked at, is not known to be gone."""
    if hostname != socket.gethostname():
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # "pid (comm) state ppid ... starttime(22nd)": comm may hold spaces.
            fields = stat.read().rpartition(")")[2].split()
    except FileNotFoundError:
        return True
    except OSError:
        return _pid_free(pid)
    if fields[0] in ("Z", "X"):
        return True
    if started_at is None:
        return False
    began = _process_start(int(fields[19]))
    return began is not None and began > started_at + PID_REUSE_SLACK_SECONDS


def _pid_free(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _process_start(ticks: int) -> float | None:
    """Epoch seconds at which a process started ``ticks`` clock ticks after boot."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            boot = next(float(line.split()[1]) for line in stat if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def running(heartbeats: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The heartbeats whose process is not known to be gone (:func:`process_gone`)."""
    return [
        h
        for h in heartbeats
        if not process_gone(str(h["hostname"]), int(h["pid"]), h.get("started_at"))
    ]


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
        return running(self.heartbeats(max_age_seconds))

    def heartbeats(self, max_age_seconds: float = LIVE_WORKER_SECONDS) -> list[dict[str, Any]]:
        """Every heartbeat younger than ``max_age_seconds``, its process running or not."""
        if not self.path.exists():
            return []
        rows = self._conn().execute(
            "SELECT * FROM workers WHERE last_seen >= ? ORDER BY worker_id",
            (time.time() - max_age_seconds,),
        )
        beats = [
            {
                "worker_id": row["worker_id"],
                "hostname": row["hostname"],
                "pid": row["pid"],
                "queues": json.loads(row["queues"]),
                "started_at": row["started_at"],
                "last_seen": row["last_seen"],
                "health": json.loads(row["health"]) if row["health"] else None,
            }
            for row in rows
        ]
        return [with_device(beat) for beat in beats]


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
        # When this process first recorded each of its heartbeats (see process_gone).
        self._started: dict[str, float] = {}

    def record_heartbeat(
        self, worker_id: str, queues: Iterable[str], health: Health | None = None
    ) -> None:
        host, pid, _ = worker_id.split(":", 2)
        now = time.time()
        entry = {
            "hostname": host,
            "pid": int(pid),
            "queues": sorted(queues),
            "started_at": self._started.setdefault(worker_id, now),
            "last_seen": now,
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
        return running(self.heartbeats(max_age_seconds))

    def heartbeats(self, max_age_seconds: float = LIVE_WORKER_SECONDS) -> list[dict[str, Any]]:
        """Every heartbeat younger than ``max_age_seconds``, its process running or not."""
        cutoff = time.time() - max_age_seconds
        live = []
        for worker_id, raw in sorted(self.client.hgetall(REDIS_KEY).items()):
            entry = json.loads(raw)
            if entry["last_seen"] >= cutoff:
                key = worker_id.decode() if isinstance(worker_id, bytes) else worker_id
                live.append(with_device({"worker_id": key, "health": None, **entry}))
        return live


def with_device(heartbeat: dict[str, Any]) -> dict[str, Any]:
    """The heartbeat with ``device``, where its worker embeds, from its health (``cpu``
    for a worker that does not say)."""
    return {**heartbeat, "device": (heartbeat.get("health") or {}).get("device") or "cpu"}


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
        self,
        store: PresenceStore,
        *,
        interval_seconds: float = HEARTBEAT_SECONDS,
        device: str = "cpu",
    ) -> None:
        self.store = store
        self.device = device
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
        ``write_fault`` (``{"job_id", "reason", "at"}`` of the last write no retry fixes)
        and ``device`` (where it embeds: ``cpu``, ``cuda``, ``cuda:N``)."""
        with self._lock:
            return self._health()

    def _health(self) -> dict[str, Any]:
        return {
            "failing_since": self._failing_since,
            "last_error": self._last_error,
            "last_ok": self._last_ok,
            "write_fault": self._write_fault,
            "device": self.device,
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
