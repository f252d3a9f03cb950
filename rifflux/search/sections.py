"""A file's section by heading path: ``get_file``'s ``heading`` argument.

Invariants:

* The sections of a file are every prefix of its chunks' ``heading_path`` breadcrumbs
  (``Guide > Install > Linux`` gives ``Guide``, ``Guide > Install`` and itself), so a
  heading with no text of its own directly under it is still a section.
* A request names a section by its path or any suffix of it that starts at a word,
  compared case-insensitively with the spaces around ``>`` ignored: ``install``,
  ``Guide > Install`` and ``guide>install`` all name ``Guide > Install``, and ``vector
  cache`` names ``Guide > The vector cache`` (``stall`` names nothing). A full path wins
  over suffixes of longer ones; otherwise more than one match is an error that lists them.
* A section is its heading's chunks and those of every subsection, in file order.
* An unknown heading is a one-line error listing up to ``MAX_SUGGESTIONS`` headings of
  the file, closest first: those containing the text, then by difflib's ratio to the
  section's own heading or its whole path (lower-cased).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from rifflux.errors import InvalidQueryError, NotFoundError

SEPARATOR = " > "
MAX_SUGGESTIONS = 10


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
