"""Heading-aware chunking of markdown and plain text into retrieval-sized pieces.

Markdown's block structure is found once, as markdown-it-py's block parser finds it (by the
faster ``blocks.scan``, which re-implements its rules, or by markdown-it itself when the
scan is unsure), and every chunk is a slice of the source text (newlines normalised to
``\\n``), so what we index is what the author wrote, not a re-rendering. The rules, in the
order they apply:

- a section starts at every top-level heading (ATX or setext) and carries the breadcrumb of the
  headings above it; YAML (``---``) or TOML (``+++``) front matter reaching the chunker is kept
  as text, never parsed (``rifflux.index.prepare`` strips a well-formed block before, through
  ``rifflux.index.frontmatter``, and passes its ``title``);
- a section's blocks are packed greedily up to ``max_chars``; a block that does not fit is split
  along its own structure (list items, blockquote children, table rows with the header
  repeated), then on sentence boundaries, then on whitespace;
- fenced and indented code is never split up to the hard cap (``cap.HARD_CAP_FACTOR`` ×
  ``max_chars``): an oversized code block becomes a chunk of its own, and one beyond the
  cap is cut at line breaks into pieces within it (``cap.py``);
- a chunk shorter than ``min_chars`` is merged into the preceding chunk if the result fits in
  ``max_chars``, else into the following one, else kept as is;
- nothing is dropped: every non-whitespace character of the input lands in some chunk;
- no chunk exceeds the hard cap; the cap applies last, to the few chunks over it, so it
  changes no other chunk (a file's later chunks only shift their ``chunk_index``);
- a chunk records every top-level heading that starts in it (``headings``: its offset in
  ``content`` and its breadcrumb), so a merged chunk, whose ``heading_path`` is its first
  heading's, still names the sections it holds.
"""

from __future__ import annotations

import hashlib
import re
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import PurePosixPath
from typing import NamedTuple

from markdown_it import MarkdownIt

from rifflux.index import blocks as block_scan
from rifflux.index.blocks import CODE, HEADING, OTHER, TABLE, Opener
from rifflux.index.cap import cap_spans, hard_cap

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown", ".mdx"})
"""Lower-cased file suffixes chunked as markdown; every other file is chunked as plain text."""

HEADING_SEPARATOR = " > "
"""Joins heading texts into a chunk's ``heading_path`` breadcrumb."""

# Chunking needs only block structure and line maps; the inline rules would roughly double the
# parse time without changing either. "reference" is off so that link definitions stay ordinary
# paragraphs with a line map, rather than tokenless lines absorbed into the block before them.
_MD = MarkdownIt("commonmark").enable("table").disable(["inline", "text_join", "reference"])

FAST_BLOCK_SCAN = True
"""Find block structure with ``blocks.scan`` (markdown-it's algorithm without its token
stream, ~4x less CPU) rather than markdown-it; tests turn it off to compare the two."""

_OPENER_KINDS = {"heading_open": HEADING, "fence": CODE, "code_block": CODE, "table_open": TABLE}
_FRONT_MATTER = re.compile(r"\A(---|\+\+\+)[ \t]*\n(?P<body>(?:.*?\n)?)\1[ \t]*(?:\n|\Z)", re.S)
_FRONT_MATTER_TITLE = re.compile(r"^title[ \t]*[:=][ \t]*(.*?)[ \t]*$", re.M)
_NEWLINES = re.compile(r"\r\n?")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_SPACES = re.compile(r"\s*")
_UP_TO_LAST_SPACE = re.compile(r".*\s", re.S)
_REPEATED_SLASHES = re.compile(r"/{2,}")


class HeadingMark(NamedTuple):
    """A heading that starts inside a chunk: where in its content, and its breadcrumb."""

    offset: int  # characters (code points) into the chunk's content
    heading_path: str  # the heading's full breadcrumb, e.g. "Guide > Install > Linux"


