"""``path_glob`` matching in O(len(pattern) × len(path)), whatever the pattern.

Semantics (docs/mcp.md), matched against a stored path (POSIX ``/``), whole path:

* ``*`` any run of characters but ``/``; ``?`` one character but ``/``; ``[abc]``,
  ``[a-z]``, ``[!abc]`` one character of (not of) the set, never ``/``; ``]`` first in
  the set is a member, ``-`` first or last is a member; a backslash is a plain character
  everywhere (no escapes);
* ``**`` any run of characters, ``/`` included; ``**/`` is empty or any run that ends
  with ``/``, so ``**/*.md`` matches ``a.md`` and ``docs/x/a.md``;
* anything else matches itself; an unclosed ``[`` or a range whose ends are reversed
  (``[z-a]``) is a malformed glob: :func:`compile_glob` raises
  :class:`~rifflux.errors.InvalidQueryError` naming it, rather than reading an unclosed
  ``[`` as a literal (so that ``path_glob "["`` silently matches nothing). A set never
  matches ``/``, not even ``[!a]`` or ``[/]``.

Invariants (a backtracking regex runs ``"**/"*100 + "*b"`` for minutes while holding the
GIL, so the whole MCP server would stop):

* Every path is matched in O(len(pattern) × len(path)), whatever the pattern.
* A glob whose regex is provably that cheap under backtracking (:func:`linear_regex`:
  at most one repeating token, or ``prefix**/last-folder-part`` with at most one ``*``
  in that part) runs as that regex, at C speed: the usual globs (``**/*.md``,
  ``docs/**``, ``agents/*.agent.md``) cost what they cost before.
* Any other glob runs on an automaton that cannot backtrack. Its tokens are NFA states,
  a set of states a Python int (bit ``i``: "matched the tokens before ``i``"); one step
  over a character is a few integer operations on those bitsets, the ε-closure (``*``,
  ``**`` and ``**/`` may match nothing) one carry-propagating addition
  (:func:`_closure`): O(len(pattern)) per transition. Transitions are memoised per
  state set (a lazily built DFA of at most ``MAX_DFA_STATES`` sets, then forgotten), and
  a state that keeps itself on most characters (inside ``*`` or ``**``) jumps to the
  next character that would change it with one precompiled one-class regex search
  (a character class, no repetition: linear).
* ``GlobMatcher.work`` counts the automaton's primitive steps (characters stepped or
  skipped over, tokens visited while building transitions), so a test bounds the work
  of adversarial patterns without a clock.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass

from rifflux.errors import InvalidQueryError

MAX_DFA_STATES = 4096
"""State sets one matcher keeps transitions for; past that its table starts again."""
MAX_SKIP_INTERVALS = 48
"""Above this many distinct character intervals in a pattern, no state skips (each skip
table costs one transition per interval to build); the matcher then steps each character."""
MAX_SHOWN = 80
"""How much of a malformed glob an error message quotes."""

_END = 0x110000
_LITERAL, _ANY, _CLASS, _STAR, _DSTAR, _DSLASH = range(6)


@dataclass(frozen=True, slots=True)
class _Token:
    kind: int
    char: str = ""
    # _CLASS: inclusive (low, high) code point ranges, and whether the set is negated.
    ranges: tuple[tuple[int, int], ...] = ()
    negate: bool = False

    def accepts(self, ch: str) -> bool:
        """Whether this one-character token consumes ``ch`` (never ``/`` but a literal)."""
        if self.kind == _LITERAL:
            return ch == self.char
        if ch == "/":
            return False
        if self.kind == _ANY:
            return True
        code = ord(ch)
        return any(low <= code <= high for low, high in self.ranges) != self.negate


def _shown(pattern: str) -> str:
    text = repr(pattern)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


def malformed(pattern: str, why: str) -> InvalidQueryError:
    return InvalidQueryError(f"path_glob {_shown(pattern)} is not a valid glob: {why}")


def _class_end(pattern: str, start: int) -> int:
    """Index of the ``]`` closing the set opened at ``start``, or -1."""
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    return pattern.find("]", j)


def _class_ranges(pattern: str, body: str) -> tuple[tuple[int, int], ...]:
    """A set's members as code point ranges: ``a-z`` is a range, ``-`` first or last (or
    right after a range) is itself, as in Python's and POSIX's bracket expressions."""
    ranges: list[tuple[int, int]] = []
    j, n = 0, len(body)
    while j < n:
        low = body[j]
        if j + 2 < n and body[j + 1] == "-":
            high = body[j + 2]
            if ord(high) < ord(low):
                raise malformed(pattern, f"the range {low}-{high} is reversed; write {high}-{low}")
            ranges.append((ord(low), ord(high)))
            j += 3
        else:
            ranges.append((ord(low), ord(low)))
            j += 1
    return tuple(_without_slash(ranges))


def _without_slash(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges with ``/`` taken out: a set never matches it, negated or not."""
    slash = ord("/")
    out: list[tuple[int, int]] = []
    for low, high in ranges:
        if low <= slash <= high:
            out += [r for r in ((low, slash - 1), (slash + 1, high)) if r[0] <= r[1]]
        else:
            out.append((low, high))
    return out


