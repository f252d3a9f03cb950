"""Chunk and file retrieval: ``get_chunk``, its neighbours, ``get_file`` and its sections.

Functions over a read-only connection (an :class:`~rifflux.search.snapshot.IndexSnapshot`'s);
:class:`~rifflux.search.service.SearchService` hands them its thread's connection and turns
a damaged database into one line.

Invariants:

* A chunk reads as a search result does (``chunk_id``, ``path``, ``heading_path``,
  ``chunk_index``, ``content``: :func:`chunk_dict`); ``get_chunk`` and ``get_file`` add
  ``headings``, the headings that start in the chunk (``[{offset, heading_path}]``; None
  in a row an older Rifflux wrote). Search results never carry ``headings``.
* Each call reads in one read transaction, so a chunk and its neighbours, or a file and
  its chunks, come from one state of the index. Nothing here reads the filesystem except
  :func:`absolute_path`'s working-directory fallback, which reads nothing either.
* A file is named by its stored path, as results show it, or by any other spelling of
  the same place (:func:`find_file`): its absolute path, or a path relative to the
  index's base directory such as ``./docs/a.md``; compared lexically, never on disk.
* ``heading``: a file's section and its subsections (``sections.py``); a merged chunk
  holding more than the section is cut to the section's part, keeping its ``chunk_id``
  and ``chunk_index``. ``max_tokens``: chunks in order while the answer ``{"file": …}`` fits it
  (``budget.py``).
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rifflux.errors import NotFoundError, echo
from rifflux.index.scan import to_rel_path
from rifflux.search.budget import Fitted, fit_in_order, fit_response
from rifflux.search.sections import (
    ChunkHeadings,
    breadcrumbs,
    resolve_heading,
    section_parts,
)
from rifflux.store.connection import transaction
from rifflux.store.reader import IndexReader, get_metadata
from rifflux.store.rows import headings_from_json


def chunk_dict(row: sqlite3.Row) -> dict[str, Any]:
    """A chunk row as a search result shows it (without ``score_breakdown``)."""
    return {
        "chunk_id": row["chunk_id"],
        "path": row["path"],
        "heading_path": row["heading_path"],
        "chunk_index": int(row["chunk_index"]),
        "content": row["content"],
    }


def chunks_by_rowids(conn: sqlite3.Connection, row_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """The chunks of ``row_ids`` that still exist, by rowid, as :func:`chunk_dict`."""
    if not row_ids:
        return {}
    rows = IndexReader(conn).chunks_by_rowids(row_ids)
    return {int(row["id"]): chunk_dict(row) for row in rows}


def chunk_details(reader: IndexReader, rows: Sequence[sqlite3.Row]) -> list[dict[str, Any]]:
    """Chunks as ``get_chunk`` and ``get_file`` show them: :func:`chunk_dict` and
    ``headings``."""
    stored = reader.headings_of_rowids(int(row["id"]) for row in rows)
    return [
        {**chunk_dict(row), "headings": headings_from_json(stored.get(int(row["id"])))}
        for row in rows
    ]


def get_chunk(conn: sqlite3.Connection, chunk_id: str) -> dict[str, Any]:
    """A chunk as search results show it, with ``headings`` added."""
    reader = IndexReader(conn)
    with transaction(conn, write=False):
        row = reader.chunk_by_id(chunk_id)
        if row is None:
            raise NotFoundError(f"no chunk with id {chunk_id!r} in the index")
        return chunk_details(reader, [row])[0]


MIN_CHUNK_ID_PREFIX = 8
"""Hex digits of a chunk id that a short id shows and a prefix must give, at least."""

_HEX = frozenset("0123456789abcdef")


def resolve_chunk_id(conn: sqlite3.Connection, given: str) -> str:
    """The full chunk id that ``given`` (a full id, or a unique prefix of at least
    :data:`MIN_CHUNK_ID_PREFIX` hex digits, as ``rifflux search`` shows it) names."""
    prefix = given.strip().lower()
    if len(prefix) < MIN_CHUNK_ID_PREFIX or not set(prefix) <= _HEX:
        raise NotFoundError(
            f"{echo(given)} is not a chunk id; give the id, or at least its first "
            f"{MIN_CHUNK_ID_PREFIX} hex digits, as search results show it"
        )
    with transaction(conn, write=False):
        count, first = IndexReader(conn).chunk_ids_with_prefix(prefix)
    if count == 0 or first is None:
        raise NotFoundError(f"no chunk with id {echo(given)} in the index")
    if count > 1:
        raise NotFoundError(
            f"chunk id prefix {echo(given)} matches {count} chunks; give more of its hex digits"
        )
    return str(first)


def short_chunk_ids(conn: sqlite3.Connection, chunk_ids: Sequence[str]) -> dict[str, str]:
    """``{chunk_id: its shortest unique prefix}`` in the index, at least
    :data:`MIN_CHUNK_ID_PREFIX` digits: what :func:`resolve_chunk_id` takes back."""
    reader = IndexReader(conn)
    short = {}
    with transaction(conn, write=False):
        for chunk_id in chunk_ids:
            length = MIN_CHUNK_ID_PREFIX
            for other in reader.chunk_ids_beside(chunk_id):
                if other is not None:
                    length = max(length, _shared_prefix(chunk_id, other) + 1)
            short[chunk_id] = chunk_id[:length]
    return short


def _shared_prefix(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    shared = 0
    while shared < min(len(a), len(b)) and a[shared] == b[shared]:
        shared += 1
    return shared


def chunk_with_neighbors(conn: sqlite3.Connection, chunk_id: str, count: int) -> dict[str, Any]:
    """``{chunk}``; with ``count`` ≥ 1 also ``before`` and ``after``: up to that many
    chunks of the same file on each side, in file order (one read snapshot). ``count``
    is checked (``request.check_neighbors``)."""
    reader = IndexReader(conn)
    with transaction(conn, write=False):
        chunk = get_chunk(conn, chunk_id)
        if not count:
            return {"chunk": chunk}
        file_id = reader.file_id_of_chunk(chunk_id)
        index = chunk["chunk_index"]
        rows = reader.chunks_of_file_between(int(file_id or 0), index - count, index + count)
        around = chunk_details(reader, rows)
    return {
        "chunk": chunk,
        "before": [c for c in around if c["chunk_index"] < index],
        "after": [c for c in around if c["chunk_index"] > index],
    }


def get_file(
    conn: sqlite3.Connection, path: str, *, heading: str | None = None, budget: int | None = None
) -> dict[str, Any]:
    """An indexed file's chunks, by its stored path. Never reads the filesystem.

    ``heading``: only that section and its subsections (rifflux.search.sections), the
    resolved path under ``heading``; a merged chunk is cut to the section's part.
    ``budget`` (a checked ``max_tokens``): chunks in order while they fit, the next cut
    to its beginning; each chunk gains ``tokens`` and ``truncated`` and the file a
    ``budget``.
    """
    reader = IndexReader(conn)
    with transaction(conn, write=False):
        file_row = find_file(reader, path)
        if file_row is None:
            raise NotFoundError(
                f"{echo(path)} is not an indexed file; pass a path as search results show it, "
                "or its absolute path"
            )
        chunks = chunk_details(reader, reader.chunks_of_file(int(file_row["id"])))
    found: dict[str, Any] = {"path": file_row["path"], "sha256": file_row["sha256"]}
    if heading is not None:
        found["heading"], chunks = section_chunks(chunks, heading, str(file_row["path"]))
    if budget is not None:
        return _fit_chunks(found, chunks, budget)
    found["chunks"] = chunks
    return found


def _fit_chunks(found: dict[str, Any], chunks: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    """``found`` with the chunks that fit in order (the last one cut) and a ``budget``,
    so that ``{"file": found}`` (the MCP tool's and ``get-file --json``'s answer) is at
    most ``budget`` tokens (``budget.fit_response``)."""

    def render(fitted: Sequence[Fitted | None], used: int) -> dict[str, Any]:
        kept = [
            {
                **c,
                "content": f.text,
                "headings": headings_within(c["headings"], len(f.text)),
                "tokens": f.tokens,
                "truncated": f.truncated,
            }
            for c, f in zip(chunks, fitted, strict=False)  # fitted may stop early
            if f is not None
        ]
        shown = {
            **found,
            "budget": {
                "max_tokens": budget,
                "used_tokens": used,
                "dropped": len(chunks) - len(kept),
            },
            "chunks": kept,
        }
        return {"file": shown}

    texts = [c["content"] for c in chunks]
    fitted: dict[str, Any] = fit_response(texts, fit_in_order, render, budget)["file"]
    return fitted


def section_chunks(
    chunks: list[dict[str, Any]], heading: str, file_path: str
) -> tuple[str, list[dict[str, Any]]]:
    """The section ``heading`` names and its chunks: a chunk holding more than the section
    (a merged chunk) is cut to the section's part (rifflux.search.sections), keeping its
    ``chunk_id`` and ``chunk_index``, with that part's breadcrumb and headings."""
    views = [
        ChunkHeadings(
            c["heading_path"],
            len(c["content"]),
            None
            if c["headings"] is None
            else [(h["offset"], h["heading_path"]) for h in c["headings"]],
        )
        for c in chunks
    ]
    section = resolve_heading(heading, breadcrumbs(views), file_path)
    found = []
    for part in section_parts(views, section):
        chunk = chunks[part.position]
        if part.start == 0 and part.end == len(chunk["content"]):
            found.append(chunk)
            continue
        found.append(
            {
                **chunk,
                "heading_path": part.heading_path,
                "content": chunk["content"][part.start : part.end].rstrip(),
                "headings": [
                    {**h, "offset": h["offset"] - part.start}
                    for h in chunk["headings"] or ()
                    if part.start <= h["offset"] < part.end
                ],
            }
        )
    return section, found