@dataclass(frozen=True, slots=True)
class Chunk:
    """One retrieval unit: a stripped slice of the source and the headings above it."""

    chunk_index: int  # 0-based position in the file
    heading_path: str  # e.g. "Guide > Install > Linux"; "" outside any heading
    content: str  # markdown source slice, stripped
    headings: tuple[HeadingMark, ...] = ()  # top-level headings starting in it, in order
    # Where its source slice (the content after a repeated table header) starts in the
    # normalised text: how a line of the file finds its chunk (rifflux.store.grep_text).
    # Not part of what a chunk is: two chunks of the same text compare equal.
    start: int = field(default=0, compare=False)


class _Atom(NamedTuple):
    """A stripped source span ``[start, end)`` that the packer places whole."""

    start: int
    end: int
    lead: str = ""  # repeated in front when this atom opens a chunk: a split table's header
    atomic: bool = False  # code: never split, so it may exceed the limit
    sticky: bool = False  # a heading: the next atom always joins its chunk


@dataclass(slots=True)
class _Draft:
    """A chunk under construction; its content is ``lead + src[start:end]``."""

    start: int
    end: int
    lead: str
    path: str
    glued: int = -1  # where the atom glued after a sticky heading starts; -1: none

    @property
    def size(self) -> int:
        return len(self.lead) + self.end - self.start


class _Block(NamedTuple):
    """A top-level block and the source lines it owns, up to the next top-level block."""

    lo: int  # first line
    hi: int  # one past the last line
    tok: int  # index of the opener; -1 for front matter
    tok_end: int  # index of the next top-level opener


class _Mark(NamedTuple):
    """Where a nested block starts inside an oversized top-level block."""

    line: int
    level: int
    code: bool


class _Lines:
    """Source text with line start offsets, to turn token line maps into character spans."""

    __slots__ = ("count", "parts", "src", "starts")

    def __init__(self, src: str) -> None:
        self.src = src
        self.parts = src.split("\n")  # also the block scan's lines
        self.starts = block_scan.line_starts(src, self.parts)
        self.count = len(self.starts) - 1

    def span(self, lo: int, hi: int) -> tuple[int, int] | None:
        """Stripped character span of lines ``[lo, hi)``, or None if they are blank."""
        return _strip_span(self.src, self.starts[lo], self.starts[hi])


def chunk_document(
    text: str, rel_path: str, *, max_chars: int, min_chars: int, title: str = ""
) -> list[Chunk]:
    """Chunk a file's text, as markdown or plain text according to its suffix.

    ``title``: a markdown document's title from front matter already stripped from
    ``text`` (rifflux.index.frontmatter); it names the document as a front matter title
    does (below)."""
    suffix = PurePosixPath(normalize_rel_path(rel_path)).suffix.lower()
    if suffix in MARKDOWN_SUFFIXES:
        return chunk_markdown(text, max_chars=max_chars, min_chars=min_chars, title=title)
    return chunk_plain_text(text, max_chars=max_chars, min_chars=min_chars)


def chunk_markdown(text: str, *, max_chars: int, min_chars: int, title: str = "") -> list[Chunk]:
    """Split markdown into heading-aware chunks of source text (see the module docstring).

    ``title`` names the document when it has no H1 and no front matter of its own."""
    _check_limits(max_chars, min_chars)
    src = normalize_text(text)
    if not src.strip():
        return []
    lines = _Lines(src)
    body_line = 0
    front = _FRONT_MATTER.match(src)
    if front:
        newlines = front.group(0).count("\n")
        body_line = newlines if front.group(0).endswith("\n") else newlines + 1
        title = _front_matter_title(front.group("body"))
    openers = _openers(lines, body_line, front.end() if front else 0)
    tops = _Tops(openers, body_line, lines.count)
    sections = _sections(tops, title)
    drafts = [
        draft
        for number, (path, first, end) in enumerate(sections)
        for draft in _section_drafts(lines, tops, first, end, path, max_chars, number == 0)
    ]
    drafts = _capped(src, _merge_small(drafts, max_chars, min_chars), hard_cap(max_chars))
    return _chunks(src, drafts, _heading_marks(lines, tops, sections))


