"""SQLiteBroker on real SQLite files, with real Dramatiq workers and real processes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import dramatiq
import pytest
from dramatiq import Worker
from dramatiq.errors import QueueJoinTimeout
from dramatiq.message import Message
from rifflux_testing import wait_until

from rifflux.queue.sqlite_broker import SQLiteBroker
from rifflux.store.connection import connect

QUEUE = "jobs"


@pytest.fixture
def broker(tmp_path: Path):
    broker = SQLiteBroker(tmp_path / "queue.db")
    dramatiq.set_broker(broker)
    yield broker
    broker.close()


@pytest.fixture
def worker(broker: SQLiteBroker):
    worker = Worker(broker, worker_threads=2, worker_timeout=100)
    worker.start()
    yield worker
    worker.stop()


def _message(value: object, queue: str = QUEUE) -> Message:
    return Message(queue_name=queue, actor_name="noop", args=(value,), kwargs={}, options={})


def _run_python(script: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_worker_runs_enqueued_messages(broker: SQLiteBroker, worker: Worker) -> None:
    seen: list[int] = []

    @dramatiq.actor(broker=broker)
    def record(value: int) -> None:
        seen.append(value)

    for value in range(10):
        record.send(value)
    broker.join("default", timeout=10_000)

    assert sorted(seen) == list(range(10))
    assert broker.queue_depths() == {"default": 0, "default.DQ": 0}


def test_delayed_message_runs_after_its_delay(broker: SQLiteBroker, worker: Worker) -> None:
    ran_at: list[float] = []

    @dramatiq.actor(broker=broker)
    def stamp() -> None:
        ran_at.append(time.time())

    sent_at = time.time()
    message = stamp.send_with_options(delay=300)
    assert message.queue_name == "default.DQ"
    assert broker.queue_depths()["default.DQ"] == 1
    broker.join("default", timeout=10_000)

    assert len(ran_at) == 1
    assert ran_at[0] - sent_at >= 0.3


def test_failing_actor_is_retried_through_the_delay_queue(
    broker: SQLiteBroker, worker: Worker
) -> None:
    attempts: list[float] = []

    @dramatiq.actor(broker=broker, max_retries=3, min_backoff=10, max_backoff=50)
    def flaky() -> None:
        attempts.append(time.time())
        if len(attempts) < 3:
            raise RuntimeError("not yet")

    flaky.send()
    broker.join("default", timeout=10_000)

    assert len(attempts) == 3
    assert broker.dead_letters() == []


def test_actor_out_of_retries_ends_in_dead_letters(broker: SQLiteBroker, worker: Worker) -> None:
    @dramatiq.actor(broker=broker, max_retries=1, min_backoff=10, max_backoff=20)
    def doomed(path: str) -> None:
        raise ValueError(f"cannot read {path}")

    message = doomed.send("notes/a.md")
    broker.join("default", timeout=10_000)

    [letter] = broker.dead_letters()
    assert letter["message_id"] == message.message_id
    assert letter["queue_name"] == "default"
    assert letter["actor_name"] == "doomed"
    assert letter["reason"] == "ValueError: cannot read notes/a.md"
    assert "notes/a.md" in letter["args"]
    assert broker.queue_depths() == {"default": 0, "default.DQ": 0}


def test_long_task_keeps_renewing_its_lease_and_runs_once(tmp_path: Path) -> None:
    """The task runs until its lease has been renewed past two lease lengths, then has a
    second consumer poll the queue: that consumer gets nothing, and the task ran once.

    The task waits on what the table shows, not on a clock, so a renewal that comes late
    only makes it wait longer: the second consumer polls right after the task has seen a
    lease with more than half its length left, whatever the load.
    """
    lease = 2.0
    broker = SQLiteBroker(tmp_path / "queue.db", lease_seconds=lease)
    dramatiq.set_broker(broker)
    runs: list[float] = []
    seen: dict[str, object] = {}

    def leased_until(conn: sqlite3.Connection) -> float:
        row = conn.execute("SELECT leased_until FROM messages WHERE state = 'leased'").fetchone()
        return row[0]

    @dramatiq.actor(broker=broker, max_retries=0)
    def slow() -> None:
        runs.append(time.time())
        conn = connect(broker.path)
        try:
            first_expiry = leased_until(conn)
            try:
                wait_until(
                    lambda: (
                        time.time() > first_expiry + lease
                        and leased_until(conn) - time.time() > lease / 2
                    ),
                    interval=0.02,
                )
            except AssertionError:
                seen["renewed"] = False
                return
            seen["renewed"] = True
            competitor = broker.consume("default", timeout=0)
            seen["competitor_got"] = next(competitor)
            competitor.close()
        finally:
            conn.close()

    worker = Worker(broker, worker_threads=2, worker_timeout=100)
    worker.start()
    try:
        slow.send()
        broker.join("default", timeout=120_000)
    finally:
        worker.stop()
        broker.close()
    assert seen == {"renewed": True, "competitor_got": None}
    assert len(runs) == 1


def test_join_returns_once_work_is_done(broker: SQLiteBroker, worker: Worker) -> None:
    done: list[str] = []

    @dramatiq.actor(broker=broker)
    def slow() -> None:
        time.sleep(0.3)
        done.append("yes")

    slow.send()
    broker.join("default", timeout=10_000)
    assert done == ["yes"]


def test_join_times_out_when_nobody_consumes(broker: SQLiteBroker) -> None:
    broker.declare_queue(QUEUE)
    broker.enqueue(_message(1))

    started = time.monotonic()
    with pytest.raises(QueueJoinTimeout):
        broker.join(QUEUE, timeout=200)
    # Not before its timeout (a lower bound holds under any load).
    assert time.monotonic() - started >= 0.2


def test_join_on_empty_queue_returns_without_waiting_for_its_timeout(
    broker: SQLiteBroker,
) -> None:
    broker.declare_queue(QUEUE)
    returned = threading.Event()
    joiner = threading.Thread(
        target=lambda: (broker.join(QUEUE, timeout=3_600_000), returned.set()), daemon=True
    )
    joiner.start()
    # An hour's timeout: returning at all shows it did not wait for it.
    assert returned.wait(timeout=60)


def test_flush_drops_queue_delay_queue_and_dead_letters(broker: SQLiteBroker) -> None:
    broker.declare_queue(QUEUE)
    broker.declare_queue("other")
    broker.enqueue(_message(1))
    broker.enqueue(_message(2))
    broker.enqueue(_message(3), delay=60_000)
    broker.enqueue(_message(4, queue="other"))
    consumer = broker.consume(QUEUE, timeout=100)
    consumer.nack(next(consumer))
    assert len(broker.dead_letters()) == 1

    broker.flush(QUEUE)

    assert broker.queue_depths() == {"jobs": 0, "jobs.DQ": 0, "other": 1, "other.DQ": 0}
    assert broker.dead_letters() == []
    broker.flush_all()
    assert set(broker.queue_depths().values()) == {0}


def test_consumer_holds_at_most_prefetch_messages(broker: SQLiteBroker) -> None:
    broker.declare_queue(QUEUE)
    for value in range(3):
        broker.enqueue(_message(value))
    consumer = broker.consume(QUEUE, prefetch=2, timeout=100)

    first, second = next(consumer), next(consumer)
    assert [first.args, second.args] == [(0,), (1,)]
    assert next(consumer) is None

    consumer.ack(first)
    third = next(consumer)
    assert third.args == (2,)


def test_requeued_messages_are_delivered_again(broker: SQLiteBroker) -> None:
    broker.declare_queue(QUEUE)
    for value in range(2):
        broker.enqueue(_message(value))
    consumer = broker.consume(QUEUE, prefetch=2, timeout=100)
    held = [next(consumer), next(consumer)]

    consumer.requeue(held)

    other = broker.consume(QUEUE, prefetch=2, timeout=100)
    again = [next(other), next(other)]
    assert [m.message_id for m in again] == [m.message_id for m in held]
    assert [m.delivery_count for m in again] == [1, 1]


def test_closing_a_consumer_releases_messages_it_never_handed_out(broker: SQLiteBroker) -> None:
    broker.declare_queue(QUEUE)
    for value in range(3):
        broker.enqueue(_message(value))
    consumer = broker.consume(QUEUE, prefetch=3, timeout=100)
    in_progress = next(consumer)

    consumer.close()

    other = broker.consume(QUEUE, prefetch=3, timeout=100)
    assert [next(other).args, next(other).args, next(other)] == [(1,), (2,), None]
    consumer.ack(in_progress)
    assert broker.queue_depths()["jobs"] == 2


def test_unacked_message_is_redelivered_after_its_lease_expires(tmp_path: Path) -> None:
    broker = SQLiteBroker(tmp_path / "queue.db", lease_seconds=3.0)
    broker.declare_queue(QUEUE)
    sent = broker.enqueue(_message("x"))
    holder = broker.consume(QUEUE, timeout=100)
    taken = next(holder)
    assert taken.delivery_count == 1

    other = broker.consume(QUEUE, timeout=100)
    assert next(other) is None  # Leased for 3 s: not handed out again meanwhile.
    again = wait_until(lambda: next(other))

    assert again.message_id == sent.message_id
    assert again.delivery_count == 2
    broker.close()


def test_message_whose_lease_keeps_expiring_goes_to_dead_letters(tmp_path: Path) -> None:
    broker = SQLiteBroker(tmp_path / "queue.db", lease_seconds=0.2, max_deliveries=2)
    broker.declare_queue(QUEUE)
    broker.enqueue(_message("poison"))

    for expected_count in (1, 2):
        consumer = broker.consume(QUEUE, timeout=100)
        assert next(consumer).delivery_count == expected_count
        time.sleep(0.25)

    assert next(broker.consume(QUEUE, timeout=100)) is None
    [letter] = broker.dead_letters()
    assert letter["reason"].startswith("lease expired 2 times")
    assert broker.queue_depths()["jobs"] == 0
    broker.close()


def test_a_dead_process_leases_are_handed_back_at_once(tmp_path: Path) -> None:
    # A lease far longer than the test: only release_process can make it leasable.
    broker = SQLiteBroker(tmp_path / "queue.db", lease_seconds=3600, max_deliveries=2)
    broker.declare_queue(QUEUE)
    sent = broker.enqueue(_message("x"))
    holder = broker.consume(QUEUE, timeout=100)
    assert next(holder).message_id == sent.message_id
    other = broker.consume(QUEUE, timeout=100)
    assert next(other) is None

    hostname, pid = holder.owner.split(":")[:2]
    assert broker.release_process(hostname, int(pid) + 1) == 0
    assert broker.release_process(hostname, int(pid)) == 1
    again = next(other)
    assert again.message_id == sent.message_id and again.delivery_count == 2

    # The second worker "dies" too: two deliveries used up, the message is dead-lettered.
    assert broker.release_process(hostname, int(pid)) == 0
    assert next(broker.consume(QUEUE, timeout=100)) is None
    [letter] = broker.dead_letters()
    assert letter["reason"] == "its worker died 2 times while running it"
    broker.close()


def test_undecodable_row_goes_to_dead_letters(broker: SQLiteBroker) -> None:
    broker.declare_queue(QUEUE)
    conn = connect(broker.path)
    conn.execute(
        "INSERT INTO messages (message_id, queue_name, actor_name, state, eta, body, "
        "enqueued_at) VALUES ('bad', ?, 'noop', 'ready', 0, x'00ff', 0)",
        (QUEUE,),
    )
    conn.close()
    broker.enqueue(_message("good"))

    consumer = broker.consume(QUEUE, prefetch=2, timeout=100)

    assert next(consumer).args == ("good",)
    [letter] = broker.dead_letters()
    assert letter["message_id"] == "bad"
    assert letter["reason"].startswith("undecodable message body")


def waiting_for_a_change(thread: threading.Thread) -> bool:
    """Whether ``thread`` is inside ``SQLiteBroker._wait_for_change`` (its idle wait)."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == "_wait_for_change":
            return True
        frame = frame.f_back
    return False


