"""FTS5 BM25 search. User text is always searched as plain words, never as FTS syntax.

A query with Chinese, Japanese or Korean characters is routed to ``chunks_cjk``, the
bigram side table of the same FTS5 family (rifflux.store.cjk): its CJK runs become their
bigrams (and, for a run of three or more characters, also the phrase of those bigrams,
which ranks the exact run above scattered pieces of it; a single character is a prefix
query, every bigram that starts with it), its other words stay as they are. Only chunks
with CJK text are in that table; the other chunks are ranked for the same query in
``chunks_fts``, exactly as before the side table, and the two lists are merged by bm25()
value. Each chunk is scored in exactly one table, each with its own statistics (BM25's
IDF and average length), so in a corpus without CJK text a CJK query ranks exactly as it
did before. A query with no CJK character takes the same path, with the same SQL, as
before the side table.

Phrases (CFS-012): a balanced ``"double-quoted span"`` of the query is a phrase. Its words
join the OR-ed terms, the phrase itself is one more OR-ed FTS5 phrase (``"w1 w2"``), and
chunks holding every phrase come first (tier 0, by bm25), then the other matches (tier 1):
a chunk with the exact phrase always ranks above one that only has its words. Quotes are
paired left to right; an unpaired last quote, like every other operator character, is
plain text. A query without a balanced quote builds exactly the MATCH of before.

Filters hand in the admitted rowids (``admitted``): the MATCH is restricted to them in
SQL (``rowid IN json_each(?)``), so a filter never empties the list by cutting first.

The file path is a third lexical field (``files_fts``, rifflux.store.paths): a chunk's
score is its own bm25() plus ``PATH_WEIGHT`` × the bm25() of its file's path for the same
terms, so on markdown whose paths name their topic the file a query names ranks higher.
It only adds to chunks that match by their own text (a path alone finds nothing), and a
query whose terms match no path (one probe of ``files_fts``), or an index written before
the table existed, runs exactly the SQL of before. The table is the writer's, kept by
triggers: a search builds nothing.

Front matter (rifflux.index.frontmatter) is kept out of chunks; what it says a document
is about (title, name, description, summary) is a field of the file's first chunk, where
the block was, in ``chunks_about`` (rifflux.store.knowledge): ``ABOUT_WEIGHT`` × its
bm25() is added to that chunk's bm25(), and a first chunk may match by it alone. A query
whose terms are in no about text (one probe), a CJK query's side table, or an index
without the table run the SQL of before.

What a retrieval experiment may vary (the bm25() column weights, the path weight, the stop
words dropped from queries) is an explicit :class:`LexicalOptions` argument whose defaults are the
core's; nothing here is meant to be patched at run time.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rifflux.store.cjk import (
    CJK_CHARS,
    CJK_TABLE,
    cjk_runs,
    has_cjk,
    has_cjk_table,
    rows_with_cjk,
    run_bigrams,
)
from rifflux.store.knowledge import has_knowledge
from rifflux.store.paths import CHUNK_FILE_INDEX, PATH_TABLE, has_path_table
from rifflux.store.schema import ABOUT_TABLE

# Tokens are runs of letters/digits, as FTS5's unicode61 tokenizer sees them; quotes,
# operators (AND, NEAR, *, -, :) and parentheses in user text can never reach MATCH.
_TOKEN = re.compile(r"\w+", re.UNICODE)
# Bounds the cost of pathological queries (a pasted document).
MAX_QUERY_TERMS = 64
# bm25() column weights: heading_path, content. A query term in a chunk's heading breadcrumb
# counts three times one in its text: on the awesome-copilot tuning queries file-level lexical
# nDCG@10 rose 0.943 → 0.961 (1,200/600 chunks), with SciFact train lexical 0.7001 → 0.6991
# and hybrid 0.7193 → 0.7180, within noise (BENCHMARKS.md).
HEADING_WEIGHT = 3.0
CONTENT_WEIGHT = 1.0
# The file path's bm25() (rifflux.store.paths), added to each of its chunks' bm25() times
# this weight; 0 turns it off. Chosen on the awesome-copilot tuning half (file-level hybrid
# nDCG@10 by weight 0 / 0.1 / 0.25 / 0.5 / 1: 0.934 / 0.940 / 0.953 / 0.948 / 0.932; the
# naive pipeline 0.943); held out 0.950 → 0.951 (naive 0.949), lexical 0.922 → 0.927; SciFact
# train unchanged (BENCHMARKS.md, issue 12).
PATH_WEIGHT = 0.25
# The front matter's about text (title, name, description, summary; rifflux.store.knowledge),
# added like the path: its bm25() times this weight to each matching chunk of the file.
ABOUT_WEIGHT = 0.5


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
    path_weight: float = PATH_WEIGHT
    about_weight: float = ABOUT_WEIGHT


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
    """An FTS5 MATCH expression: every term quoted, OR-ed (BM25 ranks by how many match);
    each phrase of :func:`query_phrases` is one more OR-ed FTS5 phrase."""
    terms = query_terms(text, stop_words)
    if not terms:
        return None
    phrases = [phrase_expression(p) for p in query_phrases(text)]
    return " OR ".join([*(f'"{term}"' for term in terms), *phrases])


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


def phrase_rows(
    conn: sqlite3.Connection, phrases: Sequence[Sequence[str]], rowids: Iterable[int]
) -> set[int]:
    """Which of ``rowids`` hold every phrase."""
    ids = sorted(set(rowids))
    if not phrases or not ids:
        return set()
    rows = conn.execute(
        "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? "
        "AND +rowid IN (SELECT value FROM json_each(?))",
        (phrases_match(phrases), json.dumps(ids)),
    )
    return {int(row[0]) for row in rows}


def build_cjk_match_query(text: str, stop_words: frozenset[str] = STOP_WORDS) -> str | None:
    """The MATCH expression for ``chunks_cjk``: the query's words OR its CJK bigrams (and
    the phrase of each run of three or more characters), each quoted."""
    words = query_terms(re.sub(f"[{CJK_CHARS}]+", " ", text), stop_words)
    clauses: dict[str, None] = {f'"{word}"': None for word in words}
    for run in cjk_runs(text):
        if len(run) == 1:
            # One character: every bigram that starts with it (and a lone one).
            clauses[f'"{run}"*'] = None
            continue
        bigrams = run_bigrams(run)
        clauses.update({f'"{bigram}"': None for bigram in bigrams})
        if len(bigrams) > 1:
            clauses[f'"{" ".join(bigrams)}"'] = None
    terms = list(clauses)[:MAX_QUERY_TERMS]
    return " OR ".join(terms) if terms else None


# Extra FTS rows fetched past ``limit`` so ties at the cut can be ordered exactly.
TIE_MARGIN = 16

_TOP_SQL = (
    "WITH top AS (SELECT rowid AS id, bm25({t}, {h}, {c}) AS score FROM {t} "
    "WHERE {t} MATCH ?{where} ORDER BY score LIMIT ?) "
    "SELECT top.id, f.path, c.chunk_index, top.score FROM top "
    "JOIN chunks c ON c.id = top.id JOIN files f ON f.id = c.file_id "
    "ORDER BY top.score, f.path, c.chunk_index"
)
# With a path weight: every match's bm25() plus the weighted bm25() of its file's path
# (no bonus when the path does not match), then the best ``limit``. Binds the path MATCH,
# the chunk MATCH, the ``where`` values and the limit, in that order. Each match finds its
# file through the narrow covering index ``chunks_file_of``; left to itself the planner reads
# the wide ``chunks`` row by rowid, which measured +8 ms p50 against +2.8 ms for the 73
# awesome-copilot queries (benchmarks/path_field_cost.py --joins).
_TOP_WITH_PATH_SQL = (
    "WITH p AS (SELECT rowid AS file_id, bm25(" + PATH_TABLE + ") AS score "
    "FROM " + PATH_TABLE + " WHERE " + PATH_TABLE + " MATCH ?), "
    "m AS (SELECT rowid AS id, bm25({t}, {h}, {c}) AS score FROM {t} "
    "WHERE {t} MATCH ?{where}), "
    "top AS (SELECT m.id AS id, m.score + {w} * coalesce(p.score, 0.0) AS score FROM m "
    "JOIN chunks k INDEXED BY " + CHUNK_FILE_INDEX + " ON k.id = m.id "
    "LEFT JOIN p ON p.file_id = k.file_id ORDER BY score LIMIT ?) "
    "SELECT top.id, f.path, c.chunk_index, top.score FROM top "
    "JOIN chunks c ON c.id = top.id JOIN files f ON f.id = c.file_id "
    "ORDER BY top.score, f.path, c.chunk_index"
)

# With the about field (rifflux.store.knowledge's ``chunks_about``: front matter's title,
# name, description and summary as a field of the file's first chunk). A chunk's score is
# its own bm25() (0 when its text does not match) + ``{aw}`` × its about bm25() (+ the
# path's weighted bm25()): ``t1`` ranks the text matches with their about (and path)
# bonus, ``a`` holds every about match (few: one row per file at most) with its bonus
# alone, and the union keeps each chunk's lowest. Exact: a first chunk whose text matches
# but falls outside ``t1`` scores worse than ``t1``'s last row with the bonus, so worse
# still without it. Only ``a`` is new work; the text matches are ranked as before.
# Binds [the path MATCH,] the about MATCH and ``where`` values, the chunk MATCH and
# ``where`` values, then the limit twice.
_ABOUT_CTES = (
    "a0 AS (SELECT rowid AS id, {aw} * bm25("
    + ABOUT_TABLE
    + ") AS score FROM "
    + ABOUT_TABLE
    + " WHERE "
    + ABOUT_TABLE
    + " MATCH ?{where}), "
    "m AS (SELECT rowid AS id, bm25({t}, {h}, {c}) AS score FROM {t} WHERE {t} MATCH ?{where}), "
)
_ABOUT_TOP = (
    "top AS (SELECT id, MIN(score) AS score FROM (SELECT id, score FROM t1 "
    "UNION ALL SELECT id, score FROM a) GROUP BY id ORDER BY score LIMIT ?) "
    "SELECT top.id, f.path, c.chunk_index, top.score FROM top "
    "JOIN chunks c ON c.id = top.id JOIN files f ON f.id = c.file_id "
    "ORDER BY top.score, f.path, c.chunk_index"
)
_TOP_ABOUT_SQL = (
    "WITH " + _ABOUT_CTES + "a AS (SELECT id, score FROM a0), "
    "t1 AS (SELECT m.id AS id, m.score + coalesce(a.score, 0.0) AS score FROM m "
    "LEFT JOIN a ON a.id = m.id ORDER BY score LIMIT ?), " + _ABOUT_TOP
)
_TOP_ABOUT_WITH_PATH_SQL = (
    "WITH p AS (SELECT rowid AS file_id, {w} * bm25(" + PATH_TABLE + ") AS score "
    "FROM "
    + PATH_TABLE
    + " WHERE "
    + PATH_TABLE
    + " MATCH ?), "
    + _ABOUT_CTES
    + "a AS (SELECT a0.id AS id, a0.score + coalesce(p.score, 0.0) AS score FROM a0 "
    "JOIN chunks k INDEXED BY " + CHUNK_FILE_INDEX + " ON k.id = a0.id "
    "LEFT JOIN p ON p.file_id = k.file_id), "
    "t1 AS (SELECT m.id AS id, m.score + coalesce(p.score, 0.0) + coalesce(a0.score, 0.0) "
    "AS score FROM m JOIN chunks k INDEXED BY " + CHUNK_FILE_INDEX + " ON k.id = m.id "
    "LEFT JOIN p ON p.file_id = k.file_id LEFT JOIN a0 ON a0.id = m.id "
    "ORDER BY score LIMIT ?), " + _ABOUT_TOP
)
_ANY_ABOUT_SQL = f"SELECT 1 FROM {ABOUT_TABLE} WHERE {ABOUT_TABLE} MATCH ? LIMIT 1"


def _any_about_matches(conn: sqlite3.Connection, match: str) -> bool:
    """Whether the about field applies: the index has the table and some file's about
    text holds a term of the MATCH."""
    return has_knowledge(conn) and conn.execute(_ANY_ABOUT_SQL, (match,)).fetchone() is not None


# Whether some indexed path holds a term of the MATCH: when none does (SciFact's
# ``docs/<id>.md``, most queries anywhere) the search skips the path join.
_ANY_PATH_SQL = f"SELECT 1 FROM {PATH_TABLE} WHERE {PATH_TABLE} MATCH ? LIMIT 1"


def _any_path_matches(conn: sqlite3.Connection, match: str) -> bool:
    """Whether the path bonus applies: the index has ``files_fts`` (an index written
    before it existed gives no bonus until a writer opens it) and a path matches."""
    return has_path_table(conn) and conn.execute(_ANY_PATH_SQL, (match,)).fetchone() is not None


# Extra conditions of the ranked FTS query (each binds one parameter). The phrase tiers
# always ask chunks_fts, whichever table ranks (rowids are chunk ids in both). ``+rowid``
# keeps the list away from FTS5's rowid lookup, which runs the whole MATCH once per
# listed rowid (measured on SciFact, 2,661 admitted rowids: 610 ms with ``rowid IN``,
# 3 ms with ``+rowid IN``, the MATCH alone 2 ms).
_ADMITTED = " AND +rowid IN (SELECT value FROM json_each(?))"
_IN_TIER0 = " AND +rowid IN (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?)"
_NOT_TIER0 = " AND +rowid NOT IN (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?)"


def lexical_search(
    conn: sqlite3.Connection,
    text: str,
    limit: int,
    options: LexicalOptions = DEFAULT_OPTIONS,
    admitted: np.ndarray | None = None,
) -> list[LexicalHit]:
    """Best ``limit`` chunks by BM25 (SQLite's bm25(): lower is better), ties by path, index.

    FTS5 ranks inside its own table first and only the top rows are joined for their
    path; if rows tied with the last kept one may lie beyond the fetched window, the
    window is widened until the tie-break is exact. A query with CJK characters ranks
    the chunks with CJK text in ``chunks_cjk`` and the others in ``chunks_fts`` (module
    docstring). With phrases in ``text``, chunks holding every phrase come first.
    ``admitted`` (sorted rowids) restricts the match to those chunks; None: every chunk.
    """
    match = build_match_query(text, options.stop_words)
    if match is None or limit <= 0:
        return []
    where = ""
    params: tuple[object, ...] = ()
    if admitted is not None:
        if admitted.shape[0] == 0:
            return []
        where, params = _ADMITTED, (json.dumps(admitted.tolist()),)
    path = match if options.path_weight > 0 and _any_path_matches(conn, match) else ""
    about = options.about_weight > 0 and _any_about_matches(conn, match)
    phrases = query_phrases(text)
    if not phrases:
        return _routed(conn, text, match, limit, options, where, params, path, about)
    both = phrases_match(phrases)
    tier0 = (where + _IN_TIER0, (*params, both))
    first = _routed(conn, text, match, limit, options, *tier0, path, about)
    if len(first) >= limit:
        return first
    rest = _routed(
        conn,
        text,
        match,
        limit - len(first),
        options,
        where + _NOT_TIER0,
        (*params, both),
        path,
        about,
    )
    return first + rest


def _routed(
    conn: sqlite3.Connection,
    text: str,
    match: str,
    limit: int,
    options: LexicalOptions,
    where: str,
    params: tuple[object, ...],
    path: str,
    about: bool = False,
) -> list[LexicalHit]:
    """The best ``limit`` rows under the extra conditions ``where``: from chunks_fts, or
    for a CJK query from both tables merged by bm25(). ``path``: the MATCH of the path
    bonus ("" for none); ``about``: add the about bonus too."""
    ranked = functools.partial(
        _ranked, conn, options=options, where=where, params=params, path=path, about=about
    )
    if not (has_cjk(text) and has_cjk_table(conn)):
        return ranked("chunks_fts", match, limit)
    cjk_match = build_cjk_match_query(text, options.stop_words)
    side = ranked(CJK_TABLE, cjk_match, limit) if cjk_match else []
    rest = ranked("chunks_fts", match, limit, skip=rows_with_cjk)
    return sorted(side + rest, key=lambda h: (h.bm25, h.key))[:limit]


def _ranked(
    conn: sqlite3.Connection,
    table: str,
    match: str,
    limit: int,
    *,
    options: LexicalOptions,
    skip: Callable[[sqlite3.Connection, Sequence[int]], set[int]] | None = None,
    where: str = "",
    params: tuple[object, ...] = (),
    path: str = "",
    about: bool = False,
) -> list[LexicalHit]:
    """The best ``limit`` rows of one FTS5 table, exactly tie-broken; ``skip`` names rows
    to leave out (they are ranked elsewhere), and the window widens past them; ``where``
    adds conditions whose values are ``params``. With a ``path`` MATCH (given only when
    ``options.path_weight`` > 0) the weighted bm25() of the file's path is added to each
    row's; with ``about`` (``chunks_fts`` only), the weighted bm25() of the about text of
    a file's first chunk is added to that chunk's, which it may match by alone."""
    weights = {"h": float(options.heading_weight), "c": float(options.content_weight)}
    limits = 1  # LIMIT placeholders at the end of the SQL
    if about and table == "chunks_fts":
        template = _TOP_ABOUT_WITH_PATH_SQL if path else _TOP_ABOUT_SQL
        sql = template.format(
            t=table,
            w=float(options.path_weight),
            aw=float(options.about_weight),
            where=where,
            **weights,
        )
        bound: tuple[object, ...] = (*((path,) if path else ()), match, *params, match, *params)
        limits = 2
    elif path:
        sql = _TOP_WITH_PATH_SQL.format(
            t=table, w=float(options.path_weight), where=where, **weights
        )
        bound = (path, match, *params)
    else:
        sql = _TOP_SQL.format(t=table, where=where, **weights)
        bound = (match, *params)
    fetch = limit + TIE_MARGIN
    while True:
        rows = conn.execute(sql, (*bound, *[fetch] * limits)).fetchall()
        hits = [LexicalHit(int(r[0]), (str(r[1]), int(r[2])), float(r[3])) for r in rows]
        if skip is not None and hits:
            skipped = skip(conn, [h.row_id for h in hits])
            kept = [h for h in hits if h.row_id not in skipped]
        else:
            kept = hits
        if len(hits) < fetch:
            return kept[:limit]
        # Rows not fetched score at least hits[-1].bm25, so the cut is exact once a kept
        # row past it scores worse than the last one kept.
        if len(kept) > limit and kept[-1].bm25 > kept[limit - 1].bm25:
            return kept[:limit]
        fetch *= 4