def chunk_plain_text(text: str, *, max_chars: int, min_chars: int) -> list[Chunk]:
    """Split plain text on blank lines, pack paragraphs up to max_chars, split long ones."""
    _check_limits(max_chars, min_chars)
    src = normalize_text(text)
    bounds = [0]
    for match in _PARAGRAPH_BREAK.finditer(src):
        bounds += [match.start(), match.end()]
    bounds.append(len(src))
    atoms: list[_Atom] = []
    for start, end in zip(bounds[::2], bounds[1::2], strict=True):
        span = _strip_span(src, start, end)
        if span is None:
            continue
        if span[1] - span[0] <= max_chars:
            atoms.append(_Atom(*span))
        else:
            atoms += _prose_atoms(src, *span, max_chars)
    return _chunks(src, _merge_small(_pack(atoms, max_chars, ""), max_chars, min_chars))


def normalize_rel_path(rel_path: str) -> str:
    """POSIX separators, no "./" or empty segments; case and ".." are left alone."""
    path = _REPEATED_SLASHES.sub("/", rel_path.replace("\\", "/"))
    root = "/" if path.startswith("/") else ""
    return root + "/".join(part for part in path.split("/") if part not in ("", "."))


def _chunk_id(normalized_path: str, chunk_index: int) -> str:
    """Stable chunk id: hex sha256 of "<normalised path>::<index>"."""
    return hashlib.sha256(f"{normalized_path}::{chunk_index}".encode()).hexdigest()


def chunk_id_for(rel_path: str, chunk_index: int) -> str:
    return _chunk_id(normalize_rel_path(rel_path), chunk_index)


def chunk_ids_for(rel_path: str, count: int) -> list[str]:
    """``chunk_id_for`` of chunks ``0 .. count - 1`` of one file, its path normalised once."""
    path = normalize_rel_path(rel_path)
    return [_chunk_id(path, i) for i in range(count)]


def _check_limits(max_chars: int, min_chars: int) -> None:
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    if not 0 <= min_chars <= max_chars:
        raise ValueError(
            f"min_chars must be between 0 and max_chars ({max_chars}), got {min_chars}"
        )


def normalize_text(text: str) -> str:
    """Newlines as ``\\n`` and no byte order mark: the text the chunker slices (markdown-it
    counts lines on ``\\n`` only) and grep searches."""
    text = text.removeprefix("\ufeff")
    # Most texts have no "\r": a memchr scan then spares a regex pass over the whole text.
    return _NEWLINES.sub("\n", text) if "\r" in text else text


def _strip_span(src: str, start: int, end: int) -> tuple[int, int] | None:
    piece = src[start:end]
    stripped = piece.strip()
    if not stripped:
        return None
    start += len(piece) - len(piece.lstrip())
    return start, start + len(stripped)


def _front_matter_title(body: str) -> str:
    match = _FRONT_MATTER_TITLE.search(body)
    return match.group(1).strip("'\"").strip() if match else ""


def _openers(lines: _Lines, body_line: int, body_start: int) -> list[Opener]:
    """Every opening block token with a line map, but ``inline``, in stream order, for the
    text from line ``body_line`` (offset ``body_start``) on: front matter is not markdown."""
    src = lines.src
    if FAST_BLOCK_SCAN and block_scan.enabled():
        try:
            # No block rule looks back, so the scan can start at the body's first line.
            return block_scan.scan(src, body_line, lines.parts, lines.starts)
        except block_scan.Unsure:
            pass  # markdown-it below decides
    if body_line:
        # Blank lines in place of the front matter keep token line maps aligned with `src`.
        src = "\n" * src.count("\n", 0, body_start) + src[body_start:]
    try:
        tokens = _MD.parse(src)
    except Exception:  # markdown-it's own faults on hostile input
        # No structure then: the body is one block, cut by the size bounds, rather than
        # a batch whose every file fails with this one.
        return [(body_line, 0, OTHER, 0, "")]
    return [
        (token.map[0], token.level, kind, int(token.tag[1]), tokens[index + 1].content)
        if (kind := _OPENER_KINDS.get(token.type, OTHER)) == HEADING
        else (token.map[0], token.level, kind, 0, "")
        for index, token in enumerate(tokens)
        if token.nesting != -1 and token.map and token.type != "inline"
    ]


