"""Front matter: the YAML (``---``) or TOML (``+++``) block at the top of a markdown file.

A file that opens with a front matter block is split into its fields and its body. The body
is what the chunker sees, with the block replaced by as many newlines as it had, so chunk
contents stay slices of the body and no field of the block ever reaches a chunk's content
or its embedding. The fields are stored per file (rifflux.store.knowledge): ``title``,
``tags``, ``type``, ``status``, ``date``, and every other key as JSON.

Invariants:

* The block is recognised exactly where the chunker recognises it (the same pattern: an
  opening ``---`` or ``+++`` line, the first identical line after it closes it), so a block
  that parses is stripped and one that does not is text to both, never to only one.
* Parsing is safe: YAML through ``yaml.CSafeLoader`` (or ``SafeLoader``), which builds only
  plain data (mappings, lists, strings, numbers, booleans, dates), TOML through ``tomllib``.
  Nothing is executed, and the values are copied into JSON-safe data with a budget of
  ``MAX_VALUES`` values, so an alias bomb (``&a [*a, *a, ...]``) costs a bounded walk.
* ``tomllib`` spends time quadratic in the parts of a dotted key (``a.a.a…b = 1``: 31,000
  parts in 62 KB cost 17 CPU s), so a TOML block is measured before it is parsed: a
  key/value line with more than ``MAX_KEY_PARTS`` parts (dots before its last ``=``, an
  upper bound that needs no parse) makes the block malformed. Bounded so, the slowest
  64 KB block parses in about 0.05 s.
* A block that is not valid YAML/TOML, is not a mapping, or is longer than
  ``MAX_FRONT_MATTER_CHARS`` is *malformed*: the file is still indexed, the block as
  text, and :attr:`FrontMatter.problem` says why (the job lists it among its skipped
  reasons). A malformed block never fails a job.
* Only markdown files (``MARKDOWN_SUFFIXES``) have front matter; any other file's text is
  its body, unchanged.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import yaml

from rifflux.index.chunker import MARKDOWN_SUFFIXES, normalize_text

MAX_FRONT_MATTER_CHARS = 64_000
"""A longer block is not front matter anyone writes by hand: kept as text, reported."""
MAX_VALUES = 10_000
"""The most values (scalars, lists, mappings) one block may hold once aliases are expanded."""
MAX_KEY_PARTS = 100
"""The most parts a dotted TOML key may have (``a.b.c`` has 3), counted before parsing."""
MAX_FIELD_CHARS = 500
"""``title``, ``type``, ``status``, ``date`` and each tag are cut to this length."""
MAX_ABOUT_CHARS = 2_000
"""Each value of the ``about`` field (a ``description`` may be a paragraph) is cut to this."""

# The chunker's pattern (rifflux.index.chunker._FRONT_MATTER), after newline normalisation.
_BLOCK = re.compile(r"\A(---|\+\+\+)[ \t]*\n(?P<body>(?:.*?\n)?)\1[ \t]*(?:\n|\Z)", re.S)
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Keys stored in their own columns; the rest go to ``extra`` as JSON.
NAMED_KEYS = ("title", "tags", "type", "status", "date")
# Keys whose text says what the document is about (searched as a lexical file field).
ABOUT_KEYS = ("title", "name", "description", "summary")


class _TooBig(ValueError):
    """The block holds more than ``MAX_VALUES`` values."""


@dataclass(frozen=True, slots=True)
class FrontMatter:
    """A file's text split into front matter fields and the body the chunker sees.

    ``fields`` is empty when the file has no block or a malformed one (``problem`` then
    says why); ``body`` is the whole normalised text unless a block was stripped.
    """

    body: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    present: bool = False
    problem: str | None = None

    @property
    def title(self) -> str:
        return text_value(self.fields.get("title"))

    @property
    def tags(self) -> tuple[str, ...]:
        return tag_list(self.fields.get("tags"))

    @property
    def doc_type(self) -> str:
        return text_value(self.fields.get("type")).lower()

    @property
    def status(self) -> str:
        return text_value(self.fields.get("status"))

    @property
    def date(self) -> str:
        return text_value(self.fields.get("date"))

    @property
    def about(self) -> str:
        """What the block says the document is about: its ``ABOUT_KEYS`` values, one a
        line, each once (the lexical file field of rifflux.search.lexical)."""
        values = (text_value(self.fields.get(key), MAX_ABOUT_CHARS) for key in ABOUT_KEYS)
        return "\n".join(dict.fromkeys(v for v in values if v))

    def extra_json(self) -> str:
        """Every key but the named ones, as a JSON object (keys sorted)."""
        extra = {k: v for k, v in self.fields.items() if k not in NAMED_KEYS}
        return json.dumps(extra, ensure_ascii=False, sort_keys=True)


def split_front_matter(text: str, rel_path: str) -> FrontMatter:
    """Split a file's text into its front matter and body (see the module docstring)."""
    src = normalize_text(text)
    if PurePosixPath(rel_path).suffix.lower() not in MARKDOWN_SUFFIXES:
        return FrontMatter(src)
    block = _BLOCK.match(src)
    if block is None:
        return FrontMatter(src)
    fence, raw = block.group(1), block.group("body")
    language = "YAML" if fence == "---" else "TOML"
    if len(raw) > MAX_FRONT_MATTER_CHARS:
        return FrontMatter(
            src, problem=f"front matter longer than {MAX_FRONT_MATTER_CHARS} characters"
        )
    if language == "TOML" and toml_key_parts(raw) > MAX_KEY_PARTS:
        return FrontMatter(
            src, problem=f"front matter has a dotted key of more than {MAX_KEY_PARTS} parts"
        )
    try:
        loaded = _load(raw, language)
        fields = _plain(loaded, [MAX_VALUES]) if loaded is not None else {}
    except _TooBig:
        return FrontMatter(src, problem=f"front matter holds more than {MAX_VALUES} values")
    except Exception as exc:  # any parser failure: malformed, never a failed job
        return FrontMatter(src, problem=f"front matter is not valid {language}: {_describe(exc)}")
    if not isinstance(fields, dict):
        return FrontMatter(src, problem=f"front matter is not a {language} mapping of keys")
    # Newlines in place of the block keep the body's line numbers those of the file.
    body = "\n" * block.group(0).count("\n") + src[block.end() :]
    return FrontMatter(body, fields, present=True)