def tokenize(pattern: str) -> tuple[_Token, ...]:
    """The glob's tokens, scanned left to right (``***`` is ``**`` then ``*``)."""
    tokens: list[_Token] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                i += 2
                if i < n and pattern[i] == "/":
                    tokens.append(_Token(_DSLASH))
                    i += 1
                else:
                    tokens.append(_Token(_DSTAR))
                continue
            tokens.append(_Token(_STAR))
        elif c == "?":
            tokens.append(_Token(_ANY))
        elif c == "[":
            end = _class_end(pattern, i)
            if end < 0:
                raise malformed(
                    pattern,
                    f"the [ at character {i + 1} is never closed; write [[] for a literal [",
                )
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            ranges = _class_ranges(pattern, body[1:] if negate else body)
            tokens.append(_Token(_CLASS, ranges=ranges, negate=negate))
            i = end
        else:
            tokens.append(_Token(_LITERAL, char=c))
        i += 1
    return tuple(tokens)


def _mask(tokens: tuple[_Token, ...], *kinds: int) -> int:
    return sum(1 << i for i, t in enumerate(tokens) if t.kind in kinds)


def _closure(states: int, eps: int) -> int:
    """``states`` plus every state reachable through tokens that may match nothing.

    ``eps`` has a bit per such token; a run of them is a run of ones. Adding the run's
    set bits to the run carries from the lowest set bit out of the run: the bits the carry
    cleared (from that bit to the run's end) and the carry itself (the state after the
    run) are the states reached.
    """
    total = eps + (states & eps)
    return states | (eps & ~total) | (total & ~eps)


def _char_class(intervals: list[tuple[int, int]]) -> re.Pattern[str]:
    """One regex character class of the half-open code point ``intervals``."""
    parts = [f"\\U{low:08x}-\\U{high - 1:08x}" for low, high in intervals]
    return re.compile(f"[{''.join(parts)}]")


_REGEX_OF = {_ANY: "[^/]", _STAR: "[^/]*", _DSTAR: ".*", _DSLASH: "(?:.*/)?"}


def _token_regex(token: _Token) -> str:
    if token.kind == _LITERAL:
        return re.escape(token.char)
    if token.kind == _CLASS:
        members = "".join(f"\\U{low:08x}-\\U{high:08x}" for low, high in token.ranges)
        if token.negate:
            return f"[^/{members}]"
        return f"[{members}]" if members else "(?!)"  # [/] matches nothing
    return _REGEX_OF[token.kind]


def linear_regex(tokens: tuple[_Token, ...]) -> re.Pattern[str] | None:
    """The tokens as a regex when a backtracking match of it is provably
    O(len(pattern) × len(path)), else None (the DFA then matches). Two shapes, which
    cover the usual globs at C speed:

    * at most one token repeats (``*``, ``**`` or ``**/``: ``docs/**``, ``*.md``,
      ``**/README.md``): the engine tries at most len(path) + 1 lengths for it, each
      followed by fixed-width tokens;
    * fixed-width tokens, one ``**/``, then a last folder-free part with at most one
      ``*`` (``**/*.md``, ``skills/**/*.md``): that part holds no ``/``, so ``**/`` must
      end at the path's last ``/`` (or be empty when there is none after the prefix);
      an atomic group takes exactly that and never backtracks into it, and the rest is
      the first shape.
    """
    repeats = [i for i, t in enumerate(tokens) if t.kind >= _STAR]
    parts = [_token_regex(t) for t in tokens]
    if len(repeats) <= 1:
        return re.compile("".join(parts), re.DOTALL)
    first = repeats[0]
    tail = tokens[first + 1 :]
    if (
        tokens[first].kind == _DSLASH
        and len(repeats) == 2
        and tokens[repeats[1]].kind == _STAR
        and not any(t.kind == _LITERAL and t.char == "/" for t in tail)
    ):
        parts[first] = "(?>(?:.*/)?)"
        return re.compile("".join(parts), re.DOTALL)
    return None


