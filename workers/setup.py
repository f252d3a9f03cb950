"""Build the process-wide Dramatiq broker from the environment, before actors declare."""

from __future__ import annotations

import dramatiq
from dramatiq.middleware import CurrentMessage

from rifflux.config import Settings
from rifflux.logs import configure_logging
from rifflux.queue.brokers import make_broker
from rifflux.queue.presence import PresenceMiddleware, presence_store_for
from rifflux.queue.sqlite_broker import SQLiteBroker

settings = Settings.from_env()
configure_logging(settings.log_level, style="json")

broker = make_broker(settings.resolved_broker_url)
if not any(isinstance(m, CurrentMessage) for m in broker.middleware):
    broker.add_middleware(CurrentMessage())
if not any(isinstance(m, PresenceMiddleware) for m in broker.middleware):
    broker.add_middleware(PresenceMiddleware(presence_store_for(broker, settings)))
if not isinstance(broker, SQLiteBroker):
    # Imported only here: the redis client is a tenth of a second of every worker's boot.
    from rifflux.queue.redis_maintenance import RedisBroker, RedisMaintenance

    if isinstance(broker, RedisBroker):
        broker.add_middleware(RedisMaintenance(settings.db_path))
dramatiq.set_broker(broker)
