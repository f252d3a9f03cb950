"""Token budgets: fit search results (and a file's chunks) into ``max_tokens``.

Invariants:

* :func:`estimate_tokens` is the one token count of Rifflux, and it is additive over
  the pieces of a text: a word of letters costs 1 token per 8 letters (rounded up; per 3
  when it has a letter outside ASCII, as BPE vocabularies split such words finely), a run
  of digits 1 per 3, a run of punctuation 1 per 2 characters, a line break 1, and each
  Chinese, Japanese or Korean character 1. Measured against OpenAI's cl100k_base and
  o200k_base BPE (``benchmarks/token_estimate.py``) on
  1,569 pieces of 1,200 characters of awesome-copilot, it over-counts by ~15 % on average
  and counts low on 4 % (cl100k) / 1.7 % (o200k) of the pieces, by at most 34 % / 18 %
  (non-English Latin-script prose): a budget is a cap, so the estimate errs on the side
  of sending less. Against the embedding model's WordPiece it is 4 % low on average.
* :func:`fit_results` keeps rank order. Results stay whole while they fit; once one does
  not, each later result gets at most an even share of what is left (never less than
  ``MIN_EXCERPT_TOKENS``): whole if it fits its share, else cut to the window of whole
  words (single characters in CJK text) that covers the most distinct query terms, then
  the most matches, preferring a window that starts a sentence, then the earliest. A
  result whose share would be under ``MIN_EXCERPT_TOKENS`` is dropped. The estimated
  tokens of the contents kept never exceed ``max_tokens``.
* A cut is marked with ``…`` at the end(s) where text was removed; the marks are counted
  in the result's ``tokens``.
* ``max_tokens`` is the size of the whole response: :func:`fit_response` counts the
  response as it is sent, compact JSON (:func:`compact_json`, :func:`response_tokens`),
  keys, metadata and ``budget`` included, and keeps it within ``max_tokens`` (unless the
  response without any text, its query echoed, is larger on its own). Results that
  cannot keep even a short excerpt beside their metadata are dropped from the end.
* Pure functions on plain data: nothing here reads the index.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rifflux.bigrams import CJK_CHARS, cjk_bigrams
from rifflux.search.query import query_terms

MIN_EXCERPT_TOKENS = 24
"""A cut result shorter than this would say too little to be worth its place: dropped."""
ELLIPSIS = "…"

LETTERS_PER_TOKEN = 8
ACCENTED_LETTERS_PER_TOKEN = 3
DIGITS_PER_TOKEN = 3
PUNCTUATION_PER_TOKEN = 2

_PIECE = re.compile(rf"[{CJK_CHARS}]|[^\W\d_{CJK_CHARS}]+|\d+|[^\w\s]+|_+|\n")
# Units a cut may fall between: a run of non-space characters with no CJK in it, or one
# CJK character. Cutting between two units never splits a word.
_UNIT = re.compile(rf"[{CJK_CHARS}]|[^\s{CJK_CHARS}]+")
_SENTENCE_END = re.compile(r"[.!?:;。！？；：]$")
_CJK_CHAR = re.compile(rf"[{CJK_CHARS}]")


def _piece_tokens(piece: str) -> int:
    first = piece[0]
    if first.isascii():
        if first.isalpha():
            return -(-len(piece) // LETTERS_PER_TOKEN) if piece.isascii() else _accented(piece)
        if first.isdigit():
            return -(-len(piece) // DIGITS_PER_TOKEN)
        if first == "\n":
            return 1
        return -(-len(piece) // PUNCTUATION_PER_TOKEN)
    if _CJK_CHAR.match(first):
        return 1
    if first.isalpha():
        return _accented(piece)
    if first.isdigit():
        return math.ceil(len(piece) / DIGITS_PER_TOKEN)
    return math.ceil(len(piece) / PUNCTUATION_PER_TOKEN)


def _accented(piece: str) -> int:
    return math.ceil(len(piece) / ACCENTED_LETTERS_PER_TOKEN)


def estimate_tokens(text: str) -> int:
    """Rifflux's token estimate of ``text`` (see the module docstring for its error)."""
    total = 0
    for piece in _PIECE.findall(text):
        # Fast path: any ASCII piece of one or two characters is one token.
        total += 1 if len(piece) <= 2 and piece.isascii() else _piece_tokens(piece)
    return total


