"""FTS5 BM25 search. User text is always searched as plain words, never as FTS syntax.

This module decides what a lexical search asks: which table ranks (``chunks_fts``, and
``chunks_cjk`` for a query with CJK characters, the two lists merged by bm25() value),
with which weights (:class:`LexicalOptions`: bm25() column weights, ``PATH_WEIGHT`` for
the file path field, ``ABOUT_WEIGHT`` for front matter's about text, stop words) and in
which scope (the admitted rowids of a filter, restricted in SQL so a filter never empties
the list by cutting first; phrase tiers). rifflux.search.query turns user text into MATCH
expressions; rifflux.store.fts holds the SQL that runs them.

Invariants: each chunk is scored in exactly one table; a chunk holding every quoted
phrase ranks above one that only has its words; the path and about bonuses only add to
chunks that match by their own text (a first chunk may match by its about text); the
bounded search (rifflux.store.fts) returns the same rows and bm25() values as scoring
every match (``LexicalOptions(bounded=False)``, the reference the differential test
compares with); a search builds nothing. Nothing here is meant to be patched at run
time. The design: docs/architecture.md, "A query".
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rifflux.bigrams import has_cjk
from rifflux.search.query import (
    STOP_WORDS,
    build_match_query,
    cjk_match_clauses,
    match_clauses,
    phrases_match,
    query_phrases,
)
from rifflux.store.cjk import CJK_TABLE, has_cjk_table, rows_with_cjk
from rifflux.store.fts import (
    FTS_TABLE,
    Bm25Weights,
    ClauseCounts,
    LexicalHit,
    Scope,
    any_about_matches,
    any_path_matches,
    rowids_json,
    rows_matching,
    top_hits,
)

# bm25() column weights: heading_path, content. A query term in a chunk's heading breadcrumb
# counts three times one in its text: on the awesome-copilot tuning queries file-level lexical
# nDCG@10 rose 0.943 → 0.961 (1,200/600 chunks), with SciFact train lexical 0.7001 → 0.6991
# and hybrid 0.7193 → 0.7180, within noise.
HEADING_WEIGHT = 3.0
CONTENT_WEIGHT = 1.0
# The file path's bm25() (rifflux.store.paths), added to each of its chunks' bm25() times
# this weight; 0 turns it off. Chosen on the awesome-copilot tuning half (file-level hybrid
# nDCG@10 by weight 0 / 0.1 / 0.25 / 0.5 / 1: 0.934 / 0.940 / 0.953 / 0.948 / 0.932; the
# naive pipeline 0.943); held out 0.950 → 0.951 (naive 0.949), lexical 0.922 → 0.927; SciFact
# train unchanged.
PATH_WEIGHT = 0.25
# The front matter's about text (title, name, description, summary; rifflux.store.knowledge),
# added like the path: its bm25() times this weight to each matching chunk of the file.
ABOUT_WEIGHT = 0.5


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
    # Seek the best rows among those holding the rarer terms first (rifflux.store.fts's
    # bounds: the same rows and scores); False scores every match, as the reference.
    bounded: bool = True

    @property
    def weights(self) -> Bm25Weights:
        """The weights the FTS5 SQL (rifflux.store.fts) is formatted with."""
        return Bm25Weights(
            self.heading_weight, self.content_weight, self.path_weight, self.about_weight
        )


DEFAULT_OPTIONS = LexicalOptions()


def phrase_rows(
    conn: sqlite3.Connection, phrases: Sequence[Sequence[str]], rowids: Iterable[int]
) -> set[int]:
    """Which of ``rowids`` hold every phrase."""
    if not phrases:
        return set()
    return rows_matching(conn, phrases_match(phrases), rowids)


def lexical_search(
    conn: sqlite3.Connection,
    text: str,
    limit: int,
    options: LexicalOptions = DEFAULT_OPTIONS,
    admitted: np.ndarray | None = None,
    counts: ClauseCounts | None = None,
) -> list[LexicalHit]:
    """Best ``limit`` chunks by BM25 (SQLite's bm25(): lower is better), ties by path, index.

    FTS5 ranks inside its own table first and only the top rows are joined for their
    path; if rows tied with the last kept one may lie beyond the fetched window, the
    window is widened until the tie-break is exact. A query with CJK characters ranks
    the chunks with CJK text in ``chunks_cjk`` and the others in ``chunks_fts`` (module
    docstring). With phrases in ``text``, chunks holding every phrase come first.
    ``admitted`` (sorted rowids) restricts the match to those chunks; None: every chunk.
    ``counts``: the clause row counts ``conn``'s searches keep (none: this search's own).
    """
    match = build_match_query(text, options.stop_words)
    if match is None or limit <= 0:
        return []
    rows: str | None = None
    if admitted is not None:
        if admitted.shape[0] == 0:
            return []
        rows = rowids_json(admitted.tolist())
    path = match if options.path_weight > 0 and any_path_matches(conn, match) else ""
    about = options.about_weight > 0 and any_about_matches(conn, match)
    phrases = query_phrases(text)
    counts = ClauseCounts() if counts is None else counts
    if not phrases:
        return _routed(conn, text, match, limit, options, Scope(rows), path, about, counts)
    both = phrases_match(phrases)
    first = _routed(conn, text, match, limit, options, Scope(rows, both), path, about, counts)
    if len(first) >= limit:
        return first
    rest = _routed(
        conn,
        text,
        match,
        limit - len(first),
        options,
        Scope(rows, both, holding=False),
        path,
        about,
        counts,
    )
    return first + rest


def _routed(
    conn: sqlite3.Connection,
    text: str,
    match: str,
    limit: int,
    options: LexicalOptions,
    scope: Scope,
    path: str,
    about: bool = False,
    counts: ClauseCounts | None = None,
) -> list[LexicalHit]:
    """The best ``limit`` rows in ``scope``: from chunks_fts, or for a CJK query from both
    tables merged by bm25(). ``path``: the MATCH of the path bonus ("" for none);
    ``about``: add the about bonus too; ``counts``: clause row counts of ``conn``."""
    ranked = functools.partial(
        top_hits,
        conn,
        weights=options.weights,
        scope=scope,
        path=path,
        about=about,
        counts=counts,
    )
    clauses = match_clauses(text, options.stop_words) if options.bounded else []
    if not (has_cjk(text) and has_cjk_table(conn)):
        return ranked(FTS_TABLE, match, limit, clauses=clauses)
    cjk = cjk_match_clauses(text, options.stop_words)
    side = (
        ranked(CJK_TABLE, " OR ".join(cjk), limit, clauses=cjk if options.bounded else [])
        if cjk
        else []
    )
    rest = ranked(FTS_TABLE, match, limit, skip=rows_with_cjk, clauses=clauses)
    return sorted(side + rest, key=lambda h: (h.bm25, h.key))[:limit]
