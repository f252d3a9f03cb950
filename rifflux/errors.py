"""Every error Rifflux raises on purpose, in one tree. Each message says what was wrong
and what to do; each class says whether a retry can help (``retryable``).

Exception
├── RiffluxError                     an error fit to show a user as one line
│   ├── ConfigError                  a setting cannot be used
│   ├── InvalidQueryError            a search argument is out of range (also a ValueError)
│   ├── RootNotFoundError            a path to index does not exist
│   ├── NotFoundError                a chunk or file is not in the index
│   │   └── IndexMissingError        no index database at all
│   ├── PathNotAllowedError          a path outside the allowed roots
│   │   ├── NoAllowedRootsError      no allowed root at all
│   │   └── SecretPathError          a path on the built-in deny list
│   ├── SchemaVersionError           the index has another schema version
│   ├── EmbeddingModelMismatch       the index was embedded with another model
│   ├── NotAnIndexError              the database is not a Rifflux index
│   ├── IndexDamagedError            SQLite finds the index malformed
│   ├── IndexFolderNotWritableError  SQLite cannot create -wal/-shm files
│   ├── DiskFullError                a read failed on a full disk
│   ├── IndexWriteError              a write fault (disk full, read-only, I/O error)
│   ├── IndexLockedError *           another connection holds the write lock
│   ├── SearchTimeoutError *         a search ran past its deadline
│   ├── BrokerUnavailableError *     the message broker cannot be reached
│   ├── MessageVersionError          a queue message of another kind or version
│   ├── JobTimeout *                 a job did not finish in the time waited
│   └── JobStalled *                 a job has work no live worker can take
└── CacheUnusable                    the vector cache cannot be used as it is
    └── CacheCorrupt                 the vector cache is damaged

(* ``retryable``: the same call may succeed later, unchanged.) The others are
permanent: they stay until a person changes the request, the settings, the disk or
the index. ``CacheUnusable`` is no ``RiffluxError``: the search falls back to
lexical results or the publisher rebuilds the cache, so it never reaches a user as
such. Dramatiq actors fail a message at once on a permanent error
(:func:`permanent_errors`, ``workers.actors``).
"""

from __future__ import annotations

import errno


class RiffluxError(Exception):
    """Base class: an error whose message is fit to show a user as one line."""

    retryable: bool = False
    """Whether the same call may succeed if tried again later, unchanged."""


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

    retryable = True


class MessageVersionError(RiffluxError):
    """A queue message of another kind or Rifflux version than this worker reads."""


class IndexWriteError(RiffluxError):
    """A write no retry can fix (disk full, read-only, I/O error, a lost WAL): the message
    is :func:`rifflux.store.faults.write_fault_reason`'s one line."""


class IndexLockedError(RiffluxError):
    """Another connection held the index's write lock for longer than a front-side write
    waits (a job's submission); the message names the holder where this host can see it."""

    retryable = True


class SearchTimeoutError(RiffluxError):
    """A search ran past ``RIFFLUX_SEARCH_TIMEOUT_SECONDS`` and was stopped."""

    retryable = True


class DiskFullError(RiffluxError):
    """A read failed because the disk holding the index is full (SQLite could not
    create its ``-shm`` file there)."""


class IndexFolderNotWritableError(RiffluxError):
    """SQLite cannot create the index's ``-wal``/``-shm`` files: its folder is read-only."""


class JobTimeout(RiffluxError):
    """A job did not finish within the time the caller was willing to wait."""

    retryable = True


class JobStalled(RiffluxError):
    """A job has pending work that no live worker can take (see
    :mod:`rifflux.queue.stall`); it runs once a worker comes back."""

    retryable = True


class CacheUnusable(Exception):
    """The vector cache cannot be used as it is (e.g. a format this version does not
    read): the caller rebuilds it or searches without it."""

    retryable: bool = False


class CacheCorrupt(CacheUnusable):
    """The vector cache is damaged: a file does not match its checksum, its row count
    or the database's rows. The message is the reason, fit to show a user."""


def permanent_errors() -> tuple[type[RiffluxError], ...]:
    """Every subclass of :class:`RiffluxError` in this module that no retry can fix
    (``retryable`` false); the base class itself is
    left out, as it says nothing about its cause. Parents come before their subclasses."""
    found: list[type[RiffluxError]] = []
    pending: list[type[RiffluxError]] = [RiffluxError]
    while pending:
        cls = pending.pop(0)
        for sub in cls.__subclasses__():
            if sub.__module__ != __name__:
                continue
            pending.append(sub)
            if not sub.retryable:
                found.append(sub)
    return tuple(found)


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
