"""The query parser: user text → FTS5 MATCH expressions. Never FTS syntax from the user.

Invariants:

* Tokens are runs of letters/digits (``\\w+``), as FTS5's ``unicode61`` tokenizer sees
  them; every term reaches MATCH quoted, so quotes, operators (AND, NEAR, ``*``, ``-``,
  ``:``) and parentheses in user text are plain text. At most ``MAX_QUERY_TERMS`` terms.
* English stop words are dropped from queries (the index keeps every word); a query made
  only of stop words keeps them, so it still finds something.
* Phrases: a balanced ``"double-quoted span"`` of two or more words is a phrase:
  its words join the OR-ed terms and the phrase itself is one more OR-ed FTS5 phrase.
  Quotes are paired left to right; an unpaired last quote is plain text. A query without
  a balanced quote builds the plain OR-ed MATCH.
* A query with Chinese, Japanese or Korean characters also has a MATCH for the bigram
  side table (``chunks_cjk``): its CJK runs split into bigrams by the index's own
  tokenizer (:mod:`rifflux.bigrams`), its other words as they are.

Pure functions of text: no SQLite here (the MATCH strings are run by rifflux.store.fts).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rifflux.bigrams import CJK_CHARS, cjk_runs, run_bigrams

_TOKEN = re.compile(r"\w+", re.UNICODE)
# Bounds the cost of pathological queries (a pasted document).
MAX_QUERY_TERMS = 64

# English function words dropped from queries (the index keeps every word). On SciFact
# train this is quality-neutral (lexical nDCG@10 0.6981 → 0.7001) and it keeps BM25
# from scoring the thousands of chunks that merely contain "to" or "in".
_STOP_WORDS_TEXT = """
a an and are as at be but by for if in into is it no not of on or such that the their then
there these they this to was will with what which who whom whose why how when where do does
did has have had been being were its than from can could should would may might must shall
we you your our he she his her them those i me my
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())


def query_terms(text: str, stop_words: frozenset[str] = STOP_WORDS) -> list[str]:
    """Distinct lower-cased word tokens of ``text`` in order, stop words dropped.

    A query made only of stop words keeps them, so it still finds something.
    """
    seen: dict[str, None] = {}
    for token in _TOKEN.findall(text.lower()):
        token = token.strip("_")
        if token and token not in seen:
            seen[token] = None
    terms = list(seen)
    content = [t for t in terms if t not in stop_words]
    return (content or terms)[:MAX_QUERY_TERMS]


def match_clauses(text: str, stop_words: frozenset[str] = STOP_WORDS) -> list[str]:
    """The OR-ed clauses of :func:`build_match_query`, in its order: every term quoted,
    then each phrase of :func:`query_phrases` (empty: no term)."""
    terms = query_terms(text, stop_words)
    if not terms:
        return []
    phrases = [phrase_expression(p) for p in query_phrases(text)]
    return [*(f'"{term}"' for term in terms), *phrases]


def build_match_query(text: str, stop_words: frozenset[str] = STOP_WORDS) -> str | None:
    """An FTS5 MATCH expression: every term quoted, OR-ed (BM25 ranks by how many match);
    each phrase of :func:`query_phrases` is one more OR-ed FTS5 phrase."""
    clauses = match_clauses(text, stop_words)
    return " OR ".join(clauses) if clauses else None


_QUOTED = re.compile(r'"([^"]*)"')


def query_phrases(text: str) -> list[tuple[str, ...]]:
    """The distinct phrases of ``text``: word tokens of each balanced double-quoted span
    (paired left to right) that has at least two words; a quoted single word is a term."""
    phrases: dict[tuple[str, ...], None] = {}
    for span in _QUOTED.findall(text):
        words = tuple(t.strip("_") for t in _TOKEN.findall(span.lower()) if t.strip("_"))
        if len(words) >= 2:
            phrases[words[:MAX_QUERY_TERMS]] = None
    return list(phrases)


def phrase_expression(words: Sequence[str]) -> str:
    """One FTS5 phrase: the quoted words in order (tokens are ``\\w+``: no quote inside)."""
    return '"' + " ".join(words) + '"'


def phrases_match(phrases: Sequence[Sequence[str]]) -> str:
    """An FTS5 MATCH that holds where every phrase occurs."""
    return " AND ".join(phrase_expression(p) for p in phrases)


def build_cjk_match_query(text: str, stop_words: frozenset[str] = STOP_WORDS) -> str | None:
    """The MATCH expression for ``chunks_cjk``: the query's words OR its CJK bigrams (and
    the phrase of each run of three or more characters), each quoted. A single character
    is a prefix query: every bigram that starts with it (and a lone one)."""
    clauses = cjk_match_clauses(text, stop_words)
    return " OR ".join(clauses) if clauses else None


def cjk_match_clauses(text: str, stop_words: frozenset[str] = STOP_WORDS) -> list[str]:
    """The OR-ed clauses of :func:`build_cjk_match_query`, in its order."""
    words = query_terms(re.sub(f"[{CJK_CHARS}]+", " ", text), stop_words)
    clauses: dict[str, None] = {f'"{word}"': None for word in words}
    for run in cjk_runs(text):
        if len(run) == 1:
            clauses[f'"{run}"*'] = None
            continue
        bigrams = run_bigrams(run)
        clauses.update({f'"{bigram}"': None for bigram in bigrams})
        if len(bigrams) > 1:
            clauses[f'"{" ".join(bigrams)}"'] = None
    return list(clauses)[:MAX_QUERY_TERMS]
