"""The worker process's settings and its process-wide Dramatiq broker, set up once
before the actors declare themselves.

This is an edge of the process: :func:`configure` is the one place a worker reads
``RIFFLUX_*`` (when the caller passes no settings: ``dramatiq workers.actors`` imports
the actors module first). Everything below gets the settings passed down, and a job's
row-shaping settings come from its :class:`~rifflux.index.jobspec.JobSpec`, not from
these.
"""

from __future__ import annotations

import dramatiq
from dramatiq.middleware import CurrentMessage

from rifflux.config import Settings
from rifflux.logs import configure_logging
from rifflux.queue.brokers import make_broker
from rifflux.queue.presence import PresenceMiddleware, presence_store_for
from rifflux.queue.sqlite_broker import SQLiteBroker

_configured: Settings | None = None


def configure(settings: Settings | None = None) -> Settings:
    """Set up logging and the broker for this worker process, once; returns its settings.

    ``settings``: None reads the environment (the worker process's start).
    """
    global _configured
    if _configured is not None:
        return _configured
    resolved = Settings.from_env() if settings is None else settings
    configure_logging(resolved.log_level, style="json")
    dramatiq.set_broker(_broker_for(resolved))
    _configured = resolved
    return resolved


def _broker_for(settings: Settings) -> dramatiq.Broker:
    broker = make_broker(settings.resolved_broker_url)
    if not any(isinstance(m, CurrentMessage) for m in broker.middleware):
        broker.add_middleware(CurrentMessage())
    if not any(isinstance(m, PresenceMiddleware) for m in broker.middleware):
        store = presence_store_for(broker, settings)
        broker.add_middleware(PresenceMiddleware(store, device=settings.embedding_device))
    if not isinstance(broker, SQLiteBroker):
        # Imported only here: the redis client is a tenth of a second of every worker's boot.
        from rifflux.queue.redis_maintenance import RedisBroker, RedisMaintenance

        if isinstance(broker, RedisBroker):
            broker.add_middleware(RedisMaintenance(settings.db_path))
    return broker