def toml_key_parts(raw: str) -> int:
    """An upper bound on the parts of the deepest dotted key of a TOML text, without
    parsing it: 1 + the dots before the last ``=`` of the line that has the most (a key
    and its ``=`` share a line; dots in a value or a quoted key only raise the bound)."""
    deepest = 0
    for line in raw.splitlines():
        end = line.rfind("=")
        if end > 0:
            deepest = max(deepest, line.count(".", 0, end) + 1)
    return deepest


def _load(raw: str, language: str) -> object:
    if language == "TOML":
        return tomllib.loads(raw)
    return yaml.load(raw, Loader=_YAML_LOADER)  # a safe loader: plain data only


def _describe(exc: BaseException) -> str:
    """The parser's complaint in one line, with the file's line number when it has one."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if isinstance(problem, str) and mark is not None:
        # The block's first line is the file's second (after the opening fence).
        return f"{problem} (line {mark.line + 2})"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (" ".join(lines[:2]) or type(exc).__name__)[:200]


def _plain(value: object, budget: list[int]) -> object:
    """``value`` as JSON-safe data (dates as ISO text, keys as text), counting every value
    against ``budget`` so shared (aliased) structures cannot blow up."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooBig
    if isinstance(value, Mapping):
        return {_key(k): _plain(v, budget) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v, budget) for v in value]
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if value is None or isinstance(value, str | int | float | bool):
        if isinstance(value, float) and value != value:  # NaN is not JSON
            return None
        return value
    return str(value)


def _key(key: object) -> str:
    return key.isoformat() if isinstance(key, dt.date) else str(key)


def text_value(value: object, limit: int = MAX_FIELD_CHARS) -> str:
    """A scalar field as one line of at most ``limit`` characters ('' for none, a list or
    a mapping)."""
    if value is None or isinstance(value, dict | list):
        return ""
    text = "true" if value is True else "false" if value is False else str(value)
    return " ".join(text.split())[:limit]


def tag_list(value: object) -> tuple[str, ...]:
    """Tags from a list or a comma-separated string, normalised: lower case, no leading
    ``#``, inner whitespace collapsed; empty and repeated tags dropped, order kept."""
    items: list[object]
    if isinstance(value, str):
        items = list(value.split(","))
    elif isinstance(value, list):
        items = list(value)
    else:
        return ()
    tags = (normalize_tag(text_value(item)) for item in items)
    return tuple(dict.fromkeys(tag for tag in tags if tag))


def normalize_tag(tag: str) -> str:
    """How a tag is stored and compared: ``"#Databases "`` → ``"databases"``."""
    return " ".join(tag.strip().lstrip("#").split()).lower()[:MAX_FIELD_CHARS]