def test_enqueue_in_same_process_wakes_an_idle_consumer_at_once(tmp_path: Path) -> None:
    # A consumer idle for so long that its next poll is an hour away: only the wake-up
    # of an enqueue can hand it the message within the test.
    broker = SQLiteBroker(tmp_path / "queue.db", max_poll_seconds=3_600)
    broker.declare_queue(QUEUE)
    consumer = broker.consume(QUEUE, timeout=7_200_000)
    consumer._poll_seconds = broker.max_poll_seconds
    received: list[object] = []
    waiter = threading.Thread(target=lambda: received.append(next(consumer)), daemon=True)
    waiter.start()
    wait_until(lambda: waiting_for_a_change(waiter))  # Enqueued once it waits, not before.

    broker.enqueue(_message("wake"))
    waiter.join(timeout=60)

    assert [message.args for message in received] == [("wake",)]  # type: ignore[attr-defined]
    broker.close()


def test_another_process_enqueue_is_seen_within_the_poll_interval(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    broker = SQLiteBroker(path, max_poll_seconds=0.2)
    broker.declare_queue(QUEUE)
    consumer = broker.consume(QUEUE, timeout=10_000)
    script = (
        "import sys\n"
        "from dramatiq.message import Message\n"
        "from rifflux.queue.sqlite_broker import SQLiteBroker\n"
        "SQLiteBroker(sys.argv[1]).enqueue(Message(queue_name='jobs', actor_name='noop', "
        "args=('remote',), kwargs={}, options={}))\n"
    )
    producer = subprocess.Popen([sys.executable, "-c", script, str(path)])
    message = next(consumer)
    assert producer.wait(timeout=30) == 0
    assert message.args == ("remote",)
    broker.close()


KILLED_CONSUMER = """
import os, signal, sys
from rifflux.queue.sqlite_broker import SQLiteBroker

broker = SQLiteBroker(sys.argv[1], lease_seconds=2.0)
message = next(broker.consume("jobs", timeout=10_000))
print(message.message_id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_message_of_a_killed_worker_is_redelivered_after_its_lease(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    broker = SQLiteBroker(path)
    broker.declare_queue(QUEUE)
    sent = broker.enqueue(_message("survives kill -9"))

    result = _run_python(KILLED_CONSUMER, str(path))

    assert result.returncode == -9, result.stderr
    assert result.stdout.strip() == sent.message_id
    consumer = broker.consume(QUEUE, timeout=100)
    assert next(consumer) is None  # the dead process's lease still holds
    consumer.timeout = 5_000
    again = next(consumer)
    assert again.message_id == sent.message_id
    assert again.delivery_count == 2
    consumer.ack(again)
    assert broker.queue_depths()["jobs"] == 0
    broker.close()


RACING_CONSUMER = """
import sys, time
from pathlib import Path
from rifflux.queue.sqlite_broker import SQLiteBroker

path, ready, go, out, first, other_first = sys.argv[1:]
broker = SQLiteBroker(path)
consumer = broker.consume("jobs", prefetch=4, timeout=200)
Path(ready).touch()
while not Path(go).exists():
    time.sleep(0.005)
ids = []
for message in consumer:
    if message is None:
        if broker.queue_depths().get("jobs", 0) == 0:
            break
        continue
    ids.append(message.message_id)
    time.sleep(0.002)  # some work, so that neither process hogs the write lock
    consumer.ack(message)
    if len(ids) == 1:
        # Both race only once both have a message: else one process may take them all
        # while the other is not yet scheduled.
        Path(first).touch()
        deadline = time.monotonic() + 60
        while not Path(other_first).exists():
            assert time.monotonic() < deadline, "the other consumer took no message"
            time.sleep(0.005)
Path(out).write_text("\\n".join(ids))
"""


def test_two_processes_never_get_the_same_message(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    broker = SQLiteBroker(path)
    broker.declare_queue(QUEUE)
    sent = {broker.enqueue(_message(value)).message_id for value in range(200)}
    names = ("a", "b")
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RACING_CONSUMER, str(path)]
            + [str(tmp_path / f"{name}.{suffix}") for suffix in ("ready", "go", "ids", "first")]
            + [str(tmp_path / f"{other}.first")]
        )
        for name, other in zip(names, reversed(names), strict=True)
    ]
    # Both wait on their own "go" file; create them together once both are ready.
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"{name}.ready").exists() for name in names):
        assert time.monotonic() < deadline, "consumers did not start"
        time.sleep(0.01)
    for name in names:
        (tmp_path / f"{name}.go").touch()
    assert [process.wait(timeout=60) for process in processes] == [0, 0]

    got = [(tmp_path / f"{name}.ids").read_text().split() for name in names]
    assert all(got), "both processes should have consumed some messages"
    assert len(got[0]) == len(set(got[0])) and len(got[1]) == len(set(got[1]))
    assert set(got[0]).isdisjoint(got[1])
    assert set(got[0]) | set(got[1]) == sent
    broker.close()


def test_queue_depths_count_ready_leased_and_delayed_across_processes(
    broker: SQLiteBroker,
) -> None:
    broker.declare_queue(QUEUE)
    broker.enqueue(_message(1))
    broker.enqueue(_message(2))
    broker.enqueue(_message(3), delay=60_000)
    next(broker.consume(QUEUE, timeout=100))
    elsewhere = SQLiteBroker(broker.path)
    elsewhere.enqueue(_message(4, queue="undeclared-here"))
    elsewhere.close()

    assert broker.queue_depths() == {"jobs": 2, "jobs.DQ": 1, "undeclared-here": 1}


def test_the_file_gives_its_space_back_once_no_message_is_left(broker: SQLiteBroker) -> None:
    broker.declare_queue(QUEUE)
    body = "x" * 20_000
    for value in range(200):
        broker.enqueue(_message(f"{value}:{body}"))
    consumer = broker.consume(QUEUE, prefetch=200, timeout=100)
    held = [next(consumer) for _ in range(200)]
    connect(broker.path).execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    full = broker.path.stat().st_size
    assert full > 200 * 20_000
    for message in held[:-1]:
        consumer.ack(message)
    # A message is left: the space stays for the queue's next messages.
    assert broker.path.stat().st_size == full
    consumer.ack(held[-1])
    wal = broker.path.with_name(broker.path.name + "-wal")
    left = broker.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    assert left < full / 20
    # And again for the next job's messages.
    for value in range(200):
        broker.enqueue(_message(f"{value}:{body}"))
    for _ in range(200):
        consumer.ack(next(consumer))
    assert broker.path.stat().st_size < full / 20