class _Tops:
    """The top-level blocks: the openers at level 0, each owning the lines up to the next.

    Blocks are made (``block``) only for a section too large to be one chunk: most are not.
    """

    __slots__ = ("body_line", "index", "line_count", "openers")

    def __init__(self, openers: list[Opener], body_line: int, line_count: int) -> None:
        self.openers = openers
        self.index = [k for k, opener in enumerate(openers) if opener[1] == 0]
        self.body_line = body_line
        self.line_count = line_count

    def lo(self, k: int) -> int:
        # The first block also owns any leading lines, so no source line is left unowned;
        # with front matter, the front matter block owns it (``front``).
        return self.body_line if k == 0 else self.openers[self.index[k]][0]

    def hi(self, k: int) -> int:
        return self.openers[self.index[k + 1]][0] if k + 1 < len(self.index) else self.line_count

    def block(self, k: int) -> _Block:
        end = self.index[k + 1] if k + 1 < len(self.index) else len(self.openers)
        return _Block(self.lo(k), self.hi(k), self.index[k], end)

    def front(self) -> _Block | None:
        return _Block(0, self.body_line, -1, -1) if self.body_line else None


def _sections(tops: _Tops, title: str) -> list[tuple[str, int, int]]:
    """Group top-level blocks under their headings: ``(path, first, end)`` ranges of block
    numbers, the preamble first (possibly empty), then one section per heading."""
    openers = tops.openers
    # A front matter title names the document only when no H1 does.
    has_h1 = any(openers[i][2] == HEADING and openers[i][3] == 1 for i in tops.index)
    stack = [(0, title)] if title and not has_h1 else []
    sections: list[tuple[str, int, int]] = []
    path, first = title if stack else "", 0
    for k, index in enumerate(tops.index):
        _, _, kind, level, text = openers[index]
        if kind != HEADING:
            continue
        sections.append((path, first, k))
        path, first = push_heading(stack, level, " ".join(text.split())), k
    sections.append((path, first, len(tops.index)))
    return sections


def push_heading(stack: list[tuple[int, str]], level: int, text: str) -> str:
    """Open a heading on a stack of open ``(level, breadcrumb)`` headings: close those at
    its level or deeper, push it and return its breadcrumb, the texts of the headings
    above it and its own joined by ``HEADING_SEPARATOR`` (empty texts left out)."""
    while stack and stack[-1][0] >= level:
        stack.pop()
    above = stack[-1][1] if stack else ""
    crumb = f"{above}{HEADING_SEPARATOR}{text}" if above and text else above or text
    stack.append((level, crumb))
    return crumb


def _heading_marks(
    lines: _Lines, tops: _Tops, sections: list[tuple[str, int, int]]
) -> list[tuple[int, str]]:
    """``(source offset, breadcrumb)`` of every top-level heading, in order: each section
    but the preamble opens with one, at the first non-blank character of its line."""
    marks = []
    for path, first, _ in sections[1:]:
        line = tops.openers[tops.index[first]][0]
        spaces = _SPACES.match(lines.src, lines.starts[line])
        assert spaces is not None  # \s* matches anywhere, if only the empty string
        marks.append((spaces.end(), path))
    return marks


def _section_drafts(
    lines: _Lines, tops: _Tops, first: int, end: int, path: str, max_chars: int, preamble: bool
) -> list[_Draft]:
    """Drafts of the section made of top-level blocks ``[first, end)``, and of the front
    matter if it is the ``preamble``."""
    front = tops.front() if preamble else None
    if end > first:
        hi = tops.hi(end - 1)
    elif front is not None:
        hi = front.hi
    else:
        return []
    whole = lines.span(0 if front else tops.lo(first), hi)
    if whole is None:
        return []
    if whole[1] - whole[0] <= max_chars:
        return [_Draft(*whole, "", path)]
    openers = tops.openers
    blocks = [tops.block(k) for k in range(first, end)]
    if front:
        blocks.insert(0, front)
    atoms: list[_Atom] = []
    for block in blocks:
        span = lines.span(block.lo, block.hi)
        if span is None:
            continue
        is_heading = block.tok >= 0 and openers[block.tok][2] == HEADING
        if not atoms and is_heading and span[1] - span[0] <= max_chars // 2:
            atoms.append(_Atom(*span, sticky=True))
            continue
        limit = max_chars
        if len(atoms) == 1 and atoms[0].sticky:
            # Budget the first block so its first piece fits beside the heading, unless that
            # leaves too little room; then the heading stands alone.
            lead_in = span[0] - atoms[0].start
            if lead_in <= max_chars // 2:
                limit -= lead_in
            else:
                atoms[0] = atoms[0]._replace(sticky=False)
        atoms += _block_atoms(lines, openers, block, span, limit)
    return _pack(atoms, max_chars, path)


