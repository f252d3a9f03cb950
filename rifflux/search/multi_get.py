"""``multi_get`` (qmd's name): several indexed files at once, under one token budget.

Invariants:

* Each entry of ``paths`` is an indexed file's path as results show it (or its absolute
  path: ``retrieval.find_file``), or a
  glob (it has ``*``, ``?`` or ``[``) matched as ``search_rifflux``'s ``path_glob``
  matches (``globs.compile_glob``: ``**`` crosses folders, ``*`` and ``?`` do not). A
  path that is not indexed is a one-line error; a glob that matches nothing adds nothing.
* Files come in the order asked, a glob's matches sorted, each file once (at its first
  place). At most ``MAX_FILES`` are returned; more than ``MAX_MATCHES`` matches is a
  one-line error (narrow the globs).
* A file's ``content`` is what the index holds: its chunks in order, joined by a blank
  line (front matter is not content; the file itself is not read), like ``get_file``.
* ``max_tokens``: one budget for the whole answer as sent (``budget.fit_response``:
  compact JSON, counted by ``budget.estimate_tokens``); files stay whole while they fit,
  the first that does not is cut to its beginning if at least
  ``budget.MIN_EXCERPT_TOKENS`` remain (``truncated``), and every later file is listed in
  ``not_included`` (as are files past ``MAX_FILES``); the answer gains ``budget``
  ``{max_tokens, used_tokens, dropped}`` (``dropped``: the files in ``not_included``).
* Serving is the caller's to allow: the MCP tool checks each file's realpath against the
  allowed roots at read time, as ``get_file`` does, before anything is returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rifflux.errors import InvalidQueryError, NotFoundError, echo
from rifflux.search.budget import Fitted, estimate_tokens, fit_in_order, fit_response
from rifflux.search.globs import compile_glob
from rifflux.search.request import MAX_LIST_ITEMS, MAX_PATTERN_CHARS
from rifflux.search.retrieval import find_file
from rifflux.store.reader import IndexReader

MAX_FILES = 100
"""The most files one call returns; later ones are listed in ``not_included``."""
MAX_MATCHES = 1_000
"""More files than this named by one call is refused: narrow the globs."""
GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class Wanted:
    """One file a call names: its stored path and whether a glob (not the path) named it."""

    path: str
    by_glob: bool


def check_paths(value: object) -> list[str]:
    """``paths``: a list of 1 to ``MAX_LIST_ITEMS`` non-empty strings (one string is a
    list of one)."""
    items = [value] if isinstance(value, str) else value
    if isinstance(items, list | tuple) and 1 <= len(items) <= MAX_LIST_ITEMS:
        paths = [
            p for p in items if isinstance(p, str) and p.strip() and len(p) <= MAX_PATTERN_CHARS
        ]
        if len(paths) == len(items):
            return paths
    shown = repr(value)
    raise InvalidQueryError(
        f"paths must be a list of 1 to {MAX_LIST_ITEMS} indexed file paths or globs such "
        f"as docs/adr/*.md (got {shown if len(shown) <= 80 else shown[:79] + '…'})"
    )


def is_glob(entry: str) -> bool:
    return any(c in GLOB_CHARS for c in entry)


def expand(reader: IndexReader, entries: Sequence[str]) -> list[Wanted]:
    """The stored files ``entries`` name, in order (see the module docstring)."""
    stored: list[str] | None = None
    seen: set[str] = set()
    wanted: list[Wanted] = []
    for entry in entries:
        if is_glob(entry):
            if stored is None:
                stored = sorted(str(row[1]) for row in reader.file_rows())
            matcher = compile_glob(entry)
            matches = [Wanted(p, True) for p in stored if matcher.matches(p)]
        else:
            row = find_file(reader, entry)
            if row is None:
                raise NotFoundError(
                    f"{echo(entry)} is not an indexed file; pass paths as search results "
                    "show them, or globs such as docs/adr/*.md"
                )
            matches = [Wanted(str(row["path"]), False)]
        for match in matches:
            if match.path not in seen:
                seen.add(match.path)
                wanted.append(match)
        if len(wanted) > MAX_MATCHES:
            raise InvalidQueryError(
                f"paths name more than {MAX_MATCHES} indexed files; narrow the globs"
            )
    return wanted


def read_files(reader: IndexReader, paths: Sequence[str], max_tokens: int | None) -> dict[str, Any]:
    """``{files: [{path, content, tokens, truncated}], not_included, count}`` for stored
    ``paths`` in order, under ``max_tokens`` (None: no budget)."""
    chosen, not_included = list(paths[:MAX_FILES]), list(paths[MAX_FILES:])
    texts = []
    for path in chosen:
        row = reader.file_by_path(path)
        chunks = reader.chunks_of_file(int(row["id"])) if row is not None else []
        texts.append("\n\n".join(str(chunk["content"]) for chunk in chunks))
    if max_tokens is None:
        files = [
            {"path": p, "content": t, "tokens": estimate_tokens(t), "truncated": False}
            for p, t in zip(chosen, texts, strict=True)
        ]
        return {"files": files, "not_included": not_included, "count": len(files)}

    def render(fitted: Sequence[Fitted | None], used: int) -> dict[str, Any]:
        files = [
            {"path": p, "content": f.text, "tokens": f.tokens, "truncated": f.truncated}
            for p, f in zip(chosen, fitted, strict=False)  # fitted may stop early
            if f is not None
        ]
        left_out = chosen[len(files) :] + not_included
        budget = {"max_tokens": max_tokens, "used_tokens": used, "dropped": len(left_out)}
        return {"files": files, "not_included": left_out, "count": len(files), "budget": budget}

    return fit_response(texts, fit_in_order, render, max_tokens)
