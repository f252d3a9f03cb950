"""Redis URL options: recovery timing is set in the URL, bad values are one-line errors."""

from __future__ import annotations

import pytest
from dramatiq.brokers.redis import DEFAULT_HEARTBEAT_TIMEOUT

from rifflux.errors import ConfigError
from rifflux.queue.brokers import make_broker
from rifflux.queue.redis_maintenance import (
    HEARTBEAT_TIMEOUT_MS,
    MAINTENANCE_INTERVAL_MS,
    RedisBroker,
)

# Nothing listens on port 1: building a broker must not connect.
BASE = "redis://127.0.0.1:1/3"


def test_redis_url_without_options_recovers_in_seconds_not_minutes() -> None:
    broker = make_broker(BASE)
    assert isinstance(broker, RedisBroker)
    assert broker.heartbeat_timeout == HEARTBEAT_TIMEOUT_MS < DEFAULT_HEARTBEAT_TIMEOUT
    assert broker.maintenance_interval_ms == MAINTENANCE_INTERVAL_MS


def test_redis_url_options_set_heartbeat_timeout_and_interval() -> None:
    broker = make_broker(f"{BASE}?heartbeat_timeout_ms=3000&maintenance_interval_ms=500")
    assert isinstance(broker, RedisBroker)
    assert (broker.heartbeat_timeout, broker.maintenance_interval_ms) == (3000, 500)


def test_maintenance_interval_none_keeps_dramatiqs_random_maintenance() -> None:
    broker = make_broker(f"{BASE}?maintenance_interval_ms=none&heartbeat_timeout_ms=60000")
    assert isinstance(broker, RedisBroker)
    assert broker.maintenance_interval_ms is None
    assert broker.heartbeat_timeout == 60000


def test_other_query_options_reach_redis_py() -> None:
    broker = make_broker(f"{BASE}?socket_timeout=7&heartbeat_timeout_ms=9000")
    assert isinstance(broker, RedisBroker)
    kwargs = broker.client.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["db"], kwargs["port"]) == (7.0, 3, 1)
    assert broker.heartbeat_timeout == 9000


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("heartbeat_timeout_ms=soon", r"heartbeat_timeout_ms='soon' is invalid"),
        ("heartbeat_timeout_ms=0", r"heartbeat_timeout_ms='0' is invalid: expected a whole"),
        ("maintenance_interval_ms=-5", r"maintenance_interval_ms='-5' is invalid"),
        (
            "heartbeat_timeout_ms=2000&maintenance_interval_ms=1000",
            r"heartbeat_timeout_ms=2000 must be at least 3 x maintenance_interval_ms=1000",
        ),
    ],
)
def test_bad_redis_option_is_a_one_line_config_error(query: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        make_broker(f"{BASE}?{query}")
    assert "\n" not in str(caught.value)


def test_a_password_in_a_bad_redis_url_is_not_repeated_in_the_error() -> None:
    with pytest.raises(ConfigError, match="heartbeat_timeout_ms='x'") as caught:
        make_broker("redis://:hunter2@127.0.0.1:1/0?heartbeat_timeout_ms=x")
    assert "hunter2" not in str(caught.value) and ":***@" in str(caught.value)
