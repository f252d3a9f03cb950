"""make_broker picks SQLite, Redis or RabbitMQ from a URL; the last two round-trip an actor."""

from __future__ import annotations

import threading
from pathlib import Path
from uuid import uuid4

import dramatiq
import pytest
from dramatiq import Worker
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import dq_name, xq_name

from rifflux.config import Settings
from rifflux.errors import ConfigError
from rifflux.queue.brokers import make_broker
from rifflux.queue.sqlite_broker import SQLiteBroker

REDIS_URL = "redis://127.0.0.1:6379/0"
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"


def test_sqlite_url_with_absolute_path(tmp_path: Path) -> None:
    broker = make_broker(f"sqlite:///{tmp_path / 'queue.db'}")

    assert isinstance(broker, SQLiteBroker)
    assert broker.path == tmp_path / "queue.db"
    assert broker.path.exists()
    broker.close()


def test_sqlite_url_with_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    broker = make_broker("sqlite:///state/queue.db")

    assert isinstance(broker, SQLiteBroker)
    assert (tmp_path / "state" / "queue.db").exists()
    broker.close()


def test_default_broker_url_is_a_sqlite_file_next_to_the_index(tmp_path: Path) -> None:
    url = Settings(db_path=tmp_path / "index.db").resolved_broker_url
    broker = make_broker(url)

    assert isinstance(broker, SQLiteBroker)
    assert broker.path == tmp_path / "queue.db"
    broker.close()


def test_sqlite_url_query_sets_broker_options(tmp_path: Path) -> None:
    query = "lease_seconds=3&max_poll_seconds=0.5&max_deliveries=none"
    broker = make_broker(f"sqlite:///{tmp_path / 'queue.db'}?{query}")

    assert isinstance(broker, SQLiteBroker)
    assert broker.path == tmp_path / "queue.db"
    assert (broker.lease_seconds, broker.max_poll_seconds, broker.max_deliveries) == (3, 0.5, None)
    broker.close()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("lease=3", "unknown option 'lease'; SQLite broker options are lease_seconds"),
        ("lease_seconds=0", "lease_seconds='0' is invalid: expected a number > 0"),
        ("max_deliveries=many", "max_deliveries='many' is invalid"),
    ],
)
def test_sqlite_url_with_bad_option_is_rejected(tmp_path: Path, query: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_broker(f"sqlite:///{tmp_path / 'queue.db'}?{query}")


@pytest.mark.parametrize("url", ["sqlite:///", "sqlite://queue.db", "SQLITE:///", "sqlite:///?a=1"])
def test_sqlite_url_without_path_is_rejected(url: str) -> None:
    with pytest.raises(ConfigError, match="no file path"):
        make_broker(url)


@pytest.mark.parametrize("url", ["postgres://localhost/db", "queue.db", "", "http://x"])
def test_unknown_scheme_names_the_accepted_ones(url: str) -> None:
    with pytest.raises(ConfigError, match=r"sqlite:///.*redis://.*amqp://"):
        make_broker(url)


def test_redis_and_amqp_urls_build_dramatiq_brokers_without_connecting() -> None:
    # Nothing listens on port 1: building the brokers must not try to connect.
    assert isinstance(make_broker("redis://127.0.0.1:1/0"), RedisBroker)
    assert isinstance(make_broker("amqp://guest:guest@127.0.0.1:1/"), RabbitmqBroker)


def _round_trip(broker: dramatiq.Broker, queue: str) -> list[str]:
    """Send one message through a real Worker on ``broker``; return what the actor saw."""
    dramatiq.set_broker(broker)
    seen: list[str] = []
    done = threading.Event()

    def echo(value: str) -> None:
        seen.append(value)
        done.set()

    actor = dramatiq.actor(echo, broker=broker, actor_name=f"echo_{queue}", queue_name=queue)
    worker = Worker(broker, worker_threads=2, worker_timeout=100)
    worker.start()
    try:
        actor.send("hello")
        assert done.wait(timeout=15), "the actor did not run"
        broker.join(queue, timeout=15_000)
    finally:
        worker.stop()
        broker.flush(queue)
    return seen


@pytest.mark.redis
def test_redis_url_round_trips_an_actor() -> None:
    broker = make_broker(REDIS_URL)
    assert isinstance(broker, RedisBroker)
    try:
        assert _round_trip(broker, f"rifflux_test_{uuid4().hex[:12]}") == ["hello"]
    finally:
        broker.close()


@pytest.mark.rabbitmq
def test_rabbitmq_url_round_trips_an_actor() -> None:
    broker = make_broker(RABBITMQ_URL)
    assert isinstance(broker, RabbitmqBroker)
    queue = f"rifflux_test_{uuid4().hex[:12]}"
    try:
        assert _round_trip(broker, queue) == ["hello"]
        for name in (queue, dq_name(queue), xq_name(queue)):
            broker.channel.queue_delete(name)
    finally:
        broker.close()
