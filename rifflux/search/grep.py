"""Exact and regex search over the indexed files' whole text, answered from the index.

A pattern is planned into the trigrams its every match must contain (Russ Cox, "Regular
Expression Matching with a Trigram Index"): the literal itself, or for a regex an AND/OR
of the literal strings its matches require, read from Python's own regex parser. The
trigram table (rifflux.store.grep_text) names the blocks of lines holding them; each
candidate block's stored text is then searched with the exact pattern. A pattern that
requires no string of three characters or more is searched in every block of every file
("scanned": true).

Invariants:

* Line semantics are ripgrep's: a match never spans a line break (RE2's ``never_nl``,
  so ``\\s`` and ``[^x]`` do not match ``\\n``), ``^`` and ``$`` are a line's ends, and
  one entry is reported per matching line, at its first match. ``line`` and ``column``
  are 1-based; ``column`` counts characters (code points), not bytes.
* Verification runs in RE2 (linear in the text whatever the pattern: ``(a+)+$`` cannot
  backtrack) over the UTF-8 bytes of one block at a time (whole lines, so a match lies
  in one block): only on the lines that hold a
  literal every match needs (:func:`line_literals`, found by ``bytes.find``), else in
  windows of whole lines of ``WINDOW_BYTES``; the deadline is checked between windows
  (or lines) and blocks, and when it passes the matches found so far are returned with
  ``truncated`` and a ``warning``.
  RE2 releases the GIL while it searches, so other calls keep being served. Its syntax
  is ripgrep's (no look-around, no backreferences): such a pattern is refused in one line.
* The plan only ever widens the candidates: a planner that cannot read a pattern
  (RE2-only syntax such as ``[[:alpha:]]`` or ``\\pL``) plans no literal and scans.
  Results are exact whatever the plan: every candidate is verified.
* Output is bounded: ``max_matches`` entries, ``MAX_RESPONSE_CHARS`` of lines in all,
  lines cut to ``MAX_LINE_CHARS``, and a given ``max_tokens`` is the size of the whole
  answer as sent (rifflux.search.budget's :func:`response_tokens`, keys and echoed
  pattern included): the longest prefix of the matches that keeps it within
  (:func:`fit_matches`). ``truncated`` says more matching lines exist (or may: the
  deadline stopped the search).
* Entries come in path order, then line order; ``admit`` (the caller's allowed roots and
  deny list) leaves out a file before any of its lines is counted.
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
import sqlite3
import threading
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import re2

from rifflux.errors import InvalidQueryError, RiffluxError
from rifflux.search.budget import response_tokens, within_limit
from rifflux.search.deadline import Deadline
from rifflux.search.globs import GlobMatcher, compile_glob
from rifflux.search.request import check_max_tokens, check_path_glob
from rifflux.store import grep_text
from rifflux.store.connection import transaction

MAX_GREP_PATTERN_CHARS = 16_384
"""The longest pattern accepted."""
DEFAULT_MAX_MATCHES = 50
MAX_MAX_MATCHES = 1_000
MAX_CONTEXT_LINES = 10
MAX_LINE_CHARS = 500
"""A longer line (or context line) is cut to this many characters around its match."""
MAX_RESPONSE_CHARS = 250_000
"""Characters of matched and context lines one response carries at most, whatever
``max_matches`` and ``max_tokens`` allow: a client reads a tool result as one message
(the MCP SDK's streamable HTTP client refuses events over 1 MiB, and the result travels
twice, as structured content and as its JSON text)."""
WINDOW_BYTES = 1 << 20
"""Bytes of whole lines RE2 searches between two deadline checks (~1 ms of DFA search)."""
ENTRY_OVERHEAD_CHARS = 150
"""An entry's keys, numbers, chunk id and breadcrumb, counted towards the response size."""
JOIN_SAVING_TOKENS = 2
"""At most this many fewer tokens an entry costs inside the answer than on its own: the
punctuation runs at its two ends may merge with the ``,``/``[``/``]`` around it."""
MAX_EXACT = 16
"""The most strings the planner tracks for what a piece of a regex matches exactly."""
MAX_CLASS_CHARS = 10
"""A character class of more characters is planned as any character (``[0-9]`` is not)."""
MAX_TRIGRAMS_PER_LITERAL = 32
"""Trigrams of one literal asked of an index whose trigrams' rarity is unknown (no
compression dictionary: a small index), spread over it."""
RARE_TRIGRAMS_PER_LITERAL = 6
"""Trigrams of one literal asked of an index whose trigrams' rarity is estimated
(:class:`TrigramRarity`): the rarest. FTS5 reads each asked trigram's whole doclist, ~1
ms for a common one at 100k files, while past the rarest few each filters out little:
for the median selective literal on 100k generated files, the 6 rarest leave 845
candidate blocks against 587 for up to 32, in 12 against 31 ms of index query."""
MAX_QUERY_TERMS = 512
"""Trigrams in one index query; a plan needing more is not asked (the scan runs)."""
MIN_LITERAL = 3
# Syntax RE2 reads and Python's parser reads otherwise (or not at all): no plan then.
_RE2_ONLY = re.compile(r"\[:\^?[a-z]+:\]|\\[pPQEC]|\\z|\(\?[a-zA-Z]*U")


