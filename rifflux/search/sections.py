"""A file's section by heading path: ``get_file``'s ``heading`` argument.

Invariants:

* The sections of a file are every prefix of its breadcrumbs: each chunk's
  ``heading_path`` and those of the headings recorded inside it (a merged chunk's
  ``headings``: ``Guide`` holding ``## Install`` and ``### Linux``), so ``Guide > Install
  > Linux`` gives ``Guide``, ``Guide > Install`` and itself, and a heading with no text of
  its own directly under it is still a section.
* A request names a section by its path or any suffix of it that starts at a word,
  compared case-insensitively with the spaces around ``>`` ignored: ``install``,
  ``Guide > Install`` and ``guide>install`` all name ``Guide > Install``, and ``vector
  cache`` names ``Guide > The vector cache`` (``stall`` names nothing). A full path wins
  over suffixes of longer ones; otherwise more than one match is an error that lists them.
* A chunk is cut into parts at its recorded heading offsets (``parts_of``): the part
  before its first heading belongs to its ``heading_path``, each other part to its
  heading. A chunk whose headings are not recorded (an older index) is one part.
* A section is the parts of its heading and of every subsection, in file order
  (``section_parts``); the adjacent parts of one chunk join, so a chunk wholly inside the
  section is one part from 0 to its end.
* An unknown heading is a one-line error listing up to ``MAX_SUGGESTIONS`` headings of
  the file, closest first: those containing the text, then by difflib's ratio to the
  section's own heading or its whole path (lower-cased).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import NamedTuple

from rifflux.errors import InvalidQueryError, NotFoundError

SEPARATOR = " > "
MAX_SUGGESTIONS = 10


class Part(NamedTuple):
    """``content[start:end]`` of the chunk at ``position`` in a file's chunk list, whose
    breadcrumb at ``start`` is ``heading_path``."""

    position: int
    start: int
    end: int
    heading_path: str


class ChunkHeadings(NamedTuple):
    """What sections read of a chunk: its breadcrumb, its length and the ``(offset,
    heading_path)`` of the headings that start in it (None: not recorded)."""

    heading_path: str
    length: int
    headings: Sequence[tuple[int, str]] | None


def parts_of(index: int, chunk: ChunkHeadings) -> list[Part]:
    """The chunk cut at its headings, in order, covering ``[0, length)``."""
    marks = sorted(chunk.headings or ())
    if not marks or marks[0][0] > 0:
        marks.insert(0, (0, chunk.heading_path))
    ends = [offset for offset, _ in marks[1:]] + [chunk.length]
    return [
        Part(index, offset, end, path)
        for (offset, path), end in zip(marks, ends, strict=True)
        if end > offset
    ]


def breadcrumbs(chunks: Sequence[ChunkHeadings]) -> list[str]:
    """Every breadcrumb of a file's parts, in file order (for :func:`resolve_heading`)."""
    return [part.heading_path for i, chunk in enumerate(chunks) for part in parts_of(i, chunk)]


def section_parts(chunks: Sequence[ChunkHeadings], section: str) -> list[Part]:
    """The parts of ``section`` and its subsections, adjacent parts of a chunk joined."""
    found: list[Part] = []
    for index, chunk in enumerate(chunks):
        for part in parts_of(index, chunk):
            if not in_section(part.heading_path, section):
                continue
            if found and found[-1].position == index and found[-1].end == part.start:
                found[-1] = found[-1]._replace(end=part.end)
            else:
                found.append(part)
    return found


def _parts(path: str) -> tuple[str, ...]:
    return tuple(part.strip().lower() for part in path.split(">") if part.strip())


def sections_of(heading_paths: Sequence[str]) -> list[str]:
    """Every section path of a file, in first-appearance order."""
    seen: dict[str, None] = {}
    for heading_path in heading_paths:
        parts = [p.strip() for p in heading_path.split(SEPARATOR.strip()) if p.strip()]
        for end in range(1, len(parts) + 1):
            seen.setdefault(SEPARATOR.join(parts[:end]), None)
    return list(seen)


def resolve_heading(heading: str, heading_paths: Sequence[str], file_path: str) -> str:
    """The one section of the file that ``heading`` names (see module docstring)."""
    wanted = _parts(heading)
    if not wanted:
        raise InvalidQueryError("heading must name a heading path such as 'Guide > Install'")
    sections = sections_of(heading_paths)
    exact = [s for s in sections if _parts(s) == wanted]
    if len(exact) == 1:
        return exact[0]
    text = " > ".join(wanted)
    # Parts are joined with " > ", so a suffix of whole parts also ends after a space.
    matches = [s for s in sections if " > ".join(_parts(s)).endswith(" " + text)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        listed = "; ".join(matches[:MAX_SUGGESTIONS])
        raise InvalidQueryError(
            f"heading {heading!r} matches {len(matches)} sections of {file_path}: {listed}; "
            "pass more of the path"
        )
    closest = sorted(sections, key=lambda s: _distance(wanted, s))[:MAX_SUGGESTIONS]
    listed = "; ".join(closest) if closest else "none (the file has no headings)"
    raise NotFoundError(f"no heading {heading!r} in {file_path}; close headings: {listed}")


def _distance(wanted: tuple[str, ...], section: str) -> tuple[bool, float]:
    """Sort key of a suggestion: sections containing the text first, then by similarity of
    the text to the section's own heading or to its whole path, whichever is closer."""
    text, path = " > ".join(wanted), section.lower()
    leaf = _parts(section)[-1]
    ratio = max(
        difflib.SequenceMatcher(None, text, leaf).ratio(),
        difflib.SequenceMatcher(None, text, path).ratio(),
    )
    return text not in path, -ratio


def in_section(heading_path: str, section: str) -> bool:
    """True if a chunk with ``heading_path`` lies in ``section`` or one of its subsections."""
    parts, target = _parts(heading_path), _parts(section)
    return parts[: len(target)] == target
