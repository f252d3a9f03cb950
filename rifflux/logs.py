"""structlog configuration, done once per process, and the worker log's rotation.

Servers and workers log JSON lines; the CLI logs readable console lines. Both go to
stderr: a stdio MCP server's stdout carries protocol messages only.

Invariants:

- **No line carries content.** Queue messages hold whole file texts (a chunk message is
  ~512 KB): Dramatiq logs a failed message with ``%s`` of the message, whose ``str``
  lists its arguments, and that made lines of 1.19 MB and a ``workers.log`` of 197 MB
  in 3 minutes. :class:`RedactMessages` replaces a message (anything with an
  ``actor_name`` and a ``message_id``) in a record's arguments by
  ``actor_name[message_id]`` and any other long argument by its type and size, before
  the record is formatted; :func:`bound_values` cuts every string value of an event
  (:data:`MAX_VALUE_CHARS`), keeps the tail of a traceback
  (:data:`MAX_TRACEBACK_CHARS`) and the head of a list (:data:`MAX_LIST_ITEMS`), so no
  rendered line grows with the corpus.
- **Logging never raises.** Lines go through :class:`SafeStream`: a full disk
  (``ENOSPC``), a file size limit (``EFBIG``) or a closed pipe drops the line instead of
  raising into the code that logged it (a worker whose log call failed after its
  commit would have retried a batch that had landed).
- **The worker log is bounded.** :class:`RotatingFile` keeps ``workers.log`` under
  ``RIFFLUX_LOG_MAX_BYTES`` plus :data:`LOG_BACKUPS` older files
  (``workers.log.1`` is the newest); ``rifflux.queue.pool_output`` writes a local
  pool's output through it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import IO, Any, Literal

import structlog

MAX_VALUE_CHARS = 500
"""A longer string value of a log event is cut to this many characters."""
MAX_TRACEBACK_CHARS = 1_200
"""A traceback keeps its last this many characters (the exception and its frames)."""
MAX_LIST_ITEMS = 20
"""A longer list or tuple value keeps its first this many items."""
MAX_ARG_CHARS = 200
"""A ``%``-argument of a standard-library record (other than a string, cut like a
value, or an exception) whose ``repr`` is longer is logged as its type and size."""
LOG_BACKUPS = 3
"""Rotated copies of a worker log kept beside it: ``workers.log.1`` … ``.3``."""


class SafeStream:
    """A text stream whose write errors (disk full, broken pipe) drop the line."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.dropped = 0

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except (OSError, ValueError):  # ValueError: the stream was closed.
            self.dropped += 1
            return 0

    def flush(self) -> None:
        try:
            self.stream.flush()
        except (OSError, ValueError):
            self.dropped += 1


def _cut(text: str, limit: int, *, keep_tail: bool = False) -> str:
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep_tail:
        return f"[{cut} chars cut] …{text[-limit:]}"
    return f"{text[:limit]}… [{cut} chars cut]"


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return _cut(value, MAX_VALUE_CHARS)
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, list | tuple):
        items = [_bounded(item) for item in value[:MAX_LIST_ITEMS]]
        if len(value) > MAX_LIST_ITEMS:
            items.append(f"… {len(value) - MAX_LIST_ITEMS} more")
        return items
    if isinstance(value, dict):
        return {key: _bounded(item) for key, item in list(value.items())[:MAX_LIST_ITEMS]}
    return value


def bound_values(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: every value of the event bounded in size (see the module)."""
    for key, value in event_dict.items():
        if key == "exception" and isinstance(value, str):
            event_dict[key] = _cut(value, MAX_TRACEBACK_CHARS, keep_tail=True)
        else:
            event_dict[key] = _bounded(value)
    return event_dict


def _short_arg(arg: Any) -> Any:
    """A record argument as it may be logged: a queue message by name and id, any other
    long value by its type and size."""
    if hasattr(arg, "actor_name") and hasattr(arg, "message_id"):
        return f"{arg.actor_name}[{arg.message_id}]"
    if isinstance(arg, int | float | bool | BaseException) or arg is None:
        return arg
    if isinstance(arg, str):
        return _cut(arg, MAX_VALUE_CHARS)
    text = repr(arg)
    return arg if len(text) <= MAX_ARG_CHARS else f"<{type(arg).__name__} of {len(text)} chars>"


class RedactMessages(logging.Filter):
    """Rewrites the ``%``-arguments of standard-library records (Dramatiq's) so that a
    queue message, and with it the file text it carries, is never formatted."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_short_arg(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            if "%(" in str(record.msg):
                record.args = {key: _short_arg(arg) for key, arg in record.args.items()}
            else:  # One mapping given for a single ``%r``: logging unwrapped it.
                record.args = (_short_arg(record.args),)
        return True


def configure_logging(level: str = "INFO", *, style: Literal["json", "console"] = "json") -> None:
    """Route structlog and stdlib logging to stderr at ``level``; safe to call again."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    renderer: structlog.types.Processor
    if style == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    stream = SafeStream(sys.stderr)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            bound_values,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    # Standard-library loggers (uvicorn, the MCP SDK, dramatiq) render the same way.
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactMessages())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                bound_values,
                renderer,
            ],
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric)


class RotatingFile:
    """Appends lines to a file and rotates it past ``max_bytes``: ``path`` becomes
    ``path.1``, ``path.1`` becomes ``path.2``, …, and ``path.<backups>`` is dropped.

    A write that fails (a full disk) drops the line and closes the file; the next write
    opens it again and first notes how many lines were lost. Never raises ``OSError``.
    """

    def __init__(self, path: Path, max_bytes: int, backups: int = LOG_BACKUPS) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.dropped = 0
        self._file: IO[bytes] | None = None
        self._size = 0

    def _open(self) -> IO[bytes]:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("ab", buffering=0)
            self._size = os.fstat(self._file.fileno()).st_size
        return self._file

    def backup_path(self, n: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{n}")

    def _rotate(self) -> None:
        self.close()
        for n in range(self.backups - 1, 0, -1):
            if self.backup_path(n).exists():
                os.replace(self.backup_path(n), self.backup_path(n + 1))
        if self.backups > 0:
            os.replace(self.path, self.backup_path(1))
        else:
            self.path.unlink(missing_ok=True)

    def write(self, line: bytes) -> bool:
        """Append ``line`` (ending in a newline); False if it was dropped."""
        try:
            out = self._open()
            if self._size and self._size + len(line) > self.max_bytes:
                self._rotate()
                out = self._open()
            if self.dropped:
                note = f'{{"event": "log.lines_dropped", "lines": {self.dropped}}}\n'.encode()
                out.write(note)
                self._size += len(note)
                self.dropped = 0
            out.write(line)
            self._size += len(line)
            return True
        except OSError:
            self.dropped += 1
            self.close()
            return False

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
