"""structlog configuration, done once per process.

Servers and workers log JSON lines; the CLI logs readable console lines. Both go to
stderr: a stdio MCP server's stdout carries protocol messages only.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

_configured = False


def configure_logging(level: str = "INFO", *, style: Literal["json", "console"] = "json") -> None:
    """Route structlog and stdlib logging to stderr at ``level``. Idempotent."""
    global _configured
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if style == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    if not _configured:
        logging.basicConfig(stream=sys.stderr, level=max(numeric, logging.WARNING))
    _configured = True
