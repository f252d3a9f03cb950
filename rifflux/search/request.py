"""One search's arguments: the typed, frozen :class:`SearchRequest`, validated once, here.

Invariants:

* Constructing a :class:`SearchRequest` checks every field; nothing above the core
  (the MCP tool, the ``rifflux search`` command) checks again. A rejected value raises
  :class:`~rifflux.errors.InvalidQueryError` with one line that names the argument, what
  it accepts and what was given: ``top_k must be an integer between 1 and 100 (got 0)``,
  ``mode must be one of lexical, semantic, hybrid (got 'fuzzy')``.
* Each field carries its :class:`FieldSpec` (description, JSON schema, check, how to
  read it from text) in its dataclass metadata. The MCP server builds the input schema
  of ``search_rifflux`` from :func:`request_fields`, and the CLI builds the flags of
  ``rifflux search`` from it, so adding a search option is one edit: a field here.
* The JSON schema keeps the constraints visible to MCP clients (``integer``, ``minimum``
  and ``maximum`` for ``top_k``, an ``enum`` for ``mode``); the values are still checked
  by this module, so a client that ignores the schema gets the same messages as the CLI.
* ``MAX_TOP_K`` bounds what a request may ask for. In-process rankings that need to go
  deeper (the evaluation's recall@100 over chunks) call
  :meth:`~rifflux.search.service.SearchService.search`, which checks the same way with
  no upper bound (:func:`check_top_k` with ``maximum=None``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, cast

from rifflux.errors import InvalidQueryError

MODES: tuple[str, ...] = ("lexical", "semantic", "hybrid")
Mode = Literal["lexical", "semantic", "hybrid"]
MAX_TOP_K = 100
"""The largest ``top_k`` a request may ask for (the MCP input schema's maximum)."""
MAX_VALUE_REPR = 80
"""How much of a rejected value a message quotes."""

SPEC_KEY = "rifflux.search_request"
"""The dataclass-metadata key under which each field's :class:`FieldSpec` lives."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= MAX_VALUE_REPR else text[: MAX_VALUE_REPR - 1] + "…"


def check_query(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidQueryError(f"query must be a string (got {_shown(value)})")
    return value


def check_top_k(value: object, *, maximum: int | None = MAX_TOP_K) -> int:
    """An int (not a bool) from 1 to ``maximum`` (no bound when None)."""
    in_range = (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= 1
        and (maximum is None or value <= maximum)
    )
    if not in_range:
        accepts = f"between 1 and {maximum}" if maximum is not None else "of at least 1"
        raise InvalidQueryError(f"top_k must be an integer {accepts} (got {_shown(value)})")
    return cast(int, value)


def check_mode(value: object) -> Mode:
    if not isinstance(value, str) or value not in MODES:
        raise InvalidQueryError(f"mode must be one of {', '.join(MODES)} (got {_shown(value)})")
    return cast(Mode, value)


def as_integer(value: object) -> object:
    """A value that means an integer, as that int: CLI text (``"10"``), a client that
    quotes numbers or sends ``10.0`` (what JSON schema validation reads as an integer);
    anything else unchanged, for the check to accept or reject with its message."""
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _same(value: object) -> object:
    return value


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """What the MCP schema and the CLI need to know about one request field."""

    description: str
    json_schema: Mapping[str, Any]
    check: Callable[[object], object]
    # Turns a textual or loosely typed value into the field's type when it can.
    from_text: Callable[[object], object] = _same
    # Shown in the CLI's help in place of the value (e.g. the choices).
    metavar: str | None = None


def _spec(**kwargs: Any) -> dict[str, FieldSpec]:
    return {SPEC_KEY: FieldSpec(**kwargs)}


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """A validated search: construct it and the arguments have been checked."""

    query: str = field(
        metadata=_spec(
            description="What to look for: words, a phrase or a question. Searched as "
            "plain text (quotes, *, AND, NEAR( and the like have no special meaning); "
            "a blank query returns no results.",
            json_schema={"type": "string"},
            check=check_query,
        )
    )
    top_k: int = field(
        default=10,
        metadata=_spec(
            description="How many results to return.",
            json_schema={"type": "integer", "minimum": 1, "maximum": MAX_TOP_K},
            check=check_top_k,
            from_text=as_integer,
            metavar="N",
        ),
    )
    mode: Mode = field(
        default="hybrid",
        metadata=_spec(
            description="lexical: BM25 keyword match; semantic: embedding cosine "
            "similarity; hybrid: both fused with reciprocal rank fusion.",
            json_schema={"type": "string", "enum": list(MODES)},
            check=check_mode,
            metavar="{" + ",".join(MODES) + "}",
        ),
    )

    def __post_init__(self) -> None:
        for name, _default, spec in request_fields():
            spec.check(getattr(self, name))

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> SearchRequest:
        """A request from the fields present in ``arguments`` (other keys are ignored)."""
        names = {name for name, _default, _spec in request_fields()}
        return cls(**{k: v for k, v in arguments.items() if k in names})


@dataclass(frozen=True, slots=True)
class _Required:
    """The default of a field without one (``query``)."""


REQUIRED: Any = _Required()


def request_fields() -> Iterator[tuple[str, Any, FieldSpec]]:
    """``(name, default or REQUIRED, spec)`` of every SearchRequest field, in order."""
    for f in fields(SearchRequest):
        default = REQUIRED if f.default is MISSING else f.default
        yield f.name, default, f.metadata[SPEC_KEY]
