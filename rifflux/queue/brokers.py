"""Pick the Dramatiq broker from a URL (``RIFFLUX_BROKER_URL``).

``sqlite:///`` is followed by a file path, as in SQLAlchemy: ``sqlite:///queue.db`` is
relative to the working directory, ``sqlite:////var/lib/rifflux/queue.db`` absolute.
A query string sets :class:`SQLiteBroker` options, e.g.
``sqlite:////var/lib/rifflux/queue.db?lease_seconds=30&max_deliveries=none``.
RabbitMQ URLs go to Dramatiq's broker unchanged. Redis URLs build
:class:`rifflux.queue.redis_maintenance.RedisBroker` (Dramatiq's, with maintenance on a
clock so a dead worker's messages come back in seconds); two query options tune it,
e.g. ``redis://host:6379/0?heartbeat_timeout_ms=10000&maintenance_interval_ms=1000``
(``maintenance_interval_ms=none`` leaves Dramatiq's random maintenance alone); other
query options go to redis-py. Both brokers connect lazily, so an unreachable broker or
a wrong password shows at the first call that talks to it: :func:`is_broker_error`
recognises those failures and :func:`broker_unavailable` makes them one line (the URL's
password redacted).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import dramatiq
import dramatiq.errors

from rifflux.errors import BrokerUnavailableError, ConfigError
from rifflux.queue.sqlite_broker import SQLiteBroker

SQLITE_PREFIX = "sqlite:///"
ACCEPTED_SCHEMES = "sqlite:///PATH, redis://HOST[:PORT][/DB] or amqp://USER:PASSWORD@HOST[:PORT]/"


# Client libraries whose exceptions mean "the broker cannot be reached or refused us".
BROKER_CLIENT_MODULES = ("redis", "pika", "amqp")


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def is_broker_error(exc: BaseException) -> bool:
    """True for a connection or authentication failure of a Redis or RabbitMQ client."""
    if isinstance(exc, dramatiq.errors.BrokerConnectionError):
        return True
    return any(cls.__module__.split(".")[0] in BROKER_CLIENT_MODULES for cls in type(exc).__mro__)


def broker_unavailable(url: str, exc: BaseException) -> BrokerUnavailableError:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return BrokerUnavailableError(
        f"cannot use the broker at {redact_url(url)} ({type(exc).__name__}: {detail}); "
        "check RIFFLUX_BROKER_URL and that the broker is running"
    )


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise ValueError("expected a number > 0")
    return value


def _deliveries(raw: str) -> int | None:
    if raw.strip().lower() == "none":
        return None
    value = int(raw)
    if value < 1:
        raise ValueError("expected an integer >= 1 or 'none'")
    return value


def _milliseconds(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError("expected a whole number of milliseconds >= 1")
    return value


def _optional_milliseconds(raw: str) -> int | None:
    return None if raw.strip().lower() == "none" else _milliseconds(raw)


SQLITE_OPTIONS: dict[str, Callable[[str], Any]] = {
    "lease_seconds": _positive_float,
    "max_poll_seconds": _positive_float,
    "max_deliveries": _deliveries,
}
REDIS_OPTIONS: dict[str, Callable[[str], Any]] = {
    "heartbeat_timeout_ms": _milliseconds,
    "maintenance_interval_ms": _optional_milliseconds,
}
# A live worker renews its heartbeat every interval; a timeout of fewer intervals than
# this would declare busy-but-alive workers dead and hand their batches out twice.
MIN_INTERVALS_PER_TIMEOUT = 3


def make_broker(url: str) -> dramatiq.Broker:
    """The broker named by ``url``.

    Raises:
      ConfigError: If the scheme is not sqlite, redis(s) or amqp(s), a SQLite URL
        has no path or an unknown or invalid option, or a Redis option is invalid.
    """
    scheme = url.partition("://")[0].lower()
    if scheme == "sqlite":
        return _sqlite_broker(url)
    if scheme in {"redis", "rediss"}:
        return _redis_broker(url)
    if scheme in {"amqp", "amqps"}:
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker(url=url)
    raise ConfigError(f"broker URL {url!r} is not supported; use one of {ACCEPTED_SCHEMES}")


def _sqlite_broker(url: str) -> SQLiteBroker:
    has_prefix = url[: len(SQLITE_PREFIX)].lower() == SQLITE_PREFIX
    path, _, query = url[len(SQLITE_PREFIX) :].partition("?") if has_prefix else ("", "", "")
    if not path:
        raise ConfigError(
            f"broker URL {url!r} has no file path; write sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    options: dict[str, Any] = {}
    for name, raw in parse_qsl(query, keep_blank_values=True):
        parse = SQLITE_OPTIONS.get(name)
        if parse is None:
            raise ConfigError(
                f"broker URL {url!r} has unknown option {name!r}; "
                f"SQLite broker options are {', '.join(SQLITE_OPTIONS)}"
            )
        try:
            options[name] = parse(raw)
        except ValueError as exc:
            raise ConfigError(f"broker URL {url!r}: {name}={raw!r} is invalid: {exc}") from None
    return SQLiteBroker(path, **options)


def _redacted(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (errors end up in logs)."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()


def _redis_broker(url: str) -> dramatiq.Broker:
    from rifflux.queue.redis_maintenance import (
        HEARTBEAT_TIMEOUT_MS,
        MAINTENANCE_INTERVAL_MS,
        RedisBroker,
    )

    base, _, query = url.partition("?")
    options: dict[str, Any] = {
        "heartbeat_timeout_ms": HEARTBEAT_TIMEOUT_MS,
        "maintenance_interval_ms": MAINTENANCE_INTERVAL_MS,
    }
    passthrough: list[tuple[str, str]] = []
    for name, raw in parse_qsl(query, keep_blank_values=True):
        parse = REDIS_OPTIONS.get(name)
        if parse is None:
            passthrough.append((name, raw))
            continue
        try:
            options[name] = parse(raw)
        except ValueError as exc:
            shown = _redacted(url)
            raise ConfigError(f"broker URL {shown!r}: {name}={raw!r} is invalid: {exc}") from None
    timeout, interval = options["heartbeat_timeout_ms"], options["maintenance_interval_ms"]
    if interval is not None and timeout < MIN_INTERVALS_PER_TIMEOUT * interval:
        raise ConfigError(
            f"broker URL {_redacted(url)!r}: heartbeat_timeout_ms={timeout} must be at least "
            f"{MIN_INTERVALS_PER_TIMEOUT} x maintenance_interval_ms={interval}"
        )
    redis_url = f"{base}?{urlencode(passthrough)}" if passthrough else base
    return RedisBroker(url=redis_url, heartbeat_timeout=timeout, maintenance_interval_ms=interval)
