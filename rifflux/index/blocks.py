"""A fast block scan of markdown: where each block starts, its nesting level and its kind.

The chunker needs only the block structure of a document, never its rendering: the line
where every block opens, how deeply it is nested, whether it is a heading (and the
heading's text when it is top-level), code or a table (why not markdown-it-py's own
token stream: docs/architecture.md, "Change detection and chunking").

This module re-implements markdown-it's block algorithm for the ``commonmark`` preset with
tables enabled and ``reference`` disabled (the chunker's parser) and emits only what the
chunker reads. Invariants:

- **The same structure as markdown-it, by construction.** The scan follows markdown-it-py
  ``MIRRORED_VERSION`` rule for rule: the same line arrays (``bMarks``, ``eMarks``,
  ``tShift``, ``sCount``, ``bsCount``), the same rule order, the same terminator sets, the
  same state (``blkIndent``, ``listIndent``, ``parentType``, ``lineMax``) saved and
  restored at the same points, quirks included (a failed setext heading leaves
  ``parentType`` as "paragraph"; a blockquote's lazy lines get ``sCount`` -1). Every
  opener is one opening token markdown-it would emit with a line map (``inline`` tokens
  excluded), in stream order, with its ``map[0]`` and ``level``. Only the ``tight`` flag
  of lists is not kept: it hides paragraphs, it never moves them.
- **No rule looks back**, so a scan may start at any line as if those before it were
  blank: the chunker starts below the front matter instead of blanking it.
- **What differs is cost, not behaviour:** no Token objects, no content strings except a
  top-level heading's text, a first-character test before each rule, table cells
  counted without splitting them, and a list item of one line of text (the usual item)
  checked and emitted in one step (``one_line_item``) instead of by ``tokenize``.
- **Unsure means fall back.** :func:`scan` raises :class:`Unsure` for input it does not
  model (a NUL character, which markdown-it rewrites before parsing; nesting deeper than
  markdown-it's ``maxNesting``, where it stops parsing; another markdown-it-py version);
  the caller then parses the file with markdown-it.
- Differential tests (``tests/index/test_blocks.py``) compare the openers and the chunks
  of the two paths on the vendored awesome-copilot agents and on generated markdown, and
  ``benchmarks/chunk_speed.py --check`` on every awesome-copilot file and a sample of the
  scale corpus; a test also pins the chunker's parser configuration this scan assumes.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate, repeat
from operator import add

import markdown_it
from markdown_it.common.utils import mdTrim
from markdown_it.rules_block.html_block import HTML_SEQUENCES
from markdown_it.rules_block.table import MAX_AUTOCOMPLETED_CELLS, headerLineRe

MIRRORED_VERSION = "4.3.0"
"""The markdown-it-py release whose block rules this module mirrors; others fall back."""

MAX_NESTING = 20
"""markdown-it's ``maxNesting`` in the commonmark preset; deeper input falls back."""

OTHER, HEADING, CODE, TABLE = range(4)
"""Opener kinds: code is ``fence`` or ``code_block``; a table is its ``table_open``."""

_DELIMITER_ROW_REST = re.compile(r"[-:| \t]*")
_ORDERED_MARKER = re.compile(r"[0-9]{1,9}[.)]")
_HEADING_MARKER = re.compile(r"#{1,6}(?![^ \t])")
_HR = re.compile(r"([-*_])(?:[ \t]*\1){2,}[ \t]*")
_OPENING_CHARS = frozenset("`~>*-_+0123456789<#")  # what fence ... heading start with
_SPACES = " \t"  # markdown-it's isStrSpace


Opener = tuple[int, int, int, int, str]
"""An opening block token with a line map, as markdown-it would emit it: ``(line, level, kind,
heading, text)``, its ``map[0]``, nesting level, kind (OTHER, HEADING, CODE, TABLE), heading
level (1-6, else 0) and a top-level heading's inline content (else ""). A plain tuple: a
NamedTuple's constructor cost ~15 % of the scan."""