@dataclass(frozen=True, slots=True)
class Fitted:
    """One text after fitting: what is kept, its token estimate, whether it was cut."""

    text: str
    tokens: int
    truncated: bool


def _term_matches(text: str, query: str) -> list[set[str]]:
    """For each unit of ``text`` (``_UNIT``), the query terms it matches."""
    units = list(_UNIT.finditer(text))
    found: list[set[str]] = [set() for _ in units]
    unit_starts = [unit.start() for unit in units]
    lowered = text.lower()
    for term in query_terms(query):
        if _CJK_CHAR.search(term):
            continue
        # A word starting with the term's stem (its first letters) stands in for the index's
        # stemming ("indexes" finds "index"); a short term must match a whole word.
        stem = term if len(term) < 5 else term[: len(term) - 2]
        tail = r"(?!\w)" if len(term) < 5 else ""
        pattern = re.compile(r"(?<!\w)" + re.escape(stem) + tail)
        for match in pattern.finditer(lowered):
            index = bisect.bisect_right(unit_starts, match.start()) - 1
            if index >= 0:
                found[index].add(term)
    # CJK: both characters of every query bigram found in the text match it.
    starts = {unit.start(): index for index, unit in enumerate(units)}
    for bigram in set(cjk_bigrams(query)):
        at = text.find(bigram)
        while at >= 0:
            for offset in (0, 1):
                unit_index = starts.get(at + offset)
                if unit_index is not None:
                    found[unit_index].add(bigram)
            at = text.find(bigram, at + 1)
    return found