def headings_within(
    headings: list[dict[str, Any]] | None, length: int
) -> list[dict[str, Any]] | None:
    """The headings that start within a chunk's first ``length`` characters (a cut one)."""
    return None if headings is None else [h for h in headings if h["offset"] < length]


def find_file(reader: IndexReader, path: str) -> sqlite3.Row | None:
    """The file row ``path`` names: a stored path as results show it, else the same place
    spelled otherwise (absolute, or relative to the index's base directory with ``./``
    or ``..``), made the stored form lexically (``scan.to_rel_path``) and looked up."""
    row = reader.file_by_path(path)
    if row is not None:
        return row
    base = reader.metadata("base_dir")
    if not base:
        return None
    stored = stored_form(path, base)
    return None if stored == path else reader.file_by_path(stored)


def stored_form(path: str, base: str) -> str:
    """``path`` as the index stores it: read against ``base`` when relative, normalised,
    then relative to ``base`` when under it (else absolute). Lexical: reads no file."""
    absolute = os.path.normpath(os.path.join(base, os.path.expanduser(path)))
    return to_rel_path(absolute, Path(base))


def absolute_path(stored_path: str, base_dir: Callable[[], str | None]) -> Path:
    """Where an indexed file lives: its stored path against the index's base_dir (read
    by ``base_dir`` only for a relative path; none stored: the working directory)."""
    return Path(absolute_text(stored_path, base_dir))


def absolute_text(stored_path: str, base_dir: Callable[[], str | None]) -> str:
    """:func:`absolute_path` as text (no ``Path`` built: searches place many paths)."""
    if stored_path.startswith("/"):
        return stored_path
    return os.path.join(base_dir() or os.getcwd(), stored_path)


def placer(conn: sqlite3.Connection) -> Callable[[str], str]:
    """Where a stored path lives (:func:`absolute_text`), the base_dir read once."""
    base_dir = functools.cache(lambda: stored_base_dir(conn))
    return lambda stored_path: absolute_text(stored_path, base_dir)


def stored_base_dir(conn: sqlite3.Connection) -> str | None:
    """The directory the index's relative paths are relative to."""
    return get_metadata(conn, "base_dir")
