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
* Every field after ``mode`` is optional and ``None`` (or ``group_by`` ``"chunk"``)
  means "not given": a request that gives none of them searches as a bare query does
  (tests/search/test_search_golden.py pins it byte for byte). ``__post_init__`` stores
  each field's normalised value (a glob string becomes a one-item tuple, a date becomes
  Unix seconds), so equal searches are equal, hashable requests: the query cache's key.
* ``MAX_TOP_K`` bounds what a request may ask for. In-process rankings that need to go
  deeper (the evaluation's recall@100 over chunks) call
  :meth:`~rifflux.search.service.SearchService.search`, which checks the same way with
  no upper bound (:func:`check_top_k` with ``maximum=None``).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import UTC, date, datetime
from typing import Any, Literal, cast

from rifflux.config import CANDIDATE_MULTIPLIER
from rifflux.errors import InvalidQueryError
from rifflux.index.frontmatter import normalize_tag
from rifflux.search.globs import check_glob
from rifflux.store.rows import KINDS

MODES: tuple[str, ...] = ("lexical", "semantic", "hybrid")
Mode = Literal["lexical", "semantic", "hybrid"]
MAX_TOP_K = 100
"""The largest ``top_k`` a request may ask for (the MCP input schema's maximum)."""
FUSIONS: tuple[str, ...] = ("rrf", "minmax")
Fusion = Literal["rrf", "minmax"]
GROUPS: tuple[str, ...] = ("chunk", "file")
GroupBy = Literal["chunk", "file"]
MAX_CANDIDATE_K = 1000
"""The most candidates a request may take per side."""
MAX_LIST_ITEMS = 100
"""The most entries a ``path_glob`` or ``file_types`` list may have."""
MAX_PATTERN_CHARS = 500
"""The longest glob, file type or ``content_contains`` text."""
MAX_QUERY_CHARS = 10_000
"""The longest query (``search_rifflux``, the knowledge tools, ``rifflux search``): a
pasted stack trace fits, while a response, which repeats the query, stays far below the
MCP client's 1 MiB message limit."""
MIN_MAX_TOKENS = 50
MAX_MAX_TOKENS = 100_000
"""The range ``max_tokens`` accepts (``search_rifflux``, ``get_file``, ``--max-tokens``)."""
MAX_VALUE_REPR = 80
"""How much of a rejected value a message quotes."""

STRING_OR_LIST: Mapping[str, Any] = {
    "type": ["string", "array"],
    "items": {"type": "string"},
    "maxItems": MAX_LIST_ITEMS,
}
"""The schema of an argument that is one string or a list of them (``items`` and
``maxItems`` apply to a list only)."""

SPEC_KEY = "rifflux.search_request"
"""The dataclass-metadata key under which each field's :class:`FieldSpec` lives."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= MAX_VALUE_REPR else text[: MAX_VALUE_REPR - 1] + "…"


def check_query(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidQueryError(f"query must be a string (got {_shown(value)})")
    if len(value) > MAX_QUERY_CHARS:
        raise InvalidQueryError(
            f"query must be at most {MAX_QUERY_CHARS:,} characters (got {len(value):,}); "
            "shorten it to the words that matter"
        )
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


def check_max_tokens(value: object) -> int | None:
    """``None`` (no budget) or an int (not a bool) from 50 to 100,000."""
    if value is None:
        return None
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not MIN_MAX_TOKENS <= value <= MAX_MAX_TOKENS
    ):
        raise InvalidQueryError(
            f"max_tokens must be an integer between {MIN_MAX_TOKENS} and {MAX_MAX_TOKENS} "
            f"(got {_shown(value)})"
        )
    return value


MAX_NEIGHBORS = 5
"""The most chunks ``get_chunk`` returns on each side of the one asked for."""


def check_neighbors(value: object) -> int:
    """``get_chunk``'s ``neighbors``: an int (not a bool) from 0 to 5."""
    value = as_integer(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_NEIGHBORS:
        raise InvalidQueryError(
            f"neighbors must be an integer between 0 and {MAX_NEIGHBORS} (got {_shown(value)})"
        )
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_fusion(value: object) -> Fusion | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in FUSIONS:
        raise InvalidQueryError(f"fusion must be one of {', '.join(FUSIONS)} (got {_shown(value)})")
    return cast(Fusion, value)


def check_group_by(value: object) -> GroupBy:
    if not isinstance(value, str) or value not in GROUPS:
        raise InvalidQueryError(
            f"group_by must be one of {', '.join(GROUPS)} (got {_shown(value)})"
        )
    return cast(GroupBy, value)


def _check_float(
    name: str, low: float, high: float | None, what: str
) -> Callable[[object], float | None]:
    def check(value: object) -> float | None:
        if value is None:
            return None
        ok = _is_number(value) and math.isfinite(float(cast(float, value)))
        number = float(cast(float, value)) if ok else math.nan
        if not ok or number < low or (high is not None and number > high):
            raise InvalidQueryError(f"{name} must be {what} (got {_shown(value)})")
        return number

    return check


check_alpha = _check_float("alpha", 0.0, 1.0, "a number from 0 to 1 (the semantic share)")
check_min_cosine = _check_float("min_cosine", -1.0, 1.0, "a number from -1 to 1")
check_lexical_weight = _check_float("lexical_weight", 0.0, None, "a number >= 0")
check_semantic_weight = _check_float("semantic_weight", 0.0, None, "a number >= 0")


def check_candidate_k(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_CANDIDATE_K:
        raise InvalidQueryError(
            f"candidate_k must be an integer between 1 and {MAX_CANDIDATE_K} (got {_shown(value)})"
        )
    return value


def _string_list(
    name: str, what: str, item: Callable[[str], str | None]
) -> Callable[[object], tuple[str, ...] | None]:
    """A check for a string or a list of strings, each normalised by ``item`` (None: bad)."""

    def check(value: object) -> tuple[str, ...] | None:
        if value is None:
            return None
        items = [value] if isinstance(value, str) else value
        accepts = (
            f"{name} must be {what}, or a list of 1 to {MAX_LIST_ITEMS} of them "
            f"of at most {MAX_PATTERN_CHARS} characters"
        )
        if not isinstance(items, list | tuple) or not 1 <= len(items) <= MAX_LIST_ITEMS:
            raise InvalidQueryError(f"{accepts} (got {_shown(value)})")
        out: list[str] = []
        for raw in items:
            normal = item(raw) if isinstance(raw, str) and len(raw) <= MAX_PATTERN_CHARS else None
            if normal is None:
                raise InvalidQueryError(f"{accepts} (got {_shown(raw)})")
            out.append(normal)
        return tuple(dict.fromkeys(out))

    return check


def _glob(raw: str) -> str | None:
    """A blank glob is None (the list's message); a malformed one raises its own line."""
    return check_glob(raw) if raw.strip() else None


_EXTENSION = re.compile(r"[\w.+-]+")


def _extension(raw: str) -> str | None:
    ext = raw.strip().lower().lstrip(".")
    return ext if ext and _EXTENSION.fullmatch(ext) else None


check_path_glob = _string_list("path_glob", "a POSIX glob such as docs/**/*.md", _glob)
check_file_types = _string_list("file_types", "an extension such as md", _extension)


def _kind(raw: str) -> str | None:
    kind = raw.strip().lower()
    return kind if kind in KINDS else None


def check_kinds(value: object) -> tuple[str, ...] | None:
    """A kind or a list of kinds (decision, error, note); an unknown one is refused."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if isinstance(items, list | tuple) and 1 <= len(items) <= MAX_LIST_ITEMS:
        kinds = [_kind(item) if isinstance(item, str) else None for item in items]
        if all(kinds):
            return tuple(dict.fromkeys(cast(list[str], kinds)))
    raise InvalidQueryError(
        f"kinds must be one of {', '.join(KINDS)}, or a list of them (got {_shown(value)})"
    )


def _tag(raw: str) -> str | None:
    return normalize_tag(raw) or None


check_tags = _string_list("tags", "a tag such as database", _tag)


def check_status(value: object) -> str | None:
    """A status to match exactly, case-insensitively (``accepted``, or front matter's own)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_PATTERN_CHARS:
        raise InvalidQueryError(
            f"status must be a non-empty string such as accepted (got {_shown(value)})"
        )
    return " ".join(value.split()).lower()


def check_content_contains(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_PATTERN_CHARS:
        raise InvalidQueryError(
            f"content_contains must be a non-empty string of at most {MAX_PATTERN_CHARS} "
            f"characters (got {_shown(value)})"
        )
    return value


MIN_UNIX_SECONDS = datetime(1, 1, 1, tzinfo=UTC).timestamp()
MAX_UNIX_SECONDS = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
"""The times a filter accepts: years 1 to 9999 (beyond them ``1e308`` overflowed to a crash)."""


def unix_seconds(value: object) -> float | None:
    """An ISO 8601 date or datetime (UTC unless it says otherwise), or Unix seconds (a
    number or its text), as Unix seconds; None when ``value`` is neither, or lies outside
    the years 1 to 9999."""
    seconds = _unix_seconds(value)
    if seconds is None or not MIN_UNIX_SECONDS <= seconds <= MAX_UNIX_SECONDS:
        return None
    return seconds


def _unix_seconds(value: object) -> float | None:
    if _is_number(value):
        number = float(cast(float, value))
        return number if math.isfinite(number) else None
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        return number if math.isfinite(number) else None
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _check_time(name: str) -> Callable[[object], float | None]:
    def check(value: object) -> float | None:
        if value is None:
            return None
        seconds = unix_seconds(value)
        if seconds is None:
            raise InvalidQueryError(
                f"{name} must be an ISO 8601 date or datetime (2024-05-01, "
                f"2024-05-01T12:00:00+02:00) or Unix seconds, in the years 1 to 9999 "
                f"(got {_shown(value)})"
            )
        return seconds

    return check


check_modified_after = _check_time("modified_after")
check_modified_before = _check_time("modified_before")


def as_number(value: object) -> object:
    """Number text (``"0.6"``) as a float; anything else unchanged, for the check."""
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return value
    return value


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
    # The CLI flag may be repeated (a list value).
    multiple: bool = False
    # The CLI help's "(default: ...)" text; None: the field's default.
    default_text: str | None = None
    # The CLI flag; None: ``--`` and the field's name with dashes (``top_k`` → ``--top-k``).
    flag: str | None = None


def _spec(**kwargs: Any) -> dict[str, FieldSpec]:
    return {SPEC_KEY: FieldSpec(**kwargs)}


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """A validated search: construct it and the arguments have been checked."""

    query: str = field(
        metadata=_spec(
            description='What to look for: words or a question; a "double-quoted phrase" ranks '
            f"exact matches first. At most {MAX_QUERY_CHARS} characters.",
            json_schema={"type": "string", "maxLength": MAX_QUERY_CHARS},
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
            description="hybrid: keywords and meaning, usually best; lexical: exact keywords, for "
            "identifiers and error codes; semantic: meaning only.",
            json_schema={"type": "string", "enum": list(MODES)},
            check=check_mode,
            metavar="{" + ",".join(MODES) + "}",
        ),
    )

    fusion: Fusion | None = field(
        default=None,
        metadata=_spec(
            description="How hybrid merges its two rankings: rrf, or minmax (scores "
            "mixed by alpha).",
            json_schema={"type": "string", "enum": list(FUSIONS)},
            check=check_fusion,
            metavar="{" + ",".join(FUSIONS) + "}",
            default_text="rrf, or RIFFLUX_FUSION",
        ),
    )
    alpha: float | None = field(
        default=None,
        metadata=_spec(
            description="minmax's semantic share, 0 to 1 (default 0.6).",
            json_schema={"type": "number", "minimum": 0, "maximum": 1},
            check=check_alpha,
            from_text=as_number,
            metavar="A",
            default_text="0.6 for minmax, or RIFFLUX_FUSION_ALPHA",
        ),
    )
    candidate_k: int | None = field(
        default=None,
        metadata=_spec(
            description="Candidates per ranking before fusion.",
            json_schema={"type": "integer", "minimum": 1, "maximum": MAX_CANDIDATE_K},
            check=check_candidate_k,
            from_text=as_integer,
            metavar="N",
            default_text=f"80 for minmax, top_k x {CANDIDATE_MULTIPLIER} otherwise",
        ),
    )
    group_by: GroupBy = field(
        default="chunk",
        metadata=_spec(
            description="chunk: the best passages; file: one result per file (its best "
            "chunk), to find files.",
            json_schema={"type": "string", "enum": list(GROUPS)},
            check=check_group_by,
            metavar="{" + ",".join(GROUPS) + "}",
        ),
    )
    lexical_weight: float | None = field(
        default=None,
        metadata=_spec(
            description="rrf weight of the keyword ranking (default 1).",
            json_schema={"type": "number", "minimum": 0},
            check=check_lexical_weight,
            from_text=as_number,
            metavar="W",
            default_text="RIFFLUX_LEXICAL_WEIGHT, 1.0",
        ),
    )
    semantic_weight: float | None = field(
        default=None,
        metadata=_spec(
            description="rrf weight of the semantic ranking (default 1).",
            json_schema={"type": "number", "minimum": 0},
            check=check_semantic_weight,
            from_text=as_number,
            metavar="W",
            default_text="RIFFLUX_SEMANTIC_WEIGHT, 1.0",
        ),
    )
    min_cosine: float | None = field(
        default=None,
        metadata=_spec(
            description="Drop semantic candidates with a cosine below this.",
            json_schema={"type": "number", "minimum": -1, "maximum": 1},
            check=check_min_cosine,
            from_text=as_number,
            metavar="C",
            default_text="no threshold",
        ),
    )
    path_glob: tuple[str, ...] | None = field(
        default=None,
        metadata=_spec(
            description="Only paths matching this glob or any of a list (docs/**/*.md).",
            json_schema=STRING_OR_LIST,
            check=check_path_glob,
            metavar="GLOB",
            multiple=True,
            default_text="every path",
        ),
    )
    modified_after: float | None = field(
        default=None,
        metadata=_spec(
            description="Only files modified at or after this ISO 8601 date or time, or Unix time.",
            json_schema={"type": ["string", "number"]},
            check=check_modified_after,
            metavar="TIME",
            default_text="any time",
        ),
    )
    modified_before: float | None = field(
        default=None,
        metadata=_spec(
            description="Only files modified before this time (as modified_after).",
            json_schema={"type": ["string", "number"]},
            check=check_modified_before,
            metavar="TIME",
            default_text="any time",
        ),
    )
    file_types: tuple[str, ...] | None = field(
        default=None,
        metadata=_spec(
            description='Only these extensions, e.g. ["md", "txt"].',
            json_schema=STRING_OR_LIST,
            check=check_file_types,
            metavar="EXT",
            multiple=True,
            default_text="every type",
        ),
    )
    content_contains: str | None = field(
        default=None,
        metadata=_spec(
            description="Only chunks containing this text (case-insensitive).",
            json_schema={"type": "string"},
            check=check_content_contains,
            metavar="TEXT",
            default_text="any content",
        ),
    )

    kinds: tuple[str, ...] | None = field(
        default=None,
        metadata=_spec(
            description="Only these kinds: decision (decision records), error "
            "(error-fix sections), note.",
            json_schema={
                "anyOf": [
                    {"type": "string", "enum": list(KINDS)},
                    {"type": "array", "items": {"type": "string", "enum": list(KINDS)}},
                ]
            },
            check=check_kinds,
            metavar="{" + ",".join(KINDS) + "}",
            multiple=True,
            default_text="every kind",
            flag="--kind",
        ),
    )
    tags: tuple[str, ...] | None = field(
        default=None,
        metadata=_spec(
            description="Only files tagged (front matter) with all of these.",
            json_schema=STRING_OR_LIST,
            check=check_tags,
            metavar="TAG",
            multiple=True,
            default_text="any tags",
            flag="--tag",
        ),
    )
    status: str | None = field(
        default=None,
        metadata=_spec(
            description="Only files with this status (e.g. accepted).",
            json_schema={"type": "string"},
            check=check_status,
            metavar="STATUS",
            default_text="any status",
        ),
    )

    max_tokens: int | None = field(
        default=None,
        metadata=_spec(
            description="Token budget of the whole answer: later results are cut or "
            "dropped (over MCP, omitted means the server's limit).",
            json_schema={
                "type": ["integer", "null"],
                "minimum": MIN_MAX_TOKENS,
                "maximum": MAX_MAX_TOKENS,
            },
            check=check_max_tokens,
            from_text=as_integer,
            metavar="N",
            default_text="no budget",
        ),
    )

    def __post_init__(self) -> None:
        for name, _default, spec in request_fields():
            object.__setattr__(self, name, spec.check(getattr(self, name)))
        if self.lexical_weight == 0 and self.semantic_weight == 0:
            raise InvalidQueryError(
                "lexical_weight and semantic_weight must not both be 0 (got 0 and 0)"
            )

    def option_arguments(self) -> dict[str, Any]:
        """The optional fields that differ from their defaults (what a caller gave)."""
        return {
            name: getattr(self, name)
            for name, default, _spec in request_fields()
            if default is not REQUIRED
            and name not in ("top_k", "mode")
            and getattr(self, name) != default
        }

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


def add_request_arguments(parser: argparse.ArgumentParser, *, skip: Sequence[str] = ()) -> None:
    """One argument per SearchRequest field but ``skip``: a required field is positional,
    the others ``--flags`` (``top_k`` → ``--top-k``); a list field's flag may repeat.
    Values are checked by SearchRequest, so the CLI's messages are the core's."""
    for name, default, spec in request_fields():
        if name in skip:
            continue
        if default is REQUIRED:
            parser.add_argument(name, type=spec.from_text, help=spec.description)
            continue
        shown = spec.default_text if spec.default_text is not None else default
        parser.add_argument(
            spec.flag or f"--{name.replace('_', '-')}",
            dest=name,
            type=spec.from_text,
            default=default,
            metavar=spec.metavar,
            action="append" if spec.multiple else "store",
            help=f"{spec.description} (default: {shown})".replace("%", "%%"),
        )