class GlobMatcher:
    """One compiled glob; :meth:`matches` tests a whole path. Safe to share across threads
    (table updates are single dict stores; a race only computes a transition twice)."""

    def __init__(self, pattern: str, *, regex: bool = True) -> None:
        """``regex=False``: always the DFA (tests bound its work on every pattern)."""
        self.pattern = pattern
        tokens = tokenize(pattern)
        self._tokens = tokens
        self._regex = linear_regex(tokens) if regex else None
        # Matched on the automaton (slower per character): callers check deadlines per path.
        self.automaton = self._regex is None
        self._accept = 1 << len(tokens)
        self._eps = _mask(tokens, _STAR, _DSTAR, _DSLASH)
        self._loop_any = _mask(tokens, _DSTAR)
        self._loop_not_slash = _mask(tokens, _STAR)
        # ``**/`` stays in its state on any character, and leaves it only on a ``/``: a
        # state kept that way may not skip ahead through ε (``(?:.*/)?`` after ``a``).
        self._slash_ends = _mask(tokens, _DSLASH)
        self._consumers = [(1 << i, t) for i, t in enumerate(tokens) if t.kind <= _CLASS]
        self._start = _closure(1, self._eps)
        self._accepting: dict[str, int] = {}
        # state set -> (its transitions by character, its skip: see _entry)
        self._table: dict[int, tuple[dict[str, int], re.Pattern[str] | bool]] = {}
        self._intervals = self._alphabet()
        self.work = 0

    def _alphabet(self) -> list[tuple[int, int]] | None:
        """Half-open code point intervals on which every token behaves alike, or None
        when there are too many to build skip classes from."""
        cuts = {0, _END, ord("/"), ord("/") + 1}
        for token in self._tokens:
            if token.kind == _LITERAL:
                cuts.update((ord(token.char), ord(token.char) + 1))
            for low, high in token.ranges:
                cuts.update((low, high + 1))
        ordered = sorted(cuts)
        if len(ordered) - 1 > MAX_SKIP_INTERVALS:
            return None
        return list(itertools.pairwise(ordered))

    def _accepting_tokens(self, ch: str) -> int:
        """Bits of the one-character tokens that consume ``ch``."""
        found = self._accepting.get(ch)
        if found is None:
            self.work += len(self._consumers) + 1
            found = sum(bit for bit, token in self._consumers if token.accepts(ch))
            if len(self._accepting) >= MAX_DFA_STATES:
                self._accepting.clear()
            self._accepting[ch] = found
        return found

    def _next(self, states: int, ch: str) -> int:
        """The NFA step: the state set after ``ch``, O(len(pattern)) big-int operations."""
        self.work += len(self._tokens) + 1
        moved = (states & self._accepting_tokens(ch)) << 1 | states & self._loop_any
        if ch == "/":
            moved |= (states & self._slash_ends) << 1
        else:
            moved |= states & self._loop_not_slash
        return _closure(moved, self._eps) | states & self._slash_ends

    def _step(self, states: int, ch: str) -> int:
        """The state set after ``ch``, memoised in the state's row."""
        row = self._entry(states)[0]
        found = row.get(ch)
        if found is None:
            found = row[ch] = self._next(states, ch)
        return found

    def _entry(self, states: int) -> tuple[dict[str, int], re.Pattern[str] | bool]:
        """A state set's row of transitions and its skip: a regex finding the next
        character that changes the set, True when no character does (the rest of the
        path cannot change the answer), False when every character must be stepped."""
        found = self._table.get(states)
        if found is not None:
            return found
        if len(self._table) >= MAX_DFA_STATES:
            self._table.clear()
        row: dict[str, int] = {}
        skip: re.Pattern[str] | bool = False
        if self._intervals is not None:
            exits = []
            for low, high in self._intervals:
                rep = chr(low)
                after = row[rep] = self._next(states, rep)
                if after != states:
                    exits.append((low, high))
            if not exits:
                skip = True
            elif len(exits) < len(self._intervals):
                skip = _char_class(exits)
        found = self._table[states] = (row, skip)
        return found

    def matches(self, path: str) -> bool:
        """Whether the whole of ``path`` matches the glob."""
        if self._regex is not None:
            return self._regex.fullmatch(path) is not None
        table = self._table
        states, pos, n = self._start, 0, len(path)
        steps = 0
        while pos < n and states:
            entry = table.get(states) or self._entry(states)
            skip = entry[1]
            if skip is not False:
                if skip is True:
                    break
                found = skip.search(path, pos)
                if found is None:
                    break
                pos = found.start()
            ch = path[pos]
            after = entry[0].get(ch)
            states = self._step(states, ch) if after is None else after
            pos += 1
            steps += 1
        # Characters skipped over are scanned once each by a one-class regex search.
        self.work += steps + n
        return bool(states & self._accept)


@functools.lru_cache(maxsize=256)
def compile_glob(pattern: str) -> GlobMatcher:
    """The matcher of ``pattern`` (cached); raises InvalidQueryError when it is malformed."""
    return GlobMatcher(pattern)


def check_glob(pattern: str) -> str:
    """``pattern`` when it is a well-formed glob, else the one-line InvalidQueryError."""
    tokenize(pattern)
    return pattern
