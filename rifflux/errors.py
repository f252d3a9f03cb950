"""Errors that reach a user. Each message says what was wrong and what to do."""

from __future__ import annotations

import errno


class RiffluxError(Exception):
    """Base class: an error whose message is fit to show a user as one line."""


class ConfigError(RiffluxError):
    """A ``RIFFLUX_*`` setting has a value that cannot be used."""


class SchemaVersionError(RiffluxError):
    """The database was written by another schema version."""


class EmbeddingModelMismatch(RiffluxError):
    """The index was embedded with another model than the one configured now."""


class RootNotFoundError(RiffluxError):
    """A path given to index does not exist."""


class NotFoundError(RiffluxError):
    """A chunk or file asked for is not in the index."""


class InvalidQueryError(RiffluxError, ValueError):
    """A search argument is out of its allowed range."""


class IndexMissingError(NotFoundError):
    """A read found no index database: reads never create one."""


class NotAnIndexError(RiffluxError):
    """The database named is not a Rifflux index (another file or application's DB)."""


class IndexDamagedError(RiffluxError):
    """SQLite reported the index database malformed or not a database at all."""


class PathNotAllowedError(RiffluxError):
    """A path lies outside the server's allowed roots (``RIFFLUX_ALLOWED_ROOTS``)."""


class NoAllowedRootsError(PathNotAllowedError):
    """The server has no allowed root: none configured, and its working directory is
    ``/``, a home directory or a parent of one (no default root there)."""


class SecretPathError(PathNotAllowedError):
    """A path is on the built-in deny list (``RIFFLUX_ALLOW_SECRET_PATHS`` is off)."""


class BrokerUnavailableError(RiffluxError):
    """The message broker could not be reached or refused the connection."""


class MessageVersionError(RiffluxError):
    """A queue message of another kind or Rifflux version than this worker reads."""


class IndexWriteError(RiffluxError):
    """A write no retry can fix (disk full, read-only, I/O error, a lost WAL): the message
    is :func:`rifflux.store.faults.write_fault_reason`'s one line."""


class IndexLockedError(RiffluxError):
    """Another connection held the index's write lock for longer than a front-side write
    waits (a job's submission); the message names the holder where this host can see it."""


class SearchTimeoutError(RiffluxError):
    """A search ran past ``RIFFLUX_SEARCH_TIMEOUT_SECONDS`` and was stopped."""


class DiskFullError(RiffluxError):
    """A read failed because the disk holding the index is full (SQLite could not
    create its ``-shm`` file there)."""


class IndexFolderNotWritableError(RiffluxError):
    """SQLite cannot create the index's ``-wal``/``-shm`` files: its folder is read-only."""


MAX_ECHO_CHARS = 200
"""The most characters of a user's input (a path) that an error message repeats."""
NAME_MAX = 255
PATH_MAX = 4096


def shorten(text: str) -> str:
    """``text`` cut to about ``MAX_ECHO_CHARS`` characters, saying how long it was."""
    if len(text) <= MAX_ECHO_CHARS:
        return text
    return f"{text[: MAX_ECHO_CHARS - 1]}… ({len(text):,} characters)"


def echo(value: object) -> str:
    """``repr(value)`` cut to about ``MAX_ECHO_CHARS`` characters, saying how long it was."""
    text = repr(value)
    if len(text) <= MAX_ECHO_CHARS:
        return text
    size = f" ({len(value):,} characters)" if isinstance(value, str | bytes) else ""
    return text[: MAX_ECHO_CHARS - 1] + "…" + size


def os_failure(exc: BaseException) -> str | None:
    """One line for an error the operating system gave about a path, or None.

    Names the problem (``File name too long``, ``Permission denied``, a NUL byte) and
    echoes at most ``MAX_ECHO_CHARS`` characters of the path, never the raw text of an
    OSError, which repeats the whole path however long. Used by the MCP server and the
    CLI alike.
    """
    if isinstance(exc, ValueError) and "null" in str(exc) and "embedded" in str(exc):
        return "a path contains a NUL byte, which no file name can hold; remove it"
    if not isinstance(exc, OSError):
        return None
    reason = exc.strerror or type(exc).__name__
    if exc.filename is None:
        return " ".join(f"{reason}".split())
    name = exc.filename
    line = f"{reason}: {echo(name)}"
    if exc.errno == errno.ENAMETOOLONG:
        line += f"; a path may have at most {PATH_MAX:,} characters, a name {NAME_MAX}"
    if exc.filename2 is not None:
        line += f" -> {echo(exc.filename2)}"
    return " ".join(line.split())