@dataclass(frozen=True, slots=True)
class GrepRequest:
    """One grep, checked: the same values from MCP and from ``rifflux grep``."""

    pattern: str
    regex: bool = False
    case_sensitive: bool = False
    path_glob: tuple[str, ...] | None = None
    context_lines: int = 0
    max_matches: int = DEFAULT_MAX_MATCHES
    max_tokens: int | None = None

    @classmethod
    def from_arguments(
        cls,
        pattern: object,
        *,
        regex: object = False,
        case_sensitive: object = False,
        path_glob: object = None,
        context_lines: object = 0,
        max_matches: object = DEFAULT_MAX_MATCHES,
        max_tokens: object = None,
    ) -> GrepRequest:
        if not isinstance(pattern, str) or not pattern:
            raise InvalidQueryError(
                f"pattern must be a non-empty string (got {_shown(pattern)}); "
                "pass the text or regex to find"
            )
        if len(pattern) > MAX_GREP_PATTERN_CHARS:
            raise InvalidQueryError(
                f"pattern is {len(pattern)} characters, at most {MAX_GREP_PATTERN_CHARS} "
                "are accepted; search for a shorter part of it"
            )
        return cls(
            pattern=pattern,
            regex=_flag("regex", regex),
            case_sensitive=_flag("case_sensitive", case_sensitive),
            path_glob=check_path_glob(path_glob),
            context_lines=_integer("context_lines", context_lines, 0, MAX_CONTEXT_LINES),
            max_matches=_integer("max_matches", max_matches, 1, MAX_MAX_MATCHES),
            max_tokens=check_max_tokens(max_tokens),
        )


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidQueryError(f"{name} must be true or false (got {_shown(value)})")
    return value


