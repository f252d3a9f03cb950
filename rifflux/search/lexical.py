"""FTS5 BM25 search. User text is always searched as plain words, never as FTS syntax.

What a retrieval experiment may vary (the bm25() column weights, the stop words dropped
from queries) is an explicit :class:`LexicalOptions` argument whose defaults are the
core's; nothing here is meant to be patched at run time.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

# Tokens are runs of letters/digits, as FTS5's unicode61 tokenizer sees them; quotes,
# operators (AND, NEAR, *, -, :) and parentheses in user text can never reach MATCH.
_TOKEN = re.compile(r"\w+", re.UNICODE)
# Bounds the cost of pathological queries (a pasted document).
MAX_QUERY_TERMS = 64
# bm25() column weights: heading_path, content.
HEADING_WEIGHT = 1.0
CONTENT_WEIGHT = 1.0


@dataclass(frozen=True, slots=True)
class LexicalHit:
    row_id: int
    key: tuple[str, int]
    bm25: float


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


@dataclass(frozen=True, slots=True)
class LexicalOptions:
    """The lexical search's tunables; the defaults are what every search uses.

    Hashable, so an experiment can key remembered candidates by it.
    """

    heading_weight: float = HEADING_WEIGHT
    content_weight: float = CONTENT_WEIGHT
    stop_words: frozenset[str] = STOP_WORDS


DEFAULT_OPTIONS = LexicalOptions()


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


def build_match_query(text: str, stop_words: frozenset[str] = STOP_WORDS) -> str | None:
    """An FTS5 MATCH expression: every term quoted, OR-ed (BM25 ranks by how many match)."""
    terms = query_terms(text, stop_words)
    if not terms:
        return None
    return " OR ".join(f'"{term}"' for term in terms)


# Extra FTS rows fetched past ``limit`` so ties at the cut can be ordered exactly.
TIE_MARGIN = 16

_TOP_SQL = (
    "WITH top AS (SELECT rowid AS id, bm25(chunks_fts, {h}, {c}) AS score FROM chunks_fts "
    "WHERE chunks_fts MATCH ? ORDER BY score LIMIT ?) "
    "SELECT top.id, f.path, c.chunk_index, top.score FROM top "
    "JOIN chunks c ON c.id = top.id JOIN files f ON f.id = c.file_id "
    "ORDER BY top.score, f.path, c.chunk_index"
)


def lexical_search(
    conn: sqlite3.Connection,
    text: str,
    limit: int,
    options: LexicalOptions = DEFAULT_OPTIONS,
) -> list[LexicalHit]:
    """Best ``limit`` chunks by BM25 (SQLite's bm25(): lower is better), ties by path, index.

    FTS5 ranks inside its own table first and only the top rows are joined for their
    path; if rows tied with the last kept one may lie beyond the fetched window, the
    window is widened until the tie-break is exact.
    """
    match = build_match_query(text, options.stop_words)
    if match is None or limit <= 0:
        return []
    sql = _TOP_SQL.format(h=float(options.heading_weight), c=float(options.content_weight))
    fetch = limit + TIE_MARGIN
    while True:
        rows = conn.execute(sql, (match, fetch)).fetchall()
        hits = [LexicalHit(int(r[0]), (str(r[1]), int(r[2])), float(r[3])) for r in rows]
        if len(hits) < fetch or hits[-1].bm25 > hits[min(limit, len(hits)) - 1].bm25:
            return hits[:limit]
        fetch *= 4
