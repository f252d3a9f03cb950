"""Errors that reach a user. Each message says what was wrong and what to do."""

from __future__ import annotations


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


class BrokerUnavailableError(RiffluxError):
    """The message broker could not be reached or refused the connection."""


class MessageVersionError(RiffluxError):
    """A queue message of another kind or Rifflux version than this worker reads."""


class SearchTimeoutError(RiffluxError):
    """A search ran past ``RIFFLUX_SEARCH_TIMEOUT_SECONDS`` and was stopped."""