def _block_atoms(
    lines: _Lines, openers: Sequence[Opener], block: _Block, span: tuple[int, int], limit: int
) -> list[_Atom]:
    start, end = span
    if end - start <= limit:
        return [_Atom(start, end)]
    if block.tok < 0:  # front matter: split between its lines
        marks = [_Mark(line, 1, False) for line in range(block.lo, block.hi)]
        return _split_lines(lines, block.lo, block.hi, marks, 1, limit)
    line, _, kind, _, _ = openers[block.tok]
    if kind == CODE:
        return [_Atom(start, end, atomic=True)]
    if kind == TABLE:
        return _table_atoms(lines, block, line, limit)
    marks = [
        _Mark(inner[0], inner[1], inner[2] == CODE)
        for inner in openers[block.tok + 1 : block.tok_end]
    ]
    return _split_lines(lines, block.lo, block.hi, marks, 1, limit)


def _split_lines(
    lines: _Lines, lo: int, hi: int, marks: list[_Mark], level: int, limit: int
) -> list[_Atom]:
    """Split lines [lo, hi) at nested block starts, coarsest level first, never inside code."""
    span = lines.span(lo, hi)
    if span is None:
        return []
    if span[1] - span[0] <= limit:
        return [_Atom(*span)]
    inside = [mark for mark in marks if lo <= mark.line < hi]
    deeper = [mark for mark in inside if mark.level >= level]
    if not deeper:
        if any(mark.code for mark in inside):
            return [_Atom(*span, atomic=True)]
        return _prose_atoms(lines.src, *span, limit)
    cuts = sorted({mark.line for mark in deeper if mark.level == level and mark.line > lo})
    return [
        atom
        for part_lo, part_hi in pairwise([lo, *cuts, hi])
        for atom in _split_lines(lines, part_lo, part_hi, deeper, level + 1, limit)
    ]


def _table_atoms(lines: _Lines, block: _Block, table_line: int, limit: int) -> list[_Atom]:
    """One atom per body row, each carrying the header to repeat when it opens a chunk."""
    header = lines.span(block.lo, table_line + 2)  # header row and delimiter row
    assert header is not None, "a parsed table always has a header row"
    lead = lines.src[header[0] : header[1]] + "\n"
    if len(lead) > limit // 2:
        lead = ""  # repeating a huge header would crowd out the rows it is meant to label
    atoms: list[_Atom] = []
    header_pending = True
    for line in range(table_line + 2, block.hi):
        row = lines.span(line, line + 1)
        if row is None:
            continue
        if header_pending:
            header_pending = False
            if row[1] - header[0] <= limit:
                atoms.append(_Atom(header[0], row[1]))
                continue
            atoms += _prose_atoms(lines.src, *header, limit)
        if len(lead) + row[1] - row[0] <= limit:
            atoms.append(_Atom(*row, lead=lead))
        else:
            atoms += _prose_atoms(lines.src, *row, limit)
    if header_pending:
        atoms += _prose_atoms(lines.src, *header, limit)
    return atoms


def _prose_atoms(src: str, start: int, end: int, limit: int) -> list[_Atom]:
    """Sentences, with any sentence longer than the limit hard-split on whitespace."""
    atoms = []
    for first, last in _sentences(src, start, end):
        if last - first <= limit:
            atoms.append(_Atom(first, last))
        else:
            atoms += [_Atom(*piece) for piece in _hard_split(src, first, last, limit)]
    return atoms