class Unsure(Exception):
    """The scan does not model this input exactly; parse it with markdown-it instead."""


def enabled() -> bool:
    """Whether the installed markdown-it-py is the release this scan mirrors."""
    return markdown_it.__version__ == MIRRORED_VERSION


def scan(
    src: str,
    first_line: int = 0,
    lines: list[str] | None = None,
    starts: list[int] | None = None,
) -> list[Opener]:
    """The openers markdown-it's block parser would emit for ``src`` (newlines ``\\n``),
    from line ``first_line`` on, as if the lines before it were blank; ``lines`` is
    ``src.split("\\n")`` and ``starts`` its ``line_starts`` if the caller has them."""
    if "\0" in src:
        raise Unsure("NUL characters are rewritten by markdown-it before parsing")
    if lines is None:
        lines = src.split("\n")
    parser = _Parser(src, lines, line_starts(src, lines) if starts is None else starts)
    parser.tokenize(first_line, parser.line_max)
    return parser.out


def line_starts(src: str, lines: list[str]) -> list[int]:
    """Where each of ``lines`` (``src.split("\\n")``) starts in ``src``, then ``len(src)``."""
    starts = list(accumulate(map(add, map(len, lines), repeat(1)), initial=0))
    starts[-1] = len(src)  # the last line has no newline to step over
    return starts


def _may_be_hr(src: str, limit: int) -> bool:
    """Whether a line ending at ``limit`` whose first character is ``-``, ``*`` or ``_``
    may be a thematic break: its last character is a marker, a space or a tab (a list
    item's text, the usual line, fails here, sparing the pattern)."""
    return src[limit - 1] in "-*_ \t"


def _opens_only_a_paragraph(src: str, pos: int, limit: int) -> bool:
    """Whether a line whose text (not indented as code) is ``src[pos:limit]`` opens no
    block rule but table and paragraph, by its first characters: none a rule opens with,
    or emphasis (``*`` then text, in a line that cannot be an hr) or inline code (fewer
    than three backticks), the usual openings of a list item's text."""
    char = src[pos]
    if char not in _OPENING_CHARS:
        return True
    if char == "*":
        return pos + 1 < limit and src[pos + 1] not in _SPACES and not _may_be_hr(src, limit)
    return char == "`" and not src.startswith("```", pos)


def _column_count(text: str) -> int:
    """Cells in a table row, as markdown-it's ``escapedSplit`` and edge trimming count them.

    A pipe is escaped when the character before it is a backslash, so the cells are the
    unescaped pipes plus one, less an empty first cell (a leading pipe) and an empty last
    cell (a trailing unescaped pipe).
    """
    count = text.count("|") - text.count("\\|") + 1
    if text.startswith("|"):
        count -= 1
    if count and text.endswith("|") and not text.endswith("\\|"):
        count -= 1
    return count


def _columns(parts: list[str], indents: list[int]) -> list[int]:
    """The column each line's text starts at, a tab advancing to the next multiple of 4."""
    columns = indents.copy()
    for line, indent in enumerate(indents):
        if indent and "\t" in parts[line][:indent]:
            offset = 0
            for char in parts[line][:indent]:
                offset += 4 - offset % 4 if char == "\t" else 1
            columns[line] = offset
    return columns


