"""The hard cap on a chunk's size: ``HARD_CAP_FACTOR`` × ``max_chars``, whatever the text.

The chunker keeps code whole, so without the cap one unclosed fence would make a whole
file one chunk (2,000,007 characters for a 2 MB file). Every chunk fits the cap;
the chunker calls :func:`cap_spans` on the few drafts that do not, last, so a chunk
within the cap is never changed by it.

Invariants of :func:`cap_spans`:

* every piece is a stripped, non-empty slice of the span, in order, at most ``cap``
  characters long, and the pieces together hold every non-whitespace character of it;
* a span within the cap is returned as it is;
* a span over the cap becomes ``ceil(size / cap)`` pieces of about equal size where its
  lines allow (no ragged one-line tail), each cut at the line break nearest its share
  (an equal part of what is left);
  a line longer than the cap is cut at its last whitespace within the cap, else hard at
  the cap (Python strings are code points, so a cut never splits a character);
* pieces are plain slices: no fence marker is added to re-open or close a split code
  block, because a chunk's content is always the author's text (``get_file`` slices it
  at recorded heading offsets, and concatenating a file's chunks gives its text back);
  the first piece of a split fence opens it and the last closes it, as the file does;
* deterministic and linear in the span's size: each cut scans at most ``cap`` characters;
  a cut at a line break advances by at least ``cap / 4`` (a share is at least half the
  cap), and a cut at the last whitespace of its window is followed by one beyond it.
"""

from __future__ import annotations

import re

HARD_CAP_FACTOR = 4
"""No chunk exceeds this many times ``max_chars`` (``RIFFLUX_MAX_CHUNK_CHARS``): code
between ``max_chars`` and the cap stays whole; beyond the cap it is split at lines."""

_UP_TO_LAST_SPACE = re.compile(r".*\s", re.S)
_SPACES = re.compile(r"\s*")


def hard_cap(max_chars: int) -> int:
    """The most characters a chunk may hold when prose chunks hold ``max_chars``."""
    return HARD_CAP_FACTOR * max_chars


def cap_spans(src: str, start: int, end: int, cap: int) -> list[tuple[int, int]]:
    """``src[start:end]`` (stripped) as pieces of at most ``cap`` characters (see the
    module docstring)."""
    if cap < 1:
        raise ValueError(f"cap must be at least 1, got {cap}")
    pieces: list[tuple[int, int]] = []
    while end - start > cap:
        count = -(-(end - start) // cap)
        share = -(-(end - start) // count)
        cut = _cut(src, start, start + share, start + cap)
        piece_end = start + len(src[start:cut].rstrip())
        pieces.append((start, piece_end))
        spaces = _SPACES.match(src, cut, end)
        assert spaces is not None  # \s* matches anywhere, if only the empty string
        start = spaces.end()
    pieces.append((start, end))
    return pieces


def _cut(src: str, start: int, share: int, limit: int) -> int:
    """Where the piece starting at ``start`` (non-whitespace) ends, in ``(start, limit]``:
    the line break nearest ``share`` (one before it only if the piece keeps at least half
    its share), else the last whitespace, else ``limit``."""
    after = src.find("\n", share, limit + 1)
    before = src.rfind("\n", start + (share - start) // 2 + 1, share)
    if before > start and (after < 0 or share - before < after - share):
        return before
    if after > start:
        return after
    space = _UP_TO_LAST_SPACE.match(src, start + 1, limit + 1)
    return space.end() - 1 if space is not None else limit