def _integer(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidQueryError(
            f"{name} must be an integer between {low} and {high} (got {_shown(value)})"
        )
    return value


# -- planning: the trigrams a match requires -----------------------------------------


@dataclass(frozen=True, slots=True)
class And:
    parts: tuple[Query, ...]


@dataclass(frozen=True, slots=True)
class Or:
    parts: tuple[Query, ...]


Query = str | And | Or
"""What a match requires of the text: a literal (of ``MIN_LITERAL`` characters or more)
it contains, or all / any of several such requirements. None: nothing known."""


def _and(*parts: Query | None) -> Query | None:
    flat: list[Query] = []
    for part in parts:
        if isinstance(part, And):
            flat.extend(part.parts)
        elif part is not None:
            flat.append(part)
    unique = tuple(dict.fromkeys(flat))
    if not unique:
        return None
    return unique[0] if len(unique) == 1 else And(unique)


def _or(parts: Sequence[Query | None]) -> Query | None:
    flat: list[Query] = []
    for part in parts:
        if part is None:
            return None  # one branch that requires nothing: the OR requires nothing
        flat.extend(part.parts if isinstance(part, Or) else (part,))
    unique = tuple(dict.fromkeys(flat))
    if not unique:
        return None
    return unique[0] if len(unique) == 1 else Or(unique)


@dataclass(frozen=True, slots=True)
class _Info:
    """What a piece of a regex matches: exactly one of ``exact`` (every string it can
    match, when few) or ``query`` (what any of its matches contains; None: unknown)."""

    exact: frozenset[str] | None
    query: Query | None = None

    def as_query(self) -> Query | None:
        if self.exact is None:
            return self.query
        if any(len(s) < MIN_LITERAL for s in self.exact):
            return None
        return _or(sorted(self.exact))


_UNKNOWN = _Info(None, None)
_EMPTY = _Info(frozenset({""}))


def plan(pattern: str, *, regex: bool) -> Query | None:
    """What every match of ``pattern`` contains (case aside), or None when nothing of
    ``MIN_LITERAL`` characters is required (the text must be scanned)."""
    if not regex:
        return pattern if len(pattern) >= MIN_LITERAL and "\n" not in pattern else None
    if _RE2_ONLY.search(pattern):
        return None
    try:
        return _sequence(list(_parser.parse(pattern))).as_query()
    except (re.error, RecursionError, OverflowError):
        return None  # deeper than Python's stack: no plan, the scan runs


_parser: Any = re._parser  # type: ignore[attr-defined]  # the stdlib's own regex parser
_c: Any = re._constants  # type: ignore[attr-defined]


def _sequence(items: Sequence[tuple[Any, Any]]) -> _Info:
    exact: frozenset[str] | None = frozenset({""})
    query: Query | None = None
    flushed = False
    for op, av in _required_copies(items):
        info = _node(op, av)
        if (
            exact is not None
            and info.exact is not None
            and len(exact) * len(info.exact) <= MAX_EXACT
        ):
            exact = frozenset(a + b for a in exact for b in info.exact)
            continue
        flushed = True
        query = _and(query, _Info(exact).as_query() if exact is not None else None)
        if info.exact is not None:
            exact = info.exact
        else:
            query = _and(query, info.query)
            exact = None
    if not flushed:
        return _Info(exact)
    tail = _Info(exact).as_query() if exact is not None else None
    return _Info(None, _and(query, tail))


def _required_copies(items: Sequence[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """``items`` with each repeat of at least one and more copies written as one copy of
    its body then the rest of the repeat (``x{1,}`` as ``x x{0,}``), so the strings the
    copy matches exactly still join the literal before it (``updated[0-9]+`` requires one
    of ``updated0`` .. ``updated9``)."""
    for op, av in items:
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            low, high, body = av
            if 1 <= low < high:
                yield from body
                rest = high if high == _c.MAXREPEAT else high - 1
                yield op, (low - 1, rest, body)
                continue
        yield op, av


def _node(op: Any, av: Any) -> _Info:
    if op is _c.LITERAL:
        return _Info(frozenset({chr(av)}))
    if op is _c.IN:
        return _char_class(av)
    if op is _c.SUBPATTERN:
        return _sequence(list(av[-1]))
    if op is _c.ATOMIC_GROUP:
        return _sequence(list(av))
    if op is _c.BRANCH:
        branches = [_sequence(list(b)) for b in av[1]]
        if all(b.exact is not None for b in branches):
            union = frozenset().union(*(b.exact for b in branches if b.exact is not None))
            if len(union) <= MAX_EXACT:
                return _Info(union)
        return _Info(None, _or([b.as_query() for b in branches]))
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
        low, high, body = av
        inner = _sequence(list(body))
        if low == 0:
            if high == 1 and inner.exact is not None and len(inner.exact) < MAX_EXACT:
                return _Info(inner.exact | {""})
            return _UNKNOWN
        if low == high and inner.exact is not None and len(inner.exact) ** low <= MAX_EXACT:
            strings = frozenset({""})
            for _ in range(low):
                strings = frozenset(a + b for a in strings for b in inner.exact)
            return _Info(strings)
        return _Info(None, inner.as_query())
    if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
        return _EMPTY
    return _UNKNOWN  # any character, a negated literal, a group reference


def _char_class(items: Sequence[tuple[Any, Any]]) -> _Info:
    chars: set[str] = set()
    for op, av in items:
        if op is _c.LITERAL:
            chars.add(chr(av))
        elif op is _c.RANGE and av[1] - av[0] < MAX_CLASS_CHARS:
            chars.update(chr(c) for c in range(av[0], av[1] + 1))
        else:
            return _UNKNOWN  # a negation, a category (\d, \w) or a wide range
        if len(chars) > MAX_CLASS_CHARS:
            return _UNKNOWN
    return _Info(frozenset(chars)) if chars else _UNKNOWN


class TrigramRarity:
    """How common each trigram is in an index, estimated from its compression dictionary
    (rifflux.store.grep_text): Zstandard trains it on the corpus's most repeated strings,
    so a trigram it holds often is common in the blocks and one it lacks is rarer; among
    those it lacks, the trigram of rarer characters comes first."""

    def __init__(self, dictionary: bytes) -> None:
        text = dictionary.decode("utf-8", "replace").lower()
        self.trigrams = Counter(text[i : i + 3] for i in range(len(text) - 2))
        self.char_weights = {c: math.log(n + 1) for c, n in Counter(text).items()}

    def key(self, gram: str) -> tuple[int, float]:
        """Sorts rarest first."""
        lowered = gram.lower()
        return self.trigrams.get(lowered, 0), sum(self.char_weights.get(c, 0.0) for c in lowered)

    def rarest(self, grams: Sequence[str], count: int) -> list[str]:
        return sorted(grams, key=self.key)[:count]


_rarities: dict[bytes, TrigramRarity] = {}
_rarities_lock = threading.Lock()


def trigram_rarity(dictionary: grep_text.Dictionary | None) -> TrigramRarity | None:
    """The rarity estimate of an index whose (first) dictionary is ``dictionary``; None
    when it has none. Kept per process, by the dictionary's digest."""
    if dictionary is None:
        return None
    key = dictionary.digest
    with _rarities_lock:
        found = _rarities.get(key)
    if found is None:
        found = TrigramRarity(dictionary.data)
        with _rarities_lock:
            if len(_rarities) >= 8:
                _rarities.clear()
            _rarities[key] = found
    return found


def _trigram_terms(literal: str, rarity: TrigramRarity | None = None) -> list[str]:
    grams = list(dict.fromkeys(literal[i : i + 3] for i in range(len(literal) - 2)))
    if rarity is not None:
        grams = rarity.rarest(grams, RARE_TRIGRAMS_PER_LITERAL)
    elif len(grams) > MAX_TRIGRAMS_PER_LITERAL:
        step = (len(grams) - 1) / (MAX_TRIGRAMS_PER_LITERAL - 1)
        grams = [grams[round(k * step)] for k in range(MAX_TRIGRAMS_PER_LITERAL)]
    return ['"' + g.replace('"', '""') + '"' for g in grams]


def fts_match(query: Query | None, rarity: TrigramRarity | None = None) -> str | None:
    """The FTS5 query over ``grep_block_trigrams`` for ``query`` (each literal as the AND
    of its trigrams, the rarest by ``rarity`` where given: the table keeps no positions),
    or None when there is none to ask or it would need more than ``MAX_QUERY_TERMS``
    trigrams."""
    if query is None:
        return None
    try:
        rendered = _render(query, MAX_QUERY_TERMS, rarity)
    except RecursionError:
        return None
    return rendered[0] if rendered is not None else None


def _render(query: Query, budget: int, rarity: TrigramRarity | None) -> tuple[str, int] | None:
    """(MATCH text, trigrams used) within ``budget``, or None when it cannot fit; an AND
    drops the parts that do not fit (a weaker filter), an OR cannot."""
    if isinstance(query, str):
        terms = _trigram_terms(query, rarity)
        return ("(" + " AND ".join(terms) + ")", len(terms)) if len(terms) <= budget else None
    rendered: list[str] = []
    used = 0
    for part in query.parts:
        got = _render(part, budget - used, rarity)
        if got is None:
            if isinstance(query, Or):
                return None
            continue
        rendered.append(got[0])
        used += got[1]
    if not rendered:
        return None
    joiner = " AND " if isinstance(query, And) else " OR "
    return "(" + joiner.join(rendered) + ")", used


# -- verification: the matching lines of one text -------------------------------------


class Matcher:
    """Finds the first match of each matching line in a text's UTF-8 bytes."""

    def __init__(self, request: GrepRequest, query: Query | None = None) -> None:
        """``query``: what every match contains (:func:`plan`), to find the lines worth
        running the regex on (:func:`line_literals`)."""
        self.needle: bytes | None = None
        self.regex: Any = None
        try:
            self.literals = line_literals(query)
        except RecursionError:
            self.literals = None
        if not request.regex and request.case_sensitive:
            self.needle = request.pattern.encode("utf-8")
            return
        options = re2.Options()
        options.never_nl = True  # ripgrep's line semantics: no match spans a line break
        options.case_sensitive = request.case_sensitive
        options.literal = not request.regex
        options.log_errors = False
        pattern = request.pattern if options.literal else "(?m)" + request.pattern
        try:
            self.regex = re2.compile(pattern, options)
        except re2.error as exc:
            why = exc.args[0].decode("utf-8", "replace") if exc.args else str(exc)
            if isinstance(why, bytes):
                why = why.decode("utf-8", "replace")
            raise InvalidQueryError(
                f"pattern is not a valid regex: {why}; grep takes RE2 (ripgrep) syntax, "
                "without look-around or backreferences"
            ) from None

    def hits(
        self, data: bytes, check: Callable[[], bool], *, folds: bool = True
    ) -> Iterator[tuple[int, int]]:
        """``(line start, match start)`` byte offsets, one per matching line, in order.
        ``check`` is called between windows; it returns True to stop. ``folds``: the text
        may hold a character that matches an ASCII letter ignoring case (:class:`Text`).

        The first match is found by RE2 over the whole text (in windows): a candidate
        without one, most of a regex's candidates, costs one search in C and no line
        work. The lines after it are found by the literal prefilter when there is one."""
        if self.needle is not None:
            yield from self._needle_hits(data, self.needle)
            return
        hit = self._next_hit(data, 0, check)
        prefilter = self.literals is not None and not folds
        while hit is not None:
            yield hit
            newline = data.find(b"\n", hit[1])
            if newline < 0:
                return
            if prefilter and self.literals is not None:
                yield from self._prefiltered_hits(data, self.literals, check, newline + 1)
                return
            hit = self._next_hit(data, newline + 1, check)

    def _next_hit(self, data: bytes, pos: int, check: Callable[[], bool]) -> tuple[int, int] | None:
        """The first matching line at or after ``pos`` (a line start): RE2 over windows of
        whole lines of ``WINDOW_BYTES``, ``check`` between them; None: no more, or stop."""
        size = len(data)
        while pos < size:
            cut = data.find(b"\n", min(pos + WINDOW_BYTES, size))
            end = size if cut < 0 else cut + 1
            found = self.regex.search(data, pos, end)
            start = -1 if found is None else found.start()
            if start < 0 or (start >= end and end < size):
                pos = end  # none in this window (a match at its end is the next line's)
                if check():
                    return None
                continue
            if start >= size and (size == 0 or data[size - 1] == 0x0A):
                return None  # the empty "line" after the final newline is not a line
            return data.rfind(b"\n", 0, start) + 1, start
        return None

    def _prefiltered_hits(
        self, data: bytes, literals: Sequence[bytes], check: Callable[[], bool], begin: int
    ) -> Iterator[tuple[int, int]]:
        """:meth:`hits` from the line starting at ``begin`` with RE2 run only on the lines
        holding one of ``literals`` (ASCII, lower case), found in the text lowered (ASCII)
        by ``bytes.find``: ripgrep's literal prefilter, several times faster than RE2
        restarted at every matching line."""
        lowered = data.lower()
        starts: set[int] = set()
        for literal in literals:
            pos = lowered.find(literal, begin)
            while pos >= 0:
                line_start = data.rfind(b"\n", 0, pos) + 1
                starts.add(line_start)
                newline = data.find(b"\n", pos)
                if newline < 0:
                    break
                pos = lowered.find(literal, newline + 1)
        size = len(data)
        for number, line_start in enumerate(sorted(starts)):
            if number % PREFILTER_LINES_PER_CHECK == PREFILTER_LINES_PER_CHECK - 1 and check():
                return
            newline = data.find(b"\n", line_start)
            end = size if newline < 0 else newline + 1
            found = self.regex.search(data, line_start, end)
            if found is not None and (found.start() < end or end == size):
                yield line_start, found.start()

    @staticmethod
    def _needle_hits(data: bytes, needle: bytes) -> Iterator[tuple[int, int]]:
        if b"\n" in needle:
            return
        pos = 0
        while True:
            start = data.find(needle, pos)
            if start < 0:
                return
            yield data.rfind(b"\n", 0, start) + 1, start
            newline = data.find(b"\n", start)
            if newline < 0:
                return
            pos = newline + 1


# Non-ASCII characters that RE2 (and Unicode simple case folding) match with an ASCII
# letter ignoring case: the Kelvin sign with k, the long s with s. A text holding one is
# searched without the ASCII-lowered prefilter, which would miss them.
_FOLDS_TO_ASCII = ("\u212a".encode(), "\u017f".encode())


def _folds_to_ascii(data: bytes) -> bool:
    return any(folded in data for folded in _FOLDS_TO_ASCII)


PREFILTER_LINES_PER_CHECK = 1024
"""Lines verified between two deadline checks when the prefilter picked them."""


def line_literals(query: Query | None) -> list[bytes] | None:
    """Literals one of which every matching line holds (ASCII, lower case), from what
    every match contains: a literal itself, every branch's of an OR, the longest part's
    of an AND; None when there is none (or a literal is not ASCII)."""
    if query is None:
        return None
    if isinstance(query, str):
        return [query.lower().encode()] if query.isascii() else None
    parts = [line_literals(part) for part in query.parts]
    if isinstance(query, Or):
        if any(p is None for p in parts):
            return None
        return list(dict.fromkeys(lit for p in parts if p is not None for lit in p))
    known = [p for p in parts if p is not None]
    return max(known, key=lambda p: min(len(lit) for lit in p)) if known else None


def _line_at(data: bytes, start: int) -> str:
    end = data.find(b"\n", start)
    return data[start : end if end >= 0 else len(data)].decode("utf-8", "replace")


def _cut(line: str, column: int = 1) -> str:
    """``line`` within ``MAX_LINE_CHARS``, around ``column``, ``…`` where it was cut."""
    if len(line) <= MAX_LINE_CHARS:
        return line
    first = max(0, min(column - 1 - MAX_LINE_CHARS // 4, len(line) - MAX_LINE_CHARS))
    piece = line[first : first + MAX_LINE_CHARS]
    return ("…" if first else "") + piece + ("…" if first + MAX_LINE_CHARS < len(line) else "")


def _context(data: bytes, line_start: int, count: int) -> tuple[list[str], list[str]]:
    """Up to ``count`` lines before and after the line starting at ``line_start``."""
    before: list[str] = []
    at = line_start
    while len(before) < count and at > 0:
        previous = data.rfind(b"\n", 0, at - 1) + 1
        before.append(_cut(data[previous : at - 1].decode("utf-8", "replace")))
        at = previous
    before.reverse()
    after: list[str] = []
    end = data.find(b"\n", line_start)
    while len(after) < count and end >= 0 and end + 1 < len(data):
        following = data.find(b"\n", end + 1)
        stop = following if following >= 0 else len(data)
        after.append(_cut(data[end + 1 : stop].decode("utf-8", "replace")))
        end = following
    return before, after


# -- the search ------------------------------------------------------------------------

TEXT_CACHE_BYTES = 64 << 20
"""Decompressed blocks a process keeps (:class:`TextCache`): a warm grep verifies its
candidates without inflating them again."""


class Text(NamedTuple):
    """A stored text as UTF-8 bytes, and whether it holds a character RE2 matches with an
    ASCII letter ignoring case (then the ASCII prefilter is not used on it)."""

    data: bytes
    folds: bool


class TextCache:
    """Stored block texts by the sha256 of their file and their place in it
    (``sha256:k``), bounded in bytes; thread-safe.

    A block's text is a function of its file's bytes, so a key never goes stale and the cache
    serves every index of the process: a rewritten file has another sha256. Past the
    bound a random entry goes, not the least recently used: a grep reads its candidates
    in path order, so when they outnumber the cache, least-recently-used would drop each
    text just before the next grep asks for it again (no hit at all), random eviction
    keeps about the share of them that fits."""

    def __init__(self, max_bytes: int = TEXT_CACHE_BYTES, seed: int = 0) -> None:
        self.max_bytes = max_bytes
        self._texts: dict[str, Text] = {}
        self._keys: list[str] = []  # the keys, for an O(1) random pick
        self._slots: dict[str, int] = {}  # key -> its place in _keys
        self._bytes = 0
        self._lock = threading.Lock()
        self._random = random.Random(seed)

    def has(self, key: str) -> bool:
        with self._lock:
            return key in self._texts

    def get(self, key: str, load: Callable[[], bytes], *, keep: bool = True) -> Text:
        """The text of ``key``, from the cache or ``load``; kept unless ``keep`` is False
        (a search reading more than the cache holds would only churn it)."""
        with self._lock:
            text = self._texts.get(key)
        if text is not None:
            return text
        data = load()
        text = Text(data, not data.isascii() and _folds_to_ascii(data))
        if not keep or len(data) > self.max_bytes // 8:
            return text  # one large file would push out many small ones
        with self._lock:
            if key not in self._texts:
                self._texts[key] = text
                self._slots[key] = len(self._keys)
                self._keys.append(key)
                self._bytes += len(data)
                while self._bytes > self.max_bytes:
                    self._drop(self._random.randrange(len(self._keys)))
        return text

    def _drop(self, slot: int) -> None:
        key, last = self._keys[slot], self._keys[-1]
        self._keys[slot] = last
        self._slots[last] = slot
        self._keys.pop()
        del self._slots[key]
        self._bytes -= len(self._texts.pop(key).data)

    def __len__(self) -> int:
        return len(self._texts)


TEXTS = TextCache()


@dataclass(slots=True)
class _Collected:
    matches: list[dict[str, Any]]
    tokens: int = 0
    chars: int = 0
    truncated: bool = False
    stopped: bool = False  # the deadline passed


def grep(
    conn: sqlite3.Connection,
    request: GrepRequest,
    deadline: Deadline,
    admit: Callable[[str], bool] = lambda path: True,
) -> dict[str, Any]:
    """``{pattern, regex, count, truncated, scanned, matches}`` (and a ``warning`` when
    the deadline stopped the search) for ``request`` over the index on ``conn``; run it
    inside ``deadline.guarding(conn)``."""
    query = plan(request.pattern, regex=request.regex)
    matcher = Matcher(request, query)  # an invalid regex fails before the index is read
    globs = tuple(compile_glob(g) for g in request.path_glob or ())
    with transaction(conn, write=False):
        if grep_text.grep_off(conn):
            raise RiffluxError(
                "grep is off for this index (RIFFLUX_GREP_INDEX=0 when it was last indexed); "
                "use search_rifflux, or reindex with RIFFLUX_GREP_INDEX=1"
            )
        if not grep_text.has_grep(conn):
            raise RiffluxError(
                "this index has no text for grep yet; reindex once (rifflux index, or the "
                "reindex tool) to build it"
            )
        # Read once: it ranks the trigrams, and most blocks were compressed with it.
        dictionary = grep_text.first_dictionary(conn)
        match = fts_match(query, trigram_rarity(dictionary))
        files = grep_text.candidates(conn, match)
        reader = grep_text.BlockReader(conn, dictionary)
        found = _collect(reader, request, matcher, files, globs, deadline, admit)
    response: dict[str, Any] = {
        "pattern": request.pattern,
        "regex": request.regex,
        "count": len(found.matches),
        "truncated": found.truncated,
        "scanned": match is None,
    }
    if found.stopped:
        response["warning"] = (
            f"stopped at the {deadline.seconds:g} s deadline (RIFFLUX_SEARCH_TIMEOUT_SECONDS); "
            "matches in later files may be missing: narrow the pattern or path_glob"
        )
    response["matches"] = found.matches
    if request.max_tokens is None:
        return response
    return within_limit(response, request.max_tokens, fit_matches)


def fit_matches(response: dict[str, Any], limit: int) -> dict[str, Any]:
    """``response`` with the longest prefix of its matches whose whole answer, as sent, is
    at most ``limit`` estimated tokens, marked ``truncated`` (a given ``max_tokens``, or
    the server's default budget)."""

    def first(count: int) -> dict[str, Any]:
        return {**response, "count": count, "truncated": True, "matches": matches[:count]}

    matches = response["matches"]
    low, high = 0, len(matches)
    while low < high:
        middle = (low + high + 1) // 2
        if response_tokens(first(middle)) <= limit:
            low = middle
        else:
            high = middle - 1
    return first(low)


def _collect(
    reader: grep_text.BlockReader,
    request: GrepRequest,
    matcher: Matcher,
    files: Sequence[grep_text.FileBlocks],
    globs: tuple[GlobMatcher, ...],
    deadline: Deadline,
    admit: Callable[[str], bool],
) -> _Collected:
    out = _Collected([])
    # Candidates past half the cache would only churn it: read them without keeping.
    keep = sum(len(f.blocks) for f in files) * grep_text.BLOCK_CHARS <= TEXT_CACHE_BYTES // 2
    for file in files:
        if deadline.expired():
            out.stopped = out.truncated = True
            return out
        if globs and not any(g.matches(file.path) for g in globs):
            continue
        placed: _FilePlace | None = None
        for k, (data, folds) in _block_texts(reader, file, keep):
            hits = matcher.hits(data, deadline.expired, folds=folds)
            first = next(hits, None)
            if first is None:
                if deadline.expired():
                    out.stopped = out.truncated = True
                    return out
                continue
            if placed is None:
                if not admit(file.path):
                    break
                placed = _FilePlace(reader, file, request.context_lines)
            if len(out.matches) >= request.max_matches:
                out.truncated = True  # one more matching line exists
                return out
            line, counted = placed.block_lines[k], 0
            for line_start, start in _chain(first, hits):
                if len(out.matches) >= request.max_matches:
                    out.truncated = True
                    return out
                line += data.count(b"\n", counted, line_start)
                counted = line_start
                entry = placed.entry(data, k, line, line_start, start)
                out.chars += _chars(entry)
                if out.chars > MAX_RESPONSE_CHARS:
                    out.truncated = True
                    return out
                if request.max_tokens is not None:
                    # A lower bound of what the entry adds to the answer: once they pass
                    # max_tokens, no further entry can be kept (fit_matches cuts the rest).
                    out.tokens += response_tokens(entry) - JOIN_SAVING_TOKENS
                    if out.tokens > request.max_tokens:
                        out.truncated = True
                        return out
                out.matches.append(entry)
            if deadline.expired():
                out.stopped = out.truncated = True
                return out
    return out


def _block_texts(
    reader: grep_text.BlockReader, file: grep_text.FileBlocks, keep: bool
) -> Iterator[tuple[int, Text]]:
    """``(place in the file, text)`` of ``file``'s candidate blocks, in order, from the
    process's cache or read (and kept when ``keep``): when every block is a candidate (a
    scan), the whole text at once, as block 0; else each block, several missing ones in
    one range read."""
    first = file.first_block
    if len(file.blocks) == file.block_count > 1:

        def whole() -> bytes:
            return reader.whole(first, file.block_count)[0]

        yield 0, TEXTS.get(f"{file.sha256}:*", whole, keep=keep)
        return
    keys = [f"{file.sha256}:{block_id - first}" for block_id in file.blocks]
    read: dict[int, bytes] = {}
    if len(keys) > 1:
        missing = [b for b, key in zip(file.blocks, keys, strict=True) if not TEXTS.has(key)]
        if len(missing) > 1:
            read = reader.blocks(missing[0], missing[-1] - missing[0] + 1)
    for block_id, key in zip(file.blocks, keys, strict=True):
        loaded = read.get(block_id)
        load = (
            functools.partial(reader.block, block_id)
            if loaded is None
            else functools.partial(bytes, loaded)
        )
        yield block_id - first, TEXTS.get(key, load, keep=keep)


def _chain(first: tuple[int, int], rest: Iterator[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    yield first
    yield from rest


class _FilePlace:
    """What places a match of one file: its blocks' and chunks' first lines, its chunks
    (each read when a match first needs it), and for context lines its whole text (read
    once: context may reach into the blocks around a match's)."""

    def __init__(
        self, reader: grep_text.BlockReader, file: grep_text.FileBlocks, context_lines: int
    ) -> None:
        self.conn = reader.conn
        self.reader = reader
        self.file = file
        self.context_lines = context_lines
        self.block_lines, self.chunk_lines = grep_text.placing_lines(self.conn, file.file_id)
        self._chunks: dict[int, tuple[str, str, str, str] | None] = {}
        self._whole: tuple[bytes, list[int]] | None = None

    def chunk(self, index: int) -> tuple[str, str, str, str] | None:
        if index not in self._chunks:
            self._chunks[index] = grep_text.chunk_at(self.conn, self.file.file_id, index)
        return self._chunks[index]

    def context(self, k: int, line_start: int) -> tuple[list[str], list[str]]:
        """The context lines around the line at ``line_start`` of block ``k``."""
        if self._whole is None:
            self._whole = self.reader.whole(self.file.first_block, self.file.block_count)
        whole, offsets = self._whole
        return _context(whole, offsets[k] + line_start, self.context_lines)

    def entry(self, data: bytes, k: int, line: int, line_start: int, start: int) -> dict[str, Any]:
        column = len(data[line_start:start].decode("utf-8", "replace")) + 1
        before, after = self.context(k, line_start) if self.context_lines else ([], [])
        # Lines above the first chunk (front matter) belong to the file's first chunk,
        # whose lexical fields hold the front matter's title and description.
        chunk_lines = self.chunk_lines
        index = max(bisect_right(chunk_lines, line) - 1, 0)
        chunk_id, heading_path = None, None
        chunk = self.chunk(index)
        if chunk is not None:
            chunk_id, heading_path, headings, content = chunk
            first = chunk_lines[index] if index < len(chunk_lines) else line
            heading_path = _heading_at(line - first, content, headings, heading_path)
        return {
            "path": self.file.path,
            "line": line,
            "column": column,
            "text": _cut(_line_at(data, line_start), column),
            "before": before,
            "after": after,
            "chunk_id": chunk_id,
            "heading_path": heading_path,
        }


def _heading_at(offset: int, content: str, headings: str, heading_path: str) -> str:
    """The breadcrumb in force ``offset`` lines into a chunk: the last of the headings
    starting in it (``headings``: JSON ``[offset, breadcrumb]`` pairs, rifflux.store.rows)
    at or above that line, else the chunk's own ``heading_path``."""
    if not headings:
        return heading_path
    found = heading_path
    for at, path in json.loads(headings):
        if content.count("\n", 0, at) > offset:
            break
        found = path
    return found


def _chars(entry: dict[str, Any]) -> int:
    lines = [entry["text"], *entry["before"], *entry["after"]]
    return len(entry["path"]) + sum(len(line) + 4 for line in lines) + ENTRY_OVERHEAD_CHARS