class _Parser:
    """markdown-it's ``StateBlock`` and block rules, emitting openers instead of tokens."""

    def __init__(self, src: str, parts: list[str], starts: list[int]) -> None:
        self.src = src
        if not parts[-1].strip(_SPACES):
            # markdown-it gives a final line of only spaces and tabs (or nothing) no marker.
            parts = parts[:-1]
        self.line_max = len(parts)
        bmarks = starts[: len(parts)]  # a copy: a blockquote moves its lines' marks
        # A line ends where the next starts, less its newline; the text's last line has none.
        emarks = [start - 1 for start in starts[1 : len(parts) + 1]]
        if len(parts) == len(starts) - 1:
            emarks[-1] += 1
        tshift = [len(part) - len(part.lstrip(_SPACES)) for part in parts]
        scount = _columns(parts, tshift) if "\t" in src else tshift.copy()
        # The fake line past the end that markdown-it appends to simplify bounds checks.
        bmarks.append(len(src))
        emarks.append(len(src))
        tshift.append(0)
        scount.append(0)
        self.b = bmarks
        self.e = emarks
        self.ts = tshift
        self.sc = scount
        self.bs = [0] * len(bmarks)
        self.blk = 0
        self.list_indent = -1
        self.parent = "root"
        self.level = 0
        self.line = 0
        self.quotes = 0  # blockquotes open: their lines' marks are shifted
        self.out: list[Opener] = []

    # -- helpers (StateBlock) ---------------------------------------------------------------

    def is_empty(self, line: int) -> bool:
        return self.b[line] + self.ts[line] >= self.e[line]

    def is_code(self, line: int) -> bool:
        return self.sc[line] - self.blk >= 4

    def first_char(self, line: int) -> str:
        pos = self.b[line] + self.ts[line]
        return self.src[pos] if pos < len(self.src) else "\n"  # past the end: no rule matches

    # -- ParserBlock.tokenize ---------------------------------------------------------------

    def tokenize(self, start: int, end: int) -> None:
        """ParserBlock.tokenize, with the rule chain inlined: at each line the first rule
        that matches, in markdown-it's order, each guarded by the first character it needs.

        The rules restore ``blkIndent`` and the level before they return, so both are read
        once; a line whose first character opens no rule but a table or code goes straight
        to the paragraph rule.
        """
        src, b, e, ts, sc = self.src, self.b, self.e, self.ts, self.sc
        line_max, blk = self.line_max, self.blk
        too_deep = self.level >= MAX_NESTING
        line = start
        while line < end:
            while line < line_max and b[line] + ts[line] >= e[line]:
                line += 1  # skipEmptyLines
            self.line = line
            if line >= end:
                break
            if sc[line] < blk:
                break
            if too_deep:
                raise Unsure("nesting deeper than markdown-it's maxNesting")
            pos, limit = b[line] + ts[line], e[line]
            char = src[pos]
            if src.find("|", pos, limit) >= 0 and self.table(line, end, silent=False):
                pass
            elif sc[line] - blk >= 4:
                self.code(line, end)
            elif char not in _OPENING_CHARS or not (
                (char in "`~" and self.fence(line, end, silent=False))
                or (char == ">" and self.blockquote(line, end))
                or (char in "*-_" and self.thematic_break(line, pos, limit))
                or ((char in "*-+" or "0" <= char <= "9") and self.list(line, end))
                or (char == "<" and self.html_block(line, end, silent=False))
                or (char == "#" and self.heading(line))
            ):
                self.paragraph(line, end)
            line = self.line
            if line < end and b[line] + ts[line] >= e[line]:
                line += 1
                self.line = line

    # -- terminator sets (markdown-it's "alt" chains, in rule order) ------------------------

    def ends_blockquote(self, line: int, end: int, char: str | None = None) -> bool:
        """fence, blockquote, hr, list, html_block, heading (also ends table rows, and
        paragraphs after the table rule)."""
        if char is None:
            char = self.first_char(line)
        if char in "`~":
            return self.fence(line, end, silent=True)
        if char == ">":
            return not self.is_code(line)
        # A silent rule has no effect but its answer, so the list is asked before the hr:
        # a list item's line (the usual case) then spares the hr's pattern.
        if (char in "*-+" or "0" <= char <= "9") and self.list_opens(line, char):
            return True
        if char in "*-_":
            return self.hr(line)
        if char == "<":
            return self.html_block(line, end, silent=True)
        if char == "#":
            return not self.is_code(line) and (
                _HEADING_MARKER.match(self.src, self.b[line] + self.ts[line], self.e[line])
                is not None
            )
        return False

    # -- rules ------------------------------------------------------------------------------

    def table(self, start: int, end: int, *, silent: bool) -> bool:
        src, b, e, ts, sc = self.src, self.b, self.e, self.ts, self.sc
        # The header row must hold a pipe: tested first as it is the cheapest condition.
        if src.find("|", b[start] + ts[start], e[start]) < 0:
            return False
        if start + 2 > end:
            return False
        delimiter = start + 1
        if sc[delimiter] < self.blk or self.is_code(delimiter):
            return False
        pos, limit = b[delimiter] + ts[delimiter], e[delimiter]
        if pos + 1 >= limit:
            return False
        first, second = src[pos], src[pos + 1]
        if first not in "|-:" or (second not in "|-:" and second not in _SPACES):
            return False
        if first == "-" and second in _SPACES:
            return False
        if not _DELIMITER_ROW_REST.fullmatch(src, pos + 2, limit):
            return False
        columns = src[pos:limit].split("|")
        aligns = 0
        for i, column in enumerate(columns):
            cell = mdTrim(column)
            if not cell:
                if i == 0 or i == len(columns) - 1:
                    continue
                return False
            if not headerLineRe.search(cell):
                return False
            aligns += 1
        if self.is_code(start):
            return False
        column_count = _column_count(mdTrim(src[b[start] + ts[start] : e[start]]))
        if column_count == 0 or column_count != aligns:
            return False
        if silent:
            return True

        old_parent, self.parent = self.parent, "table"
        level, out = self.level, self.out
        out.append((start, level, TABLE, 0, ""))
        out.append((start, level + 1, OTHER, 0, ""))  # thead
        out.append((start, level + 2, OTHER, 0, ""))  # tr
        autocompleted = 0
        line = start + 2
        while line < end:
            if sc[line] < self.blk:
                break
            if self.ends_blockquote(line, end):
                break
            text = mdTrim(src[b[line] + ts[line] : e[line]])
            if not text:
                break
            if self.is_code(line):
                break
            autocompleted += column_count - _column_count(text)
            if autocompleted > MAX_AUTOCOMPLETED_CELLS:
                break
            if line == start + 2:
                out.append((line, level + 1, OTHER, 0, ""))  # tbody
            out.append((line, level + 2, OTHER, 0, ""))  # tr
            line += 1
        self.parent = old_parent
        self.line = line
        return True

    def code(self, start: int, end: int) -> bool:
        last = line = start + 1
        while line < end:
            if self.is_empty(line):
                line += 1
                continue
            if self.is_code(line):
                line += 1
                last = line
                continue
            break
        self.line = last
        self.out.append((start, self.level, CODE, 0, ""))
        return True

    def fence(self, start: int, end: int, *, silent: bool) -> bool:
        src, b, e, ts, sc = self.src, self.b, self.e, self.ts, self.sc
        pos, limit = b[start] + ts[start], e[start]
        if self.is_code(start) or pos + 3 > limit:
            return False
        marker = src[pos]
        if marker not in "~`":
            return False
        run_end = pos
        while run_end < limit and src[run_end] == marker:
            run_end += 1
        length = run_end - pos
        if length < 3:
            return False
        if marker == "`" and src.find("`", run_end, limit) >= 0:
            return False
        if silent:
            return True

        if self.blk == 0 and not self.quotes:
            # Outside lists and quotes no line ends a fence but its closing line: find the
            # candidates with str.find instead of a Python step per line.
            self.line = self.fence_end(start, end, marker, length)
            self.out.append((start, self.level, CODE, 0, ""))
            return True
        closed = False
        line = start
        size = len(src)
        blk = self.blk
        while True:
            line += 1
            if line >= end:
                break  # an unclosed fence runs to the end of the document (or its parent)
            pos, limit = b[line] + ts[line], e[line]
            if pos < limit and sc[line] < blk:
                break  # a non-empty line outdented from the enclosing list item
            if pos >= size:
                break
            if src[pos] != marker:
                continue
            if sc[line] - blk >= 4:
                continue
            run_end = pos
            while run_end < limit and src[run_end] == marker:
                run_end += 1
            if run_end - pos < length:
                continue
            while run_end < limit and src[run_end] in _SPACES:
                run_end += 1
            if run_end < limit:
                continue
            closed = True
            break
        self.line = line + 1 if closed else line
        self.out.append((start, self.level, CODE, 0, ""))
        return True

    def fence_end(self, start: int, end: int, marker: str, length: int) -> int:
        """The line after a top-level fence: past its closing line, else ``end``.

        A closing line holds a run of at least ``length`` markers, so ``str.find`` (memchr
        fast; a multiline regex took twice as long) jumps to the candidate lines; a line
        closes the fence if the run is its first non-space text, not indented as code, and
        followed by spaces only. A line whose first run fails cannot close it further on.
        """
        src, b, e, ts, sc = self.src, self.b, self.e, self.ts, self.sc
        needle = marker * length
        pos, stop = b[start + 1], b[end]
        while True:
            found = src.find(needle, pos, stop)
            if found < 0:
                return end
            line = bisect_right(b, found, start + 1, end) - 1
            limit = e[line]
            if found == b[line] + ts[line] and sc[line] < 4:
                run_end = found + length
                while run_end < limit and src[run_end] == marker:
                    run_end += 1
                if not src[run_end:limit].strip(_SPACES):
                    return line + 1
            pos = limit + 1

    def blockquote(self, start: int, end: int) -> bool:
        """markdown-it's blockquote rule (not silent: as a terminator only its first test
        counts, which the terminator sets inline)."""
        src, b, e, ts, sc, bs = self.src, self.b, self.e, self.ts, self.sc, self.bs
        old_line_max = self.line_max
        if self.is_code(start) or self.first_char(start) != ">":
            return False
        size = len(src)

        old_b: list[int] = []
        old_bs: list[int] = []
        old_sc: list[int] = []
        old_ts: list[int] = []

        def enter(line: int) -> bool:
            """Move line ``line`` past its ``>`` and one optional space; True if the rest
            is empty (markdown-it's ``lastLineEmpty``)."""
            pos = b[line] + ts[line] + 1
            limit = e[line]
            initial = offset = sc[line] + 1
            following = src[pos] if pos < size else None
            adjust_tab = False
            if following == " ":
                pos += 1
                initial += 1
                offset += 1
                space_after_marker = True
            elif following == "\t":
                space_after_marker = True
                if (bs[line] + offset) % 4 == 3:
                    pos += 1
                    initial += 1
                    offset += 1
                else:
                    adjust_tab = True
            else:
                space_after_marker = False
            old_b.append(b[line])
            b[line] = pos
            while pos < limit:
                char = src[pos]
                if char == "\t":
                    offset += 4 - (offset + bs[line] + (1 if adjust_tab else 0)) % 4
                elif char == " ":
                    offset += 1
                else:
                    break
                pos += 1
            old_bs.append(bs[line])
            bs[line] = sc[line] + 1 + (1 if space_after_marker else 0)
            old_sc.append(sc[line])
            sc[line] = offset - initial
            old_ts.append(ts[line])
            ts[line] = pos - b[line]
            return pos >= limit

        last_line_empty = enter(start)
        old_parent, self.parent = self.parent, "blockquote"
        line = start + 1
        while line < end:
            outdented = sc[line] < self.blk
            pos, limit = b[line] + ts[line], e[line]
            if pos >= limit:
                break  # an empty line ends the quote
            if src[pos] == ">" and not outdented:
                last_line_empty = enter(line)
                line += 1
                continue
            if last_line_empty:
                break
            if self.ends_blockquote(line, end):
                # Hard termination: paragraphs inside must not look past this line.
                self.line_max = line
                if self.blk != 0:
                    old_b.append(b[line])
                    old_bs.append(bs[line])
                    old_ts.append(ts[line])
                    old_sc.append(sc[line])
                    sc[line] -= self.blk
                break
            old_b.append(b[line])
            old_bs.append(bs[line])
            old_ts.append(ts[line])
            old_sc.append(sc[line])
            sc[line] = -1  # a lazy continuation line
            line += 1

        old_indent, self.blk = self.blk, 0
        self.out.append((start, self.level, OTHER, 0, ""))
        self.level += 1
        self.quotes += 1
        self.tokenize(start, line)
        self.quotes -= 1
        self.level -= 1
        self.line_max = old_line_max
        self.parent = old_parent
        for i, tshift in enumerate(old_ts):
            b[start + i] = old_b[i]
            ts[start + i] = tshift
            sc[start + i] = old_sc[i]
            bs[start + i] = old_bs[i]
        self.blk = old_indent
        return True

    def thematic_break(self, start: int, pos: int, limit: int) -> bool:
        """The hr rule; ``tokenize`` has checked that ``start`` is not code."""
        if not _may_be_hr(self.src, limit) or _HR.fullmatch(self.src, pos, limit) is None:
            return False
        self.line = start + 1
        self.out.append((start, self.level, OTHER, 0, ""))
        return True

    def hr(self, start: int) -> bool:
        """The hr rule as a terminator, for a line whose first character is a marker."""
        if self.sc[start] - self.blk >= 4:
            return False
        limit = self.e[start]
        # Three or more of one marker, with only spaces and tabs around and between them.
        return _may_be_hr(self.src, limit) and (
            _HR.fullmatch(self.src, self.b[start] + self.ts[start], limit) is not None
        )

    def ordered_marker(self, line: int) -> int:
        limit = self.e[line]
        match = _ORDERED_MARKER.match(self.src, self.b[line] + self.ts[line], limit)
        if match is None:
            return -1
        pos = match.end()
        if pos < limit and self.src[pos] not in _SPACES:
            return -1
        return pos

    def marker_end(self, start: int) -> int:
        """Where the list marker of line ``start`` (its first character a bullet or a digit)
        ends; -1 when the line opens no list item here: indented as code, or as code of
        the list around it, or no marker followed by a space."""
        count, blk, list_indent = self.sc[start], self.blk, self.list_indent
        if count - blk >= 4:
            return -1
        if list_indent >= 0 and count - list_indent >= 4 and count < blk:
            return -1
        first = self.b[start] + self.ts[start]
        if "0" <= self.src[first] <= "9":
            return self.ordered_marker(start)
        after = first + 1
        if after < self.e[start] and self.src[after] not in _SPACES:
            return -1
        return after

    def list_opens(self, start: int, char: str) -> bool:
        """The list rule as a terminator, for a line whose first character ``char`` is a
        bullet or a digit."""
        after = self.marker_end(start)
        if after < 0:
            return False
        src, limit = self.src, self.e[start]
        first = self.b[start] + self.ts[start]
        ordered = "0" <= char <= "9"
        if self.parent == "paragraph" and self.sc[start] >= self.blk:
            # Interrupting a paragraph: an ordered list must start at 1, and no list may
            # start with an empty item.
            if ordered and int(src[first : after - 1]) != 1:
                return False
            if not src[after:limit].strip(_SPACES):
                return False
        return True

    def list(self, start: int, end: int) -> bool:
        """The list rule, for a non-empty line whose first character is a bullet or a digit.

        Between items ``blkIndent``, ``listIndent`` and the level are the list's own (each
        item's rules restore them), so they are kept in locals; what ends the list (the
        terminators fence, blockquote and hr, or another marker) is tested inline.
        """
        after = self.marker_end(start)
        if after < 0:
            return False
        src, b, e, ts, sc, bs = self.src, self.b, self.e, self.ts, self.sc, self.bs
        blk, list_indent = self.blk, self.list_indent
        first = b[start] + ts[start]
        ordered = "0" <= src[first] <= "9"
        marker_char = src[after - 1]

        out, level, size = self.out, self.level, len(src)
        out.append((start, level, OTHER, 0, ""))
        line = start
        old_parent, self.parent = self.parent, "list"
        while line < end:
            pos = after
            limit = e[line]
            initial = offset = sc[line] + after - first
            while pos < limit:
                char = src[pos]
                if char == "\t":
                    offset += 4 - (offset + bs[line]) % 4
                elif char == " ":
                    offset += 1
                else:
                    break
                pos += 1
            content_start = pos
            indent_after_marker = 1 if content_start >= limit else offset - initial
            if indent_after_marker > 4:
                indent_after_marker = 1
            indent = initial + indent_after_marker

            out.append((start, level + 1, OTHER, 0, ""))  # list_item_open
            self.level = level + 2
            old_tshift, old_scount = ts[start], sc[start]
            self.list_indent = blk
            self.blk = indent
            ts[start] = content_start - b[start]
            sc[start] = offset
            if content_start >= limit and b[start + 1] + ts[start + 1] >= e[start + 1]:
                # An empty item followed by a blank line: the list ends before what follows.
                self.line = min(self.line + 2, end)
            elif not self.one_line_item(start, end, content_start, limit):
                self.tokenize(start, end)
            self.blk = blk
            self.list_indent = list_indent
            ts[start], sc[start] = old_tshift, old_scount

            line = start = self.line
            if line >= end or sc[line] < blk or sc[line] - blk >= 4:
                break
            first = b[line] + ts[line]
            char = src[first] if first < size else "\n"
            # The terminators of a list: fence, blockquote, hr.
            if char in "`~":
                if self.fence(line, end, silent=True):
                    break
            elif char == ">" or (char in "*-_" and _may_be_hr(src, e[line]) and self.hr(line)):
                break
            if ordered:
                after = self.ordered_marker(line)
                if after < 0:
                    break
            else:
                if char not in "*-+":
                    break
                after = first + 1
                if after < e[line] and src[after] not in _SPACES:
                    break
            if marker_char != src[after - 1]:
                break
        self.level = level
        self.line = line
        self.parent = old_parent
        return True

    def one_line_item(self, start: int, end: int, pos: int, limit: int) -> bool:
        """What ``tokenize`` does for a list item (its marks set, its text ``src[pos:limit]``)
        that is one non-empty line of paragraph text followed by a blank line (and nothing
        more indented) or by the next item's marker, the usual item; False, having done
        nothing, for any other.

        The line opens no rule but the paragraph (its first characters, no pipe, not code),
        and the paragraph ends at the next line without ``paragraph_end``: a blank line,
        or one outdented from the item that the list rule says ends a paragraph.
        """
        src, b, e, ts, sc = self.src, self.b, self.e, self.ts, self.sc
        blk = self.blk
        following = start + 1
        if (
            self.level >= MAX_NESTING
            or end != self.line_max
            or following >= end
            or pos >= limit
            or not _opens_only_a_paragraph(src, pos, limit)
            or src.find("|", pos, limit) >= 0
            or sc[start] - blk >= 4
        ):
            return False
        at, stop = b[following] + ts[following], e[following]
        if at >= stop:
            after = following + 1  # past the blank lines, where tokenize stops
            while after < end and b[after] + ts[after] >= e[after]:
                after += 1
            if after < end and sc[after] >= blk:
                return False  # the item goes on
            self.line = after
        else:
            count, char = sc[following], src[at]
            if not 0 <= count < blk or src.find("|", at, stop) >= 0:
                return False
            old_parent, self.parent = self.parent, "paragraph"
            if not ((char in "*-+" or "0" <= char <= "9") and self.list_opens(following, char)):
                self.parent = old_parent
                return False
            self.line = following
        self.parent = "paragraph"  # as the paragraph rule leaves it
        self.out.append((start, self.level, OTHER, 0, ""))
        return True

    def html_block(self, start: int, end: int, *, silent: bool) -> bool:
        src, b, e, ts = self.src, self.b, self.e, self.ts
        if self.is_code(start) or self.first_char(start) != "<":
            return False
        text = src[b[start] + ts[start] : e[start]]
        for sequence in HTML_SEQUENCES:
            if sequence[0].search(text):
                break
        else:
            return False
        _, closing, can_terminate = sequence
        if silent:
            return can_terminate
        line = start + 1
        ends_on_blank_line = bool(closing.search(""))
        if not closing.search(text):
            while line < end:
                if self.sc[line] < self.blk and (ends_on_blank_line or not self.is_empty(line)):
                    break
                text = src[b[line] + ts[line] : e[line]]
                if closing.search(text):
                    if text:
                        line += 1
                    break
                line += 1
        self.line = line
        self.out.append((start, self.level, OTHER, 0, ""))
        return True

    def heading(self, start: int) -> bool:
        """The heading rule (``tokenize`` has checked that ``start`` is not code)."""
        src = self.src
        pos, limit = self.b[start] + self.ts[start], self.e[start]
        match = _HEADING_MARKER.match(src, pos, limit)
        if match is None:
            return False
        text = ""
        if self.level == 0:
            # Cut trailing spaces, then a closing run of "#" if a space precedes it.
            text = src[match.end() : limit].rstrip(_SPACES)
            bare = text.rstrip("#")
            if bare and bare[-1] in _SPACES:
                text = bare
            text = mdTrim(text)
        self.line = start + 1
        self.out.append((start, self.level, HEADING, match.end() - pos, text))
        return True

    def paragraph(self, start: int, end: int) -> None:
        """markdown-it's lheading rule, then (if no underline) its paragraph rule.

        Both scan the same lines under the same conditions, so when the setext scan stops
        before ``end`` on a line of the document's full extent, the paragraph stops there
        too and is not scanned again.
        """
        src, b, e, ts, sc = self.src, self.b, self.e, self.ts, self.sc
        blk = self.blk
        old_parent, self.parent = self.parent, "paragraph"
        line = start + 1
        level = 0
        while line < end:
            pos, limit = b[line] + ts[line], e[line]
            if pos >= limit:
                break
            count = sc[line]
            if count - blk > 3:
                line += 1
                continue
            char = src[pos]
            if count >= blk and char in "-=" and not src[pos:limit].lstrip(char).strip(_SPACES):
                level = 1 if char == "=" else 2
                break
            if count < 0:
                line += 1
                continue
            # The paragraph's terminators: table, then the blockquote's.
            if src.find("|", pos, limit) >= 0 and self.table(line, end, silent=True):
                break
            if char in _OPENING_CHARS and self.ends_blockquote(line, end, char):
                break
            line += 1
        if level:
            text = ""
            if self.level == 0:
                text = mdTrim(src[b[start] : e[line - 1]])
            self.line = line + 1
            self.out.append((start, self.level, HEADING, level, text))
            self.parent = old_parent
            return
        # A failed lheading leaves parentType "paragraph", and the paragraph rule restores
        # what it found: "paragraph" again.
        if line >= end or end != self.line_max:
            line = self.paragraph_end(start)
        self.line = line
        self.out.append((start, self.level, OTHER, 0, ""))

    def paragraph_end(self, start: int) -> int:
        """markdown-it's paragraph scan, which runs to ``lineMax`` whatever its caller's end."""
        src, b, e, ts, sc = self.src, self.b, self.e, self.ts, self.sc
        end, blk = self.line_max, self.blk
        line = start + 1
        while line < end:
            pos, limit = b[line] + ts[line], e[line]
            if pos >= limit:
                break
            if sc[line] - blk > 3 or sc[line] < 0:
                line += 1
                continue
            if src.find("|", pos, limit) >= 0 and self.table(line, end, silent=True):
                break
            if src[pos] in _OPENING_CHARS and self.ends_blockquote(line, end, src[pos]):
                break
            line += 1
        return line