def excerpt(text: str, query: str, max_tokens: int, *, whole: int | None = None) -> Fitted | None:
    """The best part of ``text`` for ``query`` within ``max_tokens``; ``None`` if no unit fits.

    ``text`` itself when it fits whole (``whole``: its estimate, when already known).
    """
    whole = estimate_tokens(text) if whole is None else whole
    if whole <= max_tokens:
        return Fitted(text, whole, False)
    units = list(_UNIT.finditer(text))
    if not units:
        return None
    matches = _term_matches(text, query)
    # Cost of unit i: its own pieces plus the line breaks between it and the previous unit
    # (over-counting one gap at the window's start keeps the sum an upper bound).
    costs = []
    previous_end = 0
    known: dict[str, int] = {}
    for unit in units:
        word = unit.group()
        if word.isascii() and word.isalpha():  # Most units: a plain English word.
            cost = -(-len(word) // LETTERS_PER_TOKEN)
        elif word in known:
            cost = known[word]
        else:
            cost = known[word] = estimate_tokens(word)
        costs.append(cost + text.count("\n", previous_end, unit.start()))
        previous_end = unit.end()
    sentence_start = [
        i == 0
        or "\n\n" in text[units[i - 1].end() : units[i].start()]
        or bool(_SENTENCE_END.search(units[i - 1].group()))
        for i in range(len(units))
    ]
    # Room for the two ellipses a middle window needs.
    room = max_tokens - 2 * _piece_tokens(ELLIPSIS)
    best: tuple[tuple[int, int, bool, int], int, int] | None = None
    counts: dict[str, int] = {}
    hits = 0
    cost = 0
    end = 0  # The window is units[start:end].
    for start in range(len(units)):
        if end < start:
            end, cost, hits, counts = start, 0, 0, {}
        while end < len(units) and cost + costs[end] <= room:
            cost += costs[end]
            for term in matches[end]:
                counts[term] = counts.get(term, 0) + 1
            hits += bool(matches[end])
            end += 1
        if end > start:
            score = (len(counts), hits, sentence_start[start], -start)
            if best is None or score > best[0]:
                best = (score, start, end)
            cost -= costs[start]
            for term in matches[start]:
                counts[term] -= 1
                if not counts[term]:
                    del counts[term]
            hits -= bool(matches[start])
    if best is None:
        return None
    _score, start, end = best
    cut = text[units[start].start() : units[end - 1].end()]
    if start > 0:
        cut = ELLIPSIS + cut
    if end < len(units):
        cut += ELLIPSIS
    return Fitted(cut, estimate_tokens(cut), True)


def fit_texts(
    texts: Sequence[str], query: str, max_tokens: int, check: Callable[[], None] | None = None
) -> list[Fitted | None]:
    """Each text fitted (``None``: dropped), in order, with a total of at most ``max_tokens``;
    ``check`` (a search's deadline) is called before each text."""
    remaining = max_tokens
    fitted: list[Fitted | None] = []
    sharing = False
    for index, text in enumerate(texts):
        if check is not None:
            check()
        tokens = estimate_tokens(text)
        if not sharing and tokens <= remaining:
            fitted.append(Fitted(text, tokens, False))
            remaining -= tokens
            continue
        sharing = True
        share = max(MIN_EXCERPT_TOKENS, remaining // (len(texts) - index))
        allowed = min(share, remaining)
        if allowed < MIN_EXCERPT_TOKENS and tokens > remaining:
            fitted.append(None)
            continue
        one = excerpt(text, query, allowed, whole=tokens)
        if one is None or (one.truncated and one.tokens < min(MIN_EXCERPT_TOKENS, allowed)):
            fitted.append(None)
            continue
        fitted.append(one)
        remaining -= one.tokens
    return fitted


def fit_results(
    results: Iterable[dict[str, Any]],
    query: str,
    max_tokens: int,
    check: Callable[[], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Search results fitted to the budget: ``(results, budget)``.

    Each kept result gains ``tokens`` and ``truncated``; ``budget`` is
    ``{max_tokens, used_tokens, dropped}``.
    """
    given = list(results)
    kept: list[dict[str, Any]] = []
    fitted = fit_texts([r["content"] for r in given], query, max_tokens, check)
    for result, one in zip(given, fitted, strict=True):
        if one is not None:
            kept.append(
                {**result, "content": one.text, "tokens": one.tokens, "truncated": one.truncated}
            )
    used = sum(r["tokens"] for r in kept)
    return kept, {"max_tokens": max_tokens, "used_tokens": used, "dropped": len(given) - len(kept)}


def fit_in_order(texts: Sequence[str], max_tokens: int) -> list[Fitted]:
    """A document's pieces for reading in order: whole while they fit, then the next one
    cut to its beginning (whole words, ending ``…``) if at least ``MIN_EXCERPT_TOKENS``
    remain; everything after that is left out (the list is shorter)."""
    remaining = max_tokens
    fitted: list[Fitted] = []
    for text in texts:
        tokens = estimate_tokens(text)
        if tokens <= remaining:
            fitted.append(Fitted(text, tokens, False))
            remaining -= tokens
            continue
        if remaining >= MIN_EXCERPT_TOKENS:
            head = excerpt(text, "", remaining, whole=tokens)
            if head is not None:
                fitted.append(head)
        break
    return fitted


def compact_json(value: Any) -> str:
    """``value`` as the MCP server sends it: JSON without indentation or spaces."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def response_tokens(response: Any) -> int:
    """The estimated tokens of a response as it is sent (:func:`compact_json`)."""
    return estimate_tokens(compact_json(response))


Fit = Callable[[Sequence[str], int], Sequence[Fitted | None]]
"""Fits texts into a number of tokens: one entry per text kept or dropped (``None``); a
shorter list leaves the rest out."""
Render = Callable[[Sequence[Fitted | None], int], dict[str, Any]]
"""Builds the whole response from the fitted texts (``None``, or absent past the end:
left out) and the value of its ``used_tokens``."""

MAX_FIT_ROUNDS = 8
"""How many times :func:`fit_response` shrinks the texts' room before it gives up on them
(JSON escaping makes a text's cost in the response differ slightly from its estimate)."""
_PLACEHOLDER = Fitted("", 99_999, True)
"""A text emptied, with the widest ``tokens`` a kept text may show: the metadata's cost."""


def fit_response(texts: Sequence[str], fit: Fit, render: Render, max_tokens: int) -> dict[str, Any]:
    """The response ``render`` builds from ``texts`` fitted so that the whole of it, as
    compact JSON, is at most ``max_tokens`` estimated tokens; its ``used_tokens`` is the
    response's own estimate.

    The first ``n`` texts take part, for the largest ``n`` (found by bisection, at most
    as many as fit with their metadata and ``MIN_EXCERPT_TOKENS`` each) for which ``fit``
    keeps a part of every one of them in the room their metadata leaves; that room
    shrinks by any excess the serialized response shows (JSON escaping).
    """

    def size(fitted: Sequence[Fitted | None]) -> int:
        # used_tokens shown as max_tokens: at least as many digits as the final value.
        return response_tokens(render(fitted, max_tokens))

    def fit_first(count: int) -> Sequence[Fitted | None]:
        room = max_tokens - size([_PLACEHOLDER] * count)
        for _ in range(MAX_FIT_ROUNDS):
            fitted = fit(texts[:count], room) if room > 0 else []
            over = size(fitted) - max_tokens
            if over <= 0:
                return fitted
            room -= over
        return []

    floors = [min(estimate_tokens(text), MIN_EXCERPT_TOKENS) for text in texts]
    low, high = 0, len(texts)
    while low < high:
        middle = (low + high + 1) // 2
        if size([_PLACEHOLDER] * middle) + sum(floors[:middle]) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    # The most texts that all keep a part (or a whole) in the room their metadata leaves.
    best: Sequence[Fitted | None] = []
    high, low = low, 0
    while low < high:
        middle = (low + high + 1) // 2
        fitted = fit_first(middle)
        if _kept(fitted) == middle:
            low, best = middle, fitted
        else:
            high = middle - 1
    return _with_used_tokens(render, best)


def _kept(fitted: Sequence[Fitted | None]) -> int:
    return sum(one is not None for one in fitted)


def _with_used_tokens(render: Render, fitted: Sequence[Fitted | None]) -> dict[str, Any]:
    """The response whose ``used_tokens`` is its own estimate (a fixed point: the count
    only grows with the digits it is written with, so a few rounds reach it)."""
    used = 0
    response = render(fitted, used)
    for _ in range(4):
        measured = response_tokens(response)
        if measured == used:
            break
        used = measured
        response = render(fitted, used)
    return response


def budget_response(
    response: dict[str, Any],
    query: str,
    max_tokens: int,
    check: Callable[[], None] | None = None,
    *,
    text_key: str = "content",
) -> dict[str, Any]:
    """A search response fitted to ``max_tokens`` (:func:`fit_response`): its results'
    ``text_key`` texts fitted as :func:`fit_texts` fits them, ``count`` updated, ``budget``
    ``{max_tokens, used_tokens, dropped}`` added just before ``results``; every other key
    as it was, in its place."""
    given = response["results"]

    def fit(texts: Sequence[str], room: int) -> list[Fitted | None]:
        return fit_texts(texts, query, room, check)

    def render(fitted: Sequence[Fitted | None], used: int) -> dict[str, Any]:
        kept = [
            {**result, text_key: one.text, "tokens": one.tokens, "truncated": one.truncated}
            for result, one in zip(given, fitted, strict=False)
            if one is not None
        ]
        out = {k: v for k, v in response.items() if k != "results"}
        out["count"] = len(kept)
        out["budget"] = {
            "max_tokens": max_tokens,
            "used_tokens": used,
            "dropped": len(given) - len(kept),
        }
        out["results"] = kept
        return out

    return fit_response([r[text_key] for r in given], fit, render, max_tokens)


def within_limit(
    response: dict[str, Any],
    limit: int,
    fit: Callable[[dict[str, Any], int], dict[str, Any]],
) -> dict[str, Any]:
    """``response`` itself when it is at most ``limit`` tokens (0: no limit), else
    ``fit(response, limit)``: the default budget of a call that gave no ``max_tokens``."""
    if limit <= 0 or response_tokens(response) <= limit:
        return response
    return fit(response, limit)