def _sentences(src: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    for match in _SENTENCE_BREAK.finditer(src, start, end):
        yield start, match.start()
        start = match.end()
    yield start, end


def _hard_split(src: str, start: int, end: int, limit: int) -> Iterator[tuple[int, int]]:
    """Cut at the last whitespace within the limit; a word longer than the limit is cut."""
    while end - start > limit:
        match = _UP_TO_LAST_SPACE.match(src, start + 1, start + limit + 1)
        if match is None:
            yield start, start + limit
            start += limit
            continue
        space = match.end() - 1
        yield start, start + len(src[start:space].rstrip())
        spaces = _SPACES.match(src, space)
        assert spaces is not None  # \s* matches anywhere, if only the empty string
        start = spaces.end()
    yield start, end


def _pack(atoms: list[_Atom], limit: int, path: str) -> list[_Draft]:
    """Greedily fill chunks with whole atoms, in order."""
    drafts: list[_Draft] = []
    glue = False
    for atom in atoms:
        if drafts and glue:
            drafts[-1].end, drafts[-1].glued = atom.end, atom.start
        elif drafts and len(drafts[-1].lead) + atom.end - drafts[-1].start <= limit:
            drafts[-1].end = atom.end
        else:
            drafts.append(_Draft(atom.start, atom.end, atom.lead, path))
        glue = atom.sticky
    return drafts


def _merge_small(drafts: list[_Draft], max_chars: int, min_chars: int) -> list[_Draft]:
    """Merge each chunk under min_chars backwards if it fits, else forwards, else keep it.

    Backwards first because the merged chunk keeps the first piece's heading path, so the
    mislabelled text is only ever the small piece. A piece that cannot merge backwards is
    carried into the next chunk (cascading through runs of small sections).
    """
    merged: list[_Draft] = []
    carry: _Draft | None = None
    for draft in drafts:
        if carry is not None:
            if _fits(carry, draft, max_chars):
                draft = _joined(carry, draft)
            else:
                merged.append(carry)
            carry = None
        if draft.size >= min_chars:
            merged.append(draft)
        elif merged and _fits(merged[-1], draft, max_chars):
            merged[-1] = _joined(merged[-1], draft)
        else:
            carry = draft
    if carry is not None:
        merged.append(carry)
    return merged


def _fits(first: _Draft, second: _Draft, max_chars: int) -> bool:
    return len(first.lead) + second.end - first.start <= max_chars


def _joined(first: _Draft, second: _Draft) -> _Draft:
    # Adjacent drafts are separated only by whitespace, so one slice covers both.
    return _Draft(first.start, second.end, first.lead, first.path)


def _capped(src: str, drafts: list[_Draft], cap: int) -> list[_Draft]:
    """Every draft within ``cap``: one over it is cut by ``cap.cap_spans``.

    Only code exceeds ``max_chars`` (a draft over it is one code atom, or a heading with
    the code glued after it), so a draft over the cap holds code. A heading glued to code
    within the cap parts from it instead, so that code within the cap is never split.
    """
    capped: list[_Draft] = []
    for draft in drafts:
        if draft.size <= cap:
            capped.append(draft)
            continue
        if draft.glued >= 0 and draft.end - draft.glued <= cap:
            heading_end = draft.start + len(src[draft.start : draft.glued].rstrip())
            pieces = [(draft.start, heading_end), (draft.glued, draft.end)]
        else:
            pieces = cap_spans(src, draft.start, draft.end, cap - len(draft.lead))
        capped += [
            _Draft(start, end, "" if number else draft.lead, draft.path)
            for number, (start, end) in enumerate(pieces)
        ]
    return capped


def _chunks(src: str, drafts: list[_Draft], marks: Sequence[tuple[int, str]] = ()) -> list[Chunk]:
    """The chunks of ``drafts``, each with the heading ``marks`` (source offset,
    breadcrumb; sorted) that start inside it."""
    offsets = [offset for offset, _ in marks]
    chunks = []
    for index, draft in enumerate(drafts):
        first, last = bisect_left(offsets, draft.start), bisect_left(offsets, draft.end)
        shift = len(draft.lead) - draft.start
        headings = tuple(HeadingMark(offset + shift, path) for offset, path in marks[first:last])
        content = draft.lead + src[draft.start : draft.end]
        chunks.append(Chunk(index, draft.path, content, headings, draft.start))
    return chunks
