"""Dramatiq workers for Rifflux. Start them with ``rifflux worker`` or
``dramatiq workers.actors``; the broker comes from ``RIFFLUX_BROKER_URL``."""
