"""A Dramatiq broker over one SQLite file in WAL mode, safe when workers die.

Every message is a row in ``messages``. A consumer *leases* rows (``state='leased'``,
``leased_until``, ``lease_owner``) in one ``BEGIN IMMEDIATE`` transaction, so two
consumers, in this process or another, never hold the same row at once. A consumer
renews the leases of the rows it holds while it runs; a row whose lease has expired
(its worker was killed, even with ``kill -9``, or hung) is leased again by the next
consumer that looks. ``ack`` deletes the row, ``nack`` moves it to ``dead_letters``.

Delayed messages follow Dramatiq's protocol: ``enqueue(message, delay=ms)`` puts them
on the delay queue ``dq_name(queue)`` with ``options["eta"]``, and the worker moves
them back to the queue when due. The ``eta`` column lets a consumer hand out a
delay-queue row only once it is due, so no row sits leased in a worker's memory for
the whole delay.

A finished job leaves no lasting copy of its messages: when an ack leaves the file with
no message at all and at least :data:`RECLAIM_MIN_PAGES` free pages, the file is
vacuumed (:meth:`SQLiteBroker.reclaim_space`) and its WAL truncated.

Consumers wait without spinning: a same-process enqueue wakes them through a
condition variable, an enqueue by another process through the doorbell
(:mod:`rifflux.queue.doorbell`, a datagram to each consuming process); besides, they
poll, with a wait that doubles from :data:`MIN_POLL_SECONDS` after a hit up to
:data:`MAX_POLL_SECONDS`, so a lost wake-up costs at most that long.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast
from uuid import uuid4

import structlog
from dramatiq.broker import Broker, Consumer, MessageProxy
from dramatiq.common import current_millis, dq_name, q_name
from dramatiq.errors import DecodeError, QueueJoinTimeout
from dramatiq.message import Message
from dramatiq.middleware import Middleware

from rifflux.queue.doorbell import Doorbell
from rifflux.store import faults
from rifflux.store.connection import connect, retry_on_busy, write_transaction

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: Seconds a consumer holds a message before another consumer may take it. A worker
#: that dies delays its messages by at most this long (its pool hands them back at once,
#: see :meth:`SQLiteBroker.release_process`); a live consumer's thread renews its leases
#: every third of it, independently of how long the task runs, so a slow batch is not
#: delivered twice. 10 s measured: kill -9 of a pool-less worker → its message moving
#: again in ≤ 11 s, with a lease renewal write per consumer every 3.3 s.
DEFAULT_LEASE_SECONDS = 10.0

#: A message whose lease expired this many times (its worker died or hung each time)
#: is moved to ``dead_letters`` instead of being delivered again. ``None`` disables it.
DEFAULT_MAX_DELIVERIES = 5

#: Seconds between polls right after a consumer found a message.
MIN_POLL_SECONDS = 0.01

#: Longest wait, in seconds, between polls of an idle queue. Enqueues wake consumers at
#: once (in this process, and through the doorbell in others); a wake-up that is lost is
#: made up for after at most this long. Idle consumers cost one indexed read per this
#: interval.
MAX_POLL_SECONDS = 1.0

#: Seconds between checks while ``join`` waits on messages processed by another process.
JOIN_POLL_SECONDS = 0.1

#: Seconds between two ``queue.write_failed`` lines of one broker: a consumer that cannot
#: write its leases retries every few seconds, and the first line says it all.
FAULT_LOG_SECONDS = 10.0

#: Free pages (4 KiB each) a file with no message left must have before its space is
#: reclaimed: below this the reclaim would cost more than the space it gives back.
RECLAIM_MIN_PAGES = 256

# Row ids per statement when many messages change at once (SQLite caps bound variables).
_ID_BATCH = 500
# Dead-letter reasons and argument summaries are cut to these lengths.
_REASON_CHARS = 2_000
_ARGS_SUMMARY_CHARS = 200

SCHEMA_SQL = (
    # ``id`` is the broker's own key: Dramatiq enqueues a retry, or a due delayed
    # message, under the same ``message_id`` before it acks the previous copy.
    # AUTOINCREMENT never reuses an id, so a stale ack cannot delete a newer row.
    """
    CREATE TABLE IF NOT EXISTS messages (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id     TEXT NOT NULL,
        queue_name     TEXT NOT NULL,
        actor_name     TEXT NOT NULL,
        state          TEXT NOT NULL CHECK (state IN ('ready', 'leased')),
        eta            REAL NOT NULL,
        leased_until   REAL,
        lease_owner    TEXT,
        delivery_count INTEGER NOT NULL DEFAULT 0,
        body           BLOB NOT NULL,
        enqueued_at    REAL NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS messages_due ON messages(queue_name, state, eta)",
    "CREATE INDEX IF NOT EXISTS messages_lease ON messages(queue_name, state, leased_until)",
    "CREATE INDEX IF NOT EXISTS messages_owner ON messages(lease_owner)",
    """
    CREATE TABLE IF NOT EXISTS dead_letters (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id TEXT NOT NULL,
        queue_name TEXT NOT NULL,
        actor_name TEXT NOT NULL,
        body       BLOB NOT NULL,
        reason     TEXT NOT NULL,
        failed_at  REAL NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS dead_letters_queue ON dead_letters(queue_name, failed_at)",
)


def _create_schema(conn: sqlite3.Connection) -> None:
    for statement in SCHEMA_SQL:
        conn.execute(statement)


def _placeholders(count: int) -> str:
    return ",".join("?" * count)


def _batches(ids: Sequence[int]) -> Iterable[Sequence[int]]:
    for start in range(0, len(ids), _ID_BATCH):
        yield ids[start : start + _ID_BATCH]


def _process_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid4().hex[:8]}"


class SQLiteBroker(Broker):
    """A Dramatiq broker storing its queues in the SQLite file at ``path``.

    Any number of processes may share the file. Each thread uses its own connection.

    Parameters:
      path: The broker database; created, with its tables, if missing.
      middleware: As for :class:`dramatiq.Broker` (default: Dramatiq's default middleware).
        Worker heartbeats are :mod:`rifflux.queue.presence`'s job.
      lease_seconds: See :data:`DEFAULT_LEASE_SECONDS`.
      max_poll_seconds: See :data:`MAX_POLL_SECONDS`.
      max_deliveries: See :data:`DEFAULT_MAX_DELIVERIES`.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        middleware: list[Middleware] | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_poll_seconds: float = MAX_POLL_SECONDS,
        max_deliveries: int | None = DEFAULT_MAX_DELIVERIES,
    ) -> None:
        if lease_seconds <= 0 or max_poll_seconds <= 0:
            raise ValueError("lease_seconds and max_poll_seconds must be positive")
        super().__init__(middleware=middleware)
        self.queues: set[str] = set()
        self.path = Path(path)
        self.lease_seconds = lease_seconds
        self.max_poll_seconds = max_poll_seconds
        self.max_deliveries = max_deliveries

        self._connections: dict[int, sqlite3.Connection] = {}
        self._connections_pid = os.getpid()
        self._connections_lock = threading.Lock()
        # Per-queue change counters: bumped on enqueue, ack, nack, requeue and flush so
        # that waiting consumers and joins in this process wake up at once.
        self._changes: defaultdict[str, int] = defaultdict(int)
        self._changed = threading.Condition()
        self._fault_logged_at = -FAULT_LOG_SECONDS
        self._doorbell = Doorbell(self.path)

        self._write(_create_schema)

    # -- connections and transactions -------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        ident = threading.get_ident()
        with self._connections_lock:
            if self._connections_pid != os.getpid():
                # A forked child must neither use nor close its parent's connections.
                self._connections = {}
                self._connections_pid = os.getpid()
            conn = self._connections.get(ident)
            if conn is None:
                live = {thread.ident for thread in threading.enumerate()}
                for dead in [i for i in self._connections if i not in live]:
                    self._connections.pop(dead).close()
                conn = self._connections[ident] = connect(self.path)
            return conn

    def _write(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``operation`` in one write transaction, retried while the file is busy.

        An error is tagged with this file (:func:`faults.tag_database`), so a write
        fault names the queue, not the index; a write fault is logged as one
        ``queue.write_failed`` line (at most every :data:`FAULT_LOG_SECONDS`), which
        the process that started a local pool reads from the pool's output.
        """
        try:
            conn = self._conn()

            def attempt() -> T:
                with write_transaction(conn):
                    return operation(conn)

            return retry_on_busy(attempt)
        except Exception as exc:
            faults.tag_database(exc, self.path)
            self._note_fault(exc)
            raise

    def _note_fault(self, exc: BaseException) -> None:
        reason = faults.exception_reason(exc, self.path)
        now = time.monotonic()
        if reason is None or now - self._fault_logged_at < FAULT_LOG_SECONDS:
            return
        self._fault_logged_at = now
        log.error("queue.write_failed", queue_db=str(self.path), reason=reason)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        try:
            conn = self._conn()
            return retry_on_busy(lambda: conn.execute(sql, params).fetchall())
        except Exception as exc:
            faults.tag_database(exc, self.path)
            raise

    def reclaim_space(self) -> int:
        """Give the file's free pages back to the file system if no message is left (the
        bodies of a finished job's messages), and truncate the WAL; returns the pages
        freed (0: messages are left, too little is free, or another process holds the
        file). A ``VACUUM``: its cost follows what is left (dead letters, heartbeats), not
        what is freed (measured: 0.2–0.3 s to give back 146 MB, 70 MB of free pages and the
        WAL; an incremental vacuum of the same pages took 2.1 s)."""
        try:
            conn = self._conn()
            if conn.execute("SELECT EXISTS (SELECT 1 FROM messages)").fetchone()[0]:
                return 0
            free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
            if free < RECLAIM_MIN_PAGES:
                return 0
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.OperationalError as exc:  # Busy or locked: the next ack tries again.
            log.debug("sqlite_broker.reclaim_skipped", error=str(exc))
            return 0
        log.info("sqlite_broker.space_reclaimed", pages=free)
        return free

    def _notify(self, *queue_names: str) -> None:
        with self._changed:
            for name in queue_names:
                self._changes[name] += 1
            self._changed.notify_all()

    def _change_marks(self, queue_names: Iterable[str]) -> dict[str, int]:
        with self._changed:
            return {name: self._changes[name] for name in queue_names}

    def _wait_for_change(self, marks: dict[str, int], seconds: float) -> None:
        """Sleep up to ``seconds``, waking early if a queue in ``marks`` changed since."""
        if seconds <= 0:
            return
        with self._changed:
            self._changed.wait_for(
                lambda: any(self._changes[name] != mark for name, mark in marks.items()),
                timeout=seconds,
            )

    # -- the Broker interface ----------------------------------------------------------

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 30000) -> Consumer:
        """A consumer leasing up to ``prefetch`` messages at a time off ``queue_name``;
        its ``__next__`` returns ``None`` after ``timeout`` ms without a message. This
        process then listens to the doorbell, so other processes' enqueues wake it."""
        self._doorbell.listen(self._notify)
        return _SQLiteConsumer(self, queue_name, prefetch, timeout)

    def declare_queue(self, queue_name: str) -> None:
        """Declare ``queue_name`` and its delay queue. Idempotent."""
        if queue_name in self.queues:
            return
        self.emit_before("declare_queue", queue_name)
        self.queues.add(queue_name)
        self.emit_after("declare_queue", queue_name)

        # Dramatiq has no ``before_declare_delay_queue`` hook, only the ``after`` one.
        delayed_name = dq_name(queue_name)
        self.delay_queues.add(delayed_name)
        self.emit_after("declare_delay_queue", delayed_name)

    def enqueue(self, message: Message, *, delay: int | None = None) -> Message:
        """Store ``message``; with ``delay`` (ms), on its delay queue with an ``eta``."""
        queue_name = message.queue_name
        if delay is not None:
            queue_name = dq_name(queue_name)
            message = message.copy(queue_name=queue_name, options={"eta": current_millis() + delay})

        self.emit_before("enqueue", message, delay)
        now = time.time()
        eta = message.options.get("eta")
        due = eta / 1000 if isinstance(eta, int | float) else now
        body = message.encode()
        self._write(
            lambda conn: conn.execute(
                "INSERT INTO messages (message_id, queue_name, actor_name, state, eta, "
                "delivery_count, body, enqueued_at) VALUES (?, ?, ?, 'ready', ?, 0, ?, ?)",
                (message.message_id, queue_name, message.actor_name, due, body, now),
            )
        )
        self._notify(queue_name)
        self._doorbell.ring(queue_name)
        self.emit_after("enqueue", message, delay)
        return message

    def get_declared_queues(self) -> set[str]:
        return self.queues.copy()

    def flush(self, queue_name: str) -> None:
        """Drop every message of ``queue_name`` and its delay queue, and its dead letters."""
        names = (queue_name, dq_name(queue_name))

        def delete(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM messages WHERE queue_name IN (?, ?)", names)
            conn.execute("DELETE FROM dead_letters WHERE queue_name = ?", (q_name(queue_name),))

        self._write(delete)
        self._notify(*names)

    def flush_all(self) -> None:
        """Flush every declared queue."""
        for queue_name in self.get_declared_queues():
            self.flush(queue_name)

    def join(self, queue_name: str, *, timeout: int | None = None) -> None:
        """Wait until ``queue_name`` and its delay queue hold no message, ready or leased.

        Raises:
          QueueJoinTimeout: If that takes longer than ``timeout`` ms.
        """
        names = (queue_name, dq_name(queue_name))
        deadline = timeout and time.monotonic() + timeout / 1000
        while True:
            marks = self._change_marks(names)
            if self._count(names) == 0:
                return
            wait = JOIN_POLL_SECONDS
            if deadline:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise QueueJoinTimeout(queue_name)
                wait = min(wait, remaining)
            self._wait_for_change(marks, wait)

    def close(self) -> None:
        """Close every connection this broker opened (later calls open new ones) and stop
        listening to the doorbell."""
        self._doorbell.close()
        with self._connections_lock:
            connections, self._connections = self._connections, {}
        if self._connections_pid == os.getpid():
            for conn in connections.values():
                conn.close()

    def release_process(self, hostname: str, pid: int) -> int:
        """Hand back at once the messages leased by a process known to be dead.

        Its pool calls this after reaping the process, so the messages are redelivered
        now instead of when their lease expires. The interrupted delivery still counts:
        a message whose workers died ``max_deliveries`` times goes to ``dead_letters``.
        Returns how many messages became ready again.
        """
        owner_prefix = f"{hostname}:{pid}:"
        max_deliveries = self.max_deliveries

        def release(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            mine = "state = 'leased' AND substr(lease_owner, 1, ?) = ?"
            params = (len(owner_prefix), owner_prefix)
            if max_deliveries is not None:
                poisoned = f"{mine} AND delivery_count >= ?"
                conn.execute(
                    "INSERT INTO dead_letters (message_id, queue_name, actor_name, body, "
                    "reason, failed_at) SELECT message_id, queue_name, actor_name, body, "
                    "'its worker died ' || delivery_count || ' times while running it', ? "
                    f"FROM messages WHERE {poisoned}",
                    (time.time(), *params, max_deliveries),
                )
                conn.execute(f"DELETE FROM messages WHERE {poisoned}", (*params, max_deliveries))
            return conn.execute(
                "UPDATE messages SET state = 'ready', leased_until = NULL, lease_owner = NULL "
                f"WHERE {mine} RETURNING queue_name",
                params,
            ).fetchall()

        rows = self._write(release)
        if rows:
            self._notify(*{row["queue_name"] for row in rows})
            log.warning("sqlite_broker.released_dead_process", pid=pid, messages=len(rows))
        return len(rows)

    # -- introspection ------------------------------------------------------------------

    def queue_depths(self) -> dict[str, int]:
        """Messages waiting or in progress per queue, delay queues included."""
        depths = dict.fromkeys(self.get_declared_queues() | self.get_declared_delay_queues(), 0)
        for row in self._read("SELECT queue_name, COUNT(*) AS n FROM messages GROUP BY queue_name"):
            depths[row["queue_name"]] = row["n"]
        return dict(sorted(depths.items()))

    def dead_letters(self, limit: int = 100) -> list[dict]:
        """The ``limit`` most recent dead letters, newest first."""
        rows = self._read(
            "SELECT message_id, queue_name, actor_name, body, reason, failed_at "
            "FROM dead_letters ORDER BY failed_at DESC, id DESC LIMIT ?",
            (limit,),
        )
        return [
            {
                "message_id": row["message_id"],
                "queue_name": row["queue_name"],
                "actor_name": row["actor_name"],
                "args": _args_summary(row["body"]),
                "reason": row["reason"],
                "failed_at": row["failed_at"],
            }
            for row in rows
        ]

    def _count(self, queue_names: Sequence[str]) -> int:
        names = _placeholders(len(queue_names))
        rows = self._read(
            f"SELECT COUNT(*) AS n FROM messages WHERE queue_name IN ({names})", queue_names
        )
        return rows[0]["n"]


def _args_summary(body: bytes) -> str:
    try:
        message = Message.decode(body)
    except DecodeError:
        return "<undecodable message body>"
    summary = f"args={list(message.args)!r} kwargs={message.kwargs!r}"
    if len(summary) > _ARGS_SUMMARY_CHARS:
        summary = summary[: _ARGS_SUMMARY_CHARS - 1] + "…"
    return summary


def _failure_reason(message: MessageProxy) -> str:
    exception = message._exception
    if exception is not None:
        reason = f"{type(exception).__name__}: {exception}"
    else:
        lines = (message.options.get("traceback") or "").strip().splitlines()
        reason = lines[-1] if lines else "rejected by the worker"
    return reason[:_REASON_CHARS]


class _SQLiteMessageProxy(MessageProxy):
    """A leased message. ``delivery_count`` is 1 on first delivery, 2 after one expired lease."""

    def __init__(self, message: Message, *, row_id: int, delivery_count: int) -> None:
        super().__init__(message)
        self.row_id = row_id
        self.delivery_count = delivery_count


def _leased(message: MessageProxy) -> _SQLiteMessageProxy:
    """``message`` as the proxy that leased it: Dramatiq's worker hands ``ack``, ``nack``
    and ``requeue`` only proxies that this consumer's ``__next__`` returned."""
    return cast(_SQLiteMessageProxy, message)


class _SQLiteConsumer(Consumer):
    """Leases messages off one queue.

    Its consumer thread calls ``__next__``; Dramatiq's worker threads call ``ack`` and
    ``nack``, so the bookkeeping below is guarded by a lock.
    """

    def __init__(self, broker: SQLiteBroker, queue_name: str, prefetch: int, timeout: int) -> None:
        self.broker = broker
        self.queue_name = queue_name
        self.prefetch = prefetch
        self.timeout = timeout
        self.owner = _process_tag()

        self._lock = threading.Lock()
        # Rows this consumer leased and has not acked, nacked or requeued.
        self._held: set[int] = set()
        # Leased messages not yet returned by ``__next__`` (a subset of ``_held``).
        self._cache: deque[_SQLiteMessageProxy] = deque()
        self._poll_seconds = MIN_POLL_SECONDS
        self._renew_at = 0.0

    def __next__(self) -> _SQLiteMessageProxy | None:
        deadline = time.monotonic() + self.timeout / 1000
        while True:
            self._renew_leases_if_due()
            with self._lock:
                if self._cache:
                    self._poll_seconds = MIN_POLL_SECONDS
                    return self._cache.popleft()
                free = self.prefetch - len(self._held)
                holding = bool(self._held)

            # Taken before looking, so a change made while we look cuts the wait short.
            marks = self.broker._change_marks([self.queue_name])
            wait = self._poll_seconds
            if free > 0:
                available_at = self._next_available_at()
                if available_at is not None and available_at <= time.time():
                    if self._lease(free):
                        continue
                elif available_at is not None:
                    wait = min(wait, available_at - time.time())
            if holding:
                wait = min(wait, self._renew_at - time.monotonic())

            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.broker._wait_for_change(marks, min(wait, remaining))
            self._poll_seconds = min(self._poll_seconds * 2, self.broker.max_poll_seconds)

    def ack(self, message: MessageProxy) -> None:
        row_id = _leased(message).row_id
        self.broker._write(
            lambda conn: conn.execute("DELETE FROM messages WHERE id = ?", (row_id,))
        )
        self._forget([row_id])
        self.broker._notify(self.queue_name)
        self.broker.reclaim_space()

    def nack(self, message: MessageProxy) -> None:
        row_id = _leased(message).row_id
        reason = _failure_reason(message)
        body = message.encode()

        def dead_letter(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM messages WHERE id = ?", (row_id,))
            conn.execute(
                "INSERT INTO dead_letters (message_id, queue_name, actor_name, body, reason, "
                "failed_at) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    message.message_id,
                    q_name(self.queue_name),
                    message.actor_name,
                    body,
                    reason,
                    time.time(),
                ),
            )

        self.broker._write(dead_letter)
        self._forget([row_id])
        self.broker._notify(self.queue_name)

    def requeue(self, messages: Iterable[MessageProxy]) -> None:
        """Make ``messages`` ready again. A requeued delivery does not count as one."""
        self._release([_leased(message).row_id for message in messages])

    def close(self) -> None:
        """Release the leased messages never handed out; the others keep their lease."""
        with self._lock:
            unused = [message.row_id for message in self._cache]
            self._cache.clear()
        self._release(unused)

    # -- leasing -----------------------------------------------------------------------

    def _next_available_at(self) -> float | None:
        """Epoch seconds when a message may next be leasable: the earliest ready ``eta``
        or the earliest expiry of another consumer's lease. ``None``: the queue is empty."""
        row = self.broker._read(
            "SELECT (SELECT MIN(eta) FROM messages WHERE queue_name = ? AND state = 'ready'), "
            "(SELECT MIN(leased_until) FROM messages WHERE queue_name = ? AND state = 'leased' "
            "AND lease_owner IS NOT ?)",
            (self.queue_name, self.queue_name, self.owner),
        )[0]
        times = [value for value in row if value is not None]
        return min(times) if times else None

    def _lease(self, limit: int) -> int:
        """Lease up to ``limit`` due messages into the cache; return how many."""
        broker = self.broker
        queue = self.queue_name
        owner = self.owner
        lease_seconds = broker.lease_seconds
        max_deliveries = broker.max_deliveries

        def lease(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            now = time.time()
            until = now + lease_seconds
            # Renew this consumer's own leases first, so none of them counts as expired.
            conn.execute(
                "UPDATE messages SET leased_until = ? WHERE lease_owner = ? AND state = 'leased'",
                (until, owner),
            )
            expired = "queue_name = ? AND state = 'leased' AND leased_until <= ?"
            if max_deliveries is not None:
                poisoned = f"{expired} AND delivery_count >= ?"
                conn.execute(
                    "INSERT INTO dead_letters (message_id, queue_name, actor_name, body, "
                    "reason, failed_at) SELECT message_id, ?, actor_name, body, "
                    "'lease expired ' || delivery_count || ' times: its worker died or hung "
                    f"each time', ? FROM messages WHERE {poisoned}",
                    (q_name(queue), now, queue, now, max_deliveries),
                )
                conn.execute(f"DELETE FROM messages WHERE {poisoned}", (queue, now, max_deliveries))
            # Redeliver expired leases first (they are the oldest), then due ready rows.
            rows = conn.execute(
                "UPDATE messages SET leased_until = ?, lease_owner = ?, "
                "delivery_count = delivery_count + 1 WHERE id IN (SELECT id FROM messages "
                f"WHERE {expired} ORDER BY leased_until LIMIT ?) "
                "RETURNING id, eta, delivery_count, body, message_id, actor_name",
                (until, owner, queue, now, limit),
            ).fetchall()
            rows += conn.execute(
                "UPDATE messages SET state = 'leased', leased_until = ?, lease_owner = ?, "
                "delivery_count = delivery_count + 1 WHERE id IN (SELECT id FROM messages "
                "WHERE queue_name = ? AND state = 'ready' AND eta <= ? ORDER BY eta, id LIMIT ?) "
                "RETURNING id, eta, delivery_count, body, message_id, actor_name",
                (until, owner, queue, now, limit - len(rows)),
            ).fetchall()
            return rows

        rows = broker._write(lease)
        self._renew_at = time.monotonic() + lease_seconds / 3
        proxies = []
        for row in sorted(rows, key=lambda r: (r["eta"], r["id"])):
            try:
                message = Message.decode(row["body"])
            except DecodeError as exc:
                self._dead_letter_undecodable(row, exc)
                continue
            if row["delivery_count"] > 1:
                log.warning(
                    "sqlite_broker.redelivery",
                    queue=queue,
                    message_id=row["message_id"],
                    delivery_count=row["delivery_count"],
                )
            proxies.append(
                _SQLiteMessageProxy(message, row_id=row["id"], delivery_count=row["delivery_count"])
            )
        with self._lock:
            self._held.update(proxy.row_id for proxy in proxies)
            self._cache.extend(proxies)
        return len(proxies)

    def _dead_letter_undecodable(self, row: sqlite3.Row, exc: DecodeError) -> None:
        log.error("sqlite_broker.undecodable", queue=self.queue_name, message_id=row["message_id"])

        def move(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM messages WHERE id = ?", (row["id"],))
            conn.execute(
                "INSERT INTO dead_letters (message_id, queue_name, actor_name, body, reason, "
                "failed_at) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    row["message_id"],
                    q_name(self.queue_name),
                    row["actor_name"],
                    row["body"],
                    f"undecodable message body: {exc.error!r}"[:_REASON_CHARS],
                    time.time(),
                ),
            )

        self.broker._write(move)

    def _renew_leases_if_due(self) -> None:
        with self._lock:
            if not self._held or time.monotonic() < self._renew_at:
                return
        until = time.time() + self.broker.lease_seconds
        self.broker._write(
            lambda conn: conn.execute(
                "UPDATE messages SET leased_until = ? WHERE lease_owner = ? AND state = 'leased'",
                (until, self.owner),
            )
        )
        self._renew_at = time.monotonic() + self.broker.lease_seconds / 3

    def _release(self, row_ids: list[int]) -> None:
        if not row_ids:
            return

        def release(conn: sqlite3.Connection) -> None:
            for batch in _batches(row_ids):
                conn.execute(
                    "UPDATE messages SET state = 'ready', leased_until = NULL, "
                    "lease_owner = NULL, delivery_count = MAX(delivery_count - 1, 0) "
                    f"WHERE state = 'leased' AND id IN ({_placeholders(len(batch))})",
                    batch,
                )

        self.broker._write(release)
        self._forget(row_ids)
        self.broker._notify(self.queue_name)

    def _forget(self, row_ids: Iterable[int]) -> None:
        with self._lock:
            self._held.difference_update(row_ids)
