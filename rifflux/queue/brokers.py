"""Pick the Dramatiq broker from a URL (``RIFFLUX_BROKER_URL``).

``sqlite:///`` is followed by a file path, as in SQLAlchemy: ``sqlite:///queue.db`` is
relative to the working directory, ``sqlite:////var/lib/rifflux/queue.db`` absolute.
Redis and RabbitMQ URLs go to Dramatiq's own brokers unchanged; they connect lazily.
"""

from __future__ import annotations

import dramatiq

from rifflux.errors import ConfigError
from rifflux.queue.sqlite_broker import SQLiteBroker

SQLITE_PREFIX = "sqlite:///"
ACCEPTED_SCHEMES = "sqlite:///PATH, redis://HOST[:PORT][/DB] or amqp://USER:PASSWORD@HOST[:PORT]/"


def make_broker(url: str) -> dramatiq.Broker:
    """The broker named by ``url``.

    Raises:
      ConfigError: If the scheme is not sqlite, redis(s) or amqp(s), or the path is empty.
    """
    scheme = url.partition("://")[0].lower()
    if scheme == "sqlite":
        has_prefix = url[: len(SQLITE_PREFIX)].lower() == SQLITE_PREFIX
        path = url[len(SQLITE_PREFIX) :] if has_prefix else ""
        if not path:
            raise ConfigError(
                f"broker URL {url!r} has no file path; write sqlite:///relative/path.db "
                "or sqlite:////absolute/path.db"
            )
        return SQLiteBroker(path)
    if scheme in {"redis", "rediss"}:
        from dramatiq.brokers.redis import RedisBroker

        return RedisBroker(url=url)
    if scheme in {"amqp", "amqps"}:
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker(url=url)
    raise ConfigError(f"broker URL {url!r} is not supported; use one of {ACCEPTED_SCHEMES}")
