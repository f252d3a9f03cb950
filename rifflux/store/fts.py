"""Every FTS5 query a search runs: the ranked BM25 SQL, the phrase and field probes.

The search side (rifflux.search.lexical) decides what to ask; this module owns how it is
asked: the SQL text, its parameters and the exact tie-break at the cut.

Invariants:

* Every statement only reads, and binds every value (MATCH strings, rowid lists as JSON,
  limits); table names and weights are formatted in from constants and floats, never
  from user text.
* Ranked rows are ordered by score (SQLite's bm25(): lower is better), then path, then
  chunk index; :func:`top_hits` widens its window until rows tied with the last kept one
  cannot lie beyond it, so the cut is exact.
* ``+rowid IN (...)`` (not ``rowid IN``) restricts a MATCH to listed rows: FTS5's rowid
  lookup would run the whole MATCH once per listed rowid (2,661 admitted rowids on
  SciFact: 610 ms against 3 ms).
* Search by bounds (:class:`_Bounded`) returns the same rows and bm25() values as the
  full query; the clause counts it needs (:class:`ClauseCounts`) are dropped whenever the
  database is not in the state they were taken in.
* A search builds nothing: ``files_fts``, ``chunks_about`` and ``chunks_cjk`` are the
  writer's, kept by triggers; an index without one is asked the plain chunk SQL
  (:func:`any_path_matches`, :func:`any_about_matches`).

How the bounds work: docs/architecture.md, "Lexical search by bounds".
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rifflux.store.connection import transaction
from rifflux.store.knowledge import has_knowledge
from rifflux.store.paths import CHUNK_FILE_INDEX, PATH_TABLE, has_path_table
from rifflux.store.schema import ABOUT_TABLE

FTS_TABLE = "chunks_fts"


@dataclass(frozen=True, slots=True)
class LexicalHit:
    row_id: int
    key: tuple[str, int]
    bm25: float


@dataclass(frozen=True, slots=True)
class Bm25Weights:
    """bm25() column weights (heading_path, content) and the weights of the path and
    about fields' bm25() added to a chunk's (0: that field is not asked)."""

    heading: float
    content: float
    path: float
    about: float


@dataclass(frozen=True, slots=True)
class Scope:
    """Which rows a ranked query may return: ``admitted`` (the sorted chunk rowids as a
    JSON list, :func:`rowids_json`; None: every chunk) and, with ``phrases`` (a MATCH of
    every phrase, asked of ``chunks_fts``), only the rows that hold them (``holding``) or
    only those that do not."""

    admitted: str | None = None
    phrases: str | None = None
    holding: bool = True

    def where(self) -> tuple[str, tuple[object, ...]]:
        """The extra SQL conditions and their values (each binds one parameter)."""
        where = ""
        params: tuple[object, ...] = ()
        if self.admitted is not None:
            where, params = _ADMITTED, (self.admitted,)
        if self.phrases is not None:
            where += _IN_TIER0 if self.holding else _NOT_TIER0
            params = (*params, self.phrases)
        return where, params


def rowids_json(rowids: Sequence[int]) -> str:
    """Rowids as the JSON list ``json_each`` reads (built once per search)."""
    return json.dumps(list(rowids))


def rows_matching(conn: sqlite3.Connection, match: str, rowids: Iterable[int]) -> set[int]:
    """Which of ``rowids`` match ``match`` in ``chunks_fts``."""
    ids = sorted(set(rowids))
    if not ids:
        return set()
    rows = conn.execute(
        "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? "
        "AND +rowid IN (SELECT value FROM json_each(?))",
        (match, rowids_json(ids)),
    )
    return {int(row[0]) for row in rows}


# Extra FTS rows fetched past ``limit`` so ties at the cut can be ordered exactly.
TIE_MARGIN = 16

_TOP_SQL = (
    "WITH top AS (SELECT rowid AS id, bm25({t}, {h}, {c}) AS score FROM {t} "
    "WHERE {t} MATCH ?{where}{cand} ORDER BY score LIMIT ?) "
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
    "WHERE {t} MATCH ?{where}{cand}), "
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
# still without it. Only ``a`` is extra work; the text matches are ranked as without it.
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
    "m AS (SELECT rowid AS id, bm25({t}, {h}, {c}) AS score FROM {t} "
    "WHERE {t} MATCH ?{where}{cand}), "
)
_ABOUT_TOP = (
    "top AS (SELECT id, MIN(score) AS score FROM (SELECT id, score FROM t1 "
    "UNION ALL SELECT id, score FROM a) GROUP BY id ORDER BY score LIMIT ?) "
    "SELECT top.id, f.path, c.chunk_index, top.score FROM top "
    "JOIN chunks c ON c.id = top.id JOIN files f ON f.id = c.file_id "
    "ORDER BY top.score, f.path, c.chunk_index"
)
# The best text matches ``{rows}`` (id, score) with each one's about bonus ``{bonus}`` (id,
# score) added: ``rows.score + coalesce(bonus.score, 0.0)``, the same two-term sum as a
# LEFT JOIN, but as one sort of both lists grouped by id. The LEFT JOIN scanned every about
# match for every text match (SQLite built no index on the materialized CTE): at ~200k
# generated chunks with front matter, 3.5–19 s for queries of common words, against tens
# of milliseconds this way.
_WITH_ABOUT_BONUS = (
    "SELECT id, max(s) + coalesce(max(b), 0.0) AS score FROM ("
    "SELECT id, score AS s, NULL AS b FROM {rows} UNION ALL SELECT id, NULL, score FROM {bonus}"
    ") GROUP BY id HAVING max(s) IS NOT NULL ORDER BY score LIMIT ?"
)
_TOP_ABOUT_SQL = (
    "WITH " + _ABOUT_CTES + "a AS (SELECT id, score FROM a0), "
    "t1 AS (" + _WITH_ABOUT_BONUS.format(rows="m", bonus="a") + "), " + _ABOUT_TOP
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
    "mp AS (SELECT m.id AS id, m.score + coalesce(p.score, 0.0) AS score FROM m "
    "JOIN chunks k INDEXED BY " + CHUNK_FILE_INDEX + " ON k.id = m.id "
    "LEFT JOIN p ON p.file_id = k.file_id), "
    "t1 AS (" + _WITH_ABOUT_BONUS.format(rows="mp", bonus="a0") + "), " + _ABOUT_TOP
)
_ANY_ABOUT_SQL = f"SELECT 1 FROM {ABOUT_TABLE} WHERE {ABOUT_TABLE} MATCH ? LIMIT 1"


def any_about_matches(conn: sqlite3.Connection, match: str) -> bool:
    """Whether the about field applies: the index has the table and some file's about
    text holds a term of the MATCH."""
    return has_knowledge(conn) and conn.execute(_ANY_ABOUT_SQL, (match,)).fetchone() is not None


# Whether some indexed path holds a term of the MATCH: when none does (SciFact's
# ``docs/<id>.md``, most queries anywhere) the search skips the path join.
_ANY_PATH_SQL = f"SELECT 1 FROM {PATH_TABLE} WHERE {PATH_TABLE} MATCH ? LIMIT 1"


def any_path_matches(conn: sqlite3.Connection, match: str) -> bool:
    """Whether the path bonus applies: the index has ``files_fts`` (an index written
    before it existed gives no bonus until a writer opens it) and a path matches."""
    return has_path_table(conn) and conn.execute(_ANY_PATH_SQL, (match,)).fetchone() is not None


# Extra conditions of the ranked FTS query (each binds one parameter). The phrase tiers
# always ask chunks_fts, whichever table ranks (rowids are chunk ids in both). ``+rowid``:
# see the module docstring.
_ADMITTED = " AND +rowid IN (SELECT value FROM json_each(?))"
_IN_TIER0 = " AND +rowid IN (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?)"
_NOT_TIER0 = " AND +rowid NOT IN (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?)"


def top_hits(
    conn: sqlite3.Connection,
    table: str,
    match: str,
    limit: int,
    *,
    weights: Bm25Weights,
    scope: Scope = Scope(),
    skip: Callable[[sqlite3.Connection, Sequence[int]], set[int]] | None = None,
    path: str = "",
    about: bool = False,
    clauses: Sequence[str] = (),
    counts: ClauseCounts | None = None,
) -> list[LexicalHit]:
    """The best ``limit`` rows of one FTS5 table, exactly tie-broken; ``skip`` names rows
    to leave out (they are ranked elsewhere), and the window widens past them; ``scope``
    restricts the rows. With a ``path`` MATCH (given only when ``weights.path`` > 0) the
    weighted bm25() of the file's path is added to each row's; with ``about``
    (``chunks_fts`` only), the weighted bm25() of the about text of a file's first chunk
    is added to that chunk's, which it may match by alone. ``clauses``: the OR-ed
    clauses ``match`` is made of (in its order); given, the rows are first sought among
    those holding the rarer clauses (:class:`_Bounded`), with the same result; empty:
    every match is scored. ``counts``: the clause row counts of ``conn`` (kept across calls;
    none, or inside a caller's transaction: counted for this call alone)."""
    where, params = scope.where()
    columns = {"h": float(weights.heading), "c": float(weights.content)}
    limits = 1  # LIMIT placeholders at the end of the SQL
    with_about = about and table == "chunks_fts"
    if with_about:
        template = _TOP_ABOUT_WITH_PATH_SQL if path else _TOP_ABOUT_SQL
        sql = template.format(
            t=table,
            w=float(weights.path),
            aw=float(weights.about),
            where=where,
            cand="{cand}",
            **columns,
        )
        bound: tuple[object, ...] = (*((path,) if path else ()), match, *params, match, *params)
        limits = 2
    elif path:
        template = _TOP_WITH_PATH_SQL.format(
            t=table, w=float(weights.path), where=where, cand="{cand}", **columns
        )
        sql, bound = template, (path, match, *params)
    else:
        sql = _TOP_SQL.format(t=table, where=where, cand="{cand}", **columns)
        bound = (match, *params)

    def ranked(
        fetch: int, cand: str = "", cand_params: tuple[object, ...] = ()
    ) -> list[LexicalHit]:
        rows = conn.execute(
            sql.format(cand=cand), (*bound, *cand_params, *[fetch] * limits)
        ).fetchall()
        return [LexicalHit(int(r[0]), (str(r[1]), int(r[2])), float(r[3])) for r in rows]

    # The clause counts and the ranked statements read one snapshot: a job committing
    # between them would give counts of another state than the scores (connections
    # run in autocommit, so each statement alone would take its own snapshot). Inside a
    # caller's transaction, which may hold writes it then rolls back (the connection's
    # state would then look unchanged), the counts are this call's alone.
    if conn.in_transaction:
        counts = None
    with transaction(conn, write=False):
        bounded = (
            _Bounded.plan(
                conn,
                table,
                clauses,
                path,
                float(weights.path),
                match,
                with_about,
                covering=_covering(table, clauses, scope),
                counts=counts,
            )
            if len(clauses) > 1
            else None
        )
        fetch = limit + TIE_MARGIN
        while True:
            hits = (bounded.rows(ranked, fetch) if bounded is not None else None) or ranked(fetch)
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


# FTS5's bm25() constant k1 (fts5_aux.c, fts5Bm25Function): each phrase adds
# idf × f·(k1 + 1) / (f + k1·(1 − b + b·D/avgdl)) to a row's score (negated), with f the
# column-weighted count of the phrase in the row, so less than idf × (k1 + 1) whatever f,
# the weights and the row's length; idf = log((N − n + 0.5) / (n + 0.5)), at least 1e-6.
BM25_K1 = 1.2
BM25_MIN_IDF = 1e-6
# Relative slack on a bound, far above the rounding of FTS5's sums.
_BOUND_SLACK = 1e-9
# The bounded search is tried while its candidates (the rows of the essential clauses)
# are at most this share of the table's rows, and only when the clauses' postings add up
# to ``BOUND_MIN_POSTINGS`` or more: below that, scoring every match costs less than the
# counts and the restricted runs (SciFact, 9k chunks, 15-word queries: 7.3 ms full
# against 9.3 ms bounded, CPU time per query).
_BOUND_SHARE = 0.5
BOUND_MIN_POSTINGS = 20_000
# The first restricted run takes the rarest clauses that fill the window, then the next
# ones while their rows add up to at most this share of the query's postings: a wider first
# set vouches more often, so a second run (a second pass over every posting of the MATCH,
# ~0.1–0.2 µs each) is saved at the price of scoring more candidates (~2 µs each). At ~200k
# chunks (benchmarks/lexical_profile.py, 150 queries, CPU p50 common / mid / phrase / rare):
# share 0: 111.8 / 92.2 / 230.8 / 136.2 ms (1.31 / 1.68 / 2.85 / 1.78 ranked runs a query);
# 0.125: 72.8 / 54.9 / 167.0 / 81.7; 0.25: 67.6 / 50.4 / 123.6 / 65.0 (1.16 / 1.20 / 2.37 /
# 1.11 runs); 0.5: 82.3 / 63.2 / 145.9 / 85.1; 1: 99.2 / 93.0 / 170.1 / 123.8 (load 2.5–3.5,
# runs one after another: ±20% between runs of the same code).
FIRST_RUN_SHARE = 0.25


def _covering(table: str, clauses: Sequence[str], scope: Scope) -> frozenset[str]:
    """The clauses one of which every row of ``scope`` holds: the phrase clauses (those
    with a space) when the scope is the chunks holding every phrase (``chunks_fts``)."""
    if table != FTS_TABLE or scope.phrases is None or not scope.holding:
        return frozenset()
    return frozenset(c for c in clauses if " " in c)


def _varint(blob: bytes) -> int:
    """SQLite's variable-length integer at the start of ``blob`` (FTS5 writes its own)."""
    value = 0
    for i, byte in enumerate(blob[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    raise ValueError("truncated varint")


def fts_row_count(conn: sqlite3.Connection, table: str) -> int:
    """The row count FTS5's bm25() uses (xRowCount): the first varint of the table's
    averages record (``{table}_data`` row 1); 0 when there is none."""
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchone()
    return _varint(bytes(row[0])) if row and row[0] else 0


# Clause row counts a reader connection keeps (:class:`ClauseCounts`), least recently
# used dropped first: a few hundred bytes each, so at most a few MB per connection.
CLAUSE_COUNTS_SIZE = 8192


class ClauseCounts:
    """How many rows of an FTS5 table hold each clause, for one connection, kept across
    searches while the database stays in the state they were counted in.

    The state is SQLite's ``PRAGMA data_version`` with the connection's own
    ``total_changes``: inside a read transaction data_version stays put, and it changes
    once another connection has committed, but not for the connection's own commits
    (hence ``total_changes``). Checked on SQLite 3.40.1, WAL: data_version read inside
    ``BEGIN`` is the same before and after another connection commits, and so is what
    the transaction reads (the pragma takes the read snapshot, like a SELECT); after
    ``COMMIT`` it differs; a commit of the connection itself leaves it as it was.
    :meth:`refresh` runs inside each read transaction that uses the counts
    (:meth:`_Bounded.plan`), so every count used was taken in that transaction's
    snapshot; before, a count taken by one call of a search (a phrase query's first
    tier) was used by the next even when a job had committed between them. Process
    memory only: a reader never writes."""

    def __init__(self, size: int = CLAUSE_COUNTS_SIZE) -> None:
        self.size = size
        self._state: tuple[int, int, int] | None = None
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()

    def refresh(self, conn: sqlite3.Connection) -> None:
        """Inside a read transaction on ``conn``: drop every count unless the database is
        in the state they were taken in (on this connection)."""
        version = int(conn.execute("PRAGMA data_version").fetchone()[0])
        state = (id(conn), version, conn.total_changes)
        if state != self._state:
            self._counts.clear()
            self._state = state

    def count(self, conn: sqlite3.Connection, table: str, clause: str) -> int:
        """Rows of ``table`` holding ``clause`` (after :meth:`refresh`, in its transaction)."""
        key = (table, clause)
        hits = self._counts.get(key)
        if hits is not None:
            self._counts.move_to_end(key)
            return hits
        hits = int(
            conn.execute(
                f"SELECT count(*) FROM {table} WHERE {table} MATCH ?", (clause,)
            ).fetchone()[0]
        )
        self._counts[key] = hits
        if len(self._counts) > self.size:
            self._counts.popitem(last=False)
        return hits

    def __len__(self) -> int:
        return len(self._counts)


@dataclass(frozen=True, slots=True)
class _Clause:
    match: str
    hits: int  # rows holding it (FTS5's nHit for its idf)
    upper: float  # more than it adds to any row's score


@dataclass(frozen=True, slots=True)
class _Bounded:
    """MaxScore over FTS5: the rows of an OR of clauses, sought first among those holding
    the rarer ("essential") clauses, exactly as the full query ranks them.

    A row holding none of the essential clauses scores (bm25() is negative, lower is
    better) at least ``floor`` = −Σ upper bound of the other clauses + the best path
    bonus; every about match is a candidate too, so no about bonus enters the floor.
    The candidates are ranked by the very SQL of the full query (the same MATCH, so the
    same idf, average length and float sums) restricted to them, and the result stands
    when ``fetch`` of them score below the floor: no other row can reach the window.
    Otherwise one wider split that must succeed (:meth:`rows`) is run, while the
    candidates stay under ``_BOUND_SHARE`` of the rows; else the full query runs."""

    table: str
    clauses: tuple[_Clause, ...]  # rarest first
    rows_total: int
    path_min: float
    about: str  # the about MATCH whose rows are always candidates ("" for none)
    covering: frozenset[str]  # every row in scope holds one of these clauses

    @classmethod
    def plan(
        cls,
        conn: sqlite3.Connection,
        table: str,
        clauses: Sequence[str],
        path: str,
        path_weight: float,
        match: str,
        about: bool,
        *,
        covering: frozenset[str] = frozenset(),
        counts: ClauseCounts | None = None,
    ) -> _Bounded | None:
        total = fts_row_count(conn, table)
        if total <= 0:
            return None
        counts = ClauseCounts() if counts is None else counts
        counts.refresh(conn)
        counted = []
        for clause in clauses:
            hits = counts.count(conn, table, clause)
            if hits > total:  # not one snapshot (a caller's own); score everything
                return None
            idf = max(math.log((total - hits + 0.5) / (hits + 0.5)), BM25_MIN_IDF)
            counted.append(_Clause(clause, hits, idf * (BM25_K1 + 1.0) * (1 + _BOUND_SLACK)))
        if sum(c.hits for c in counted) < BOUND_MIN_POSTINGS:
            return None
        path_min = 0.0
        if path:
            best = conn.execute(
                f"SELECT bm25({PATH_TABLE}) AS s FROM {PATH_TABLE} WHERE {PATH_TABLE} MATCH ? "
                "ORDER BY s LIMIT 1",
                (path,),
            ).fetchone()
            path_min = path_weight * float(best[0]) if best is not None else 0.0
        return cls(
            table,
            tuple(sorted(counted, key=lambda c: (c.hits, c.match))),
            total,
            path_min,
            match if about else "",
            covering,
        )

    def rows(
        self, ranked: Callable[[int, str, tuple[object, ...]], list[LexicalHit]], fetch: int
    ) -> list[LexicalHit] | None:
        """The best ``fetch`` rows as the full query returns them, or None when the
        bounds cannot vouch for them (run the full query).

        At most two restricted runs: the rarer clauses (:meth:`_first_split`); if the
        bound does not vouch for them, the last row's score ``worst`` tells which split
        will: the best ``fetch`` rows of a wider set of candidates score at most
        ``worst``, so the first split whose floor lies above ``worst`` succeeds."""
        split = self._first_split(fetch)
        if split is None:
            return None
        hits = ranked(fetch, *self._restrict(split))
        if self._vouched(hits, fetch, split):
            return hits
        if len(hits) < fetch:
            return None
        worst = hits[-1].bm25
        wider = next(
            (s for s in range(split + 1, len(self.clauses)) if self._floor(s) > worst), None
        )
        if wider is None or self._candidates(wider) > _BOUND_SHARE * self.rows_total:
            return None
        hits = ranked(fetch, *self._restrict(wider))
        return hits if self._vouched(hits, fetch, wider) else None

    def _candidates(self, split: int) -> int:
        """At most how many rows hold one of the first ``split`` clauses."""
        return sum(c.hits for c in self.clauses[:split])

    def _first_split(self, fetch: int) -> int | None:
        """The clauses of the first run: the rarest that may fill the window (one with
        about matches, which are candidates too), then the next while the candidates stay
        within ``FIRST_RUN_SHARE`` of the query's postings; None when the first that may
        fill it are more than ``_BOUND_SHARE`` of the rows."""
        chosen = None
        budget = FIRST_RUN_SHARE * self._candidates(len(self.clauses))
        for split in range(1, len(self.clauses)):
            candidates = self._candidates(split)
            if candidates > _BOUND_SHARE * self.rows_total:
                break
            if chosen is None:
                if candidates >= fetch or self.about:
                    chosen = split
            elif candidates <= budget:
                chosen = split
            else:
                break
        return chosen

    def _floor(self, split: int) -> float:
        """The least score a row holding none of the first ``split`` clauses (and no
        about match) can have, less a slack."""
        rest = self.clauses[split:]
        floor = -math.fsum(c.upper for c in rest) + self.path_min * (1 + _BOUND_SLACK)
        return floor - _BOUND_SLACK * (1.0 + abs(floor))

    def _vouched(self, hits: list[LexicalHit], fetch: int, split: int) -> bool:
        """Whether no row left out can reach the window: every row in scope was a
        candidate (it holds a covering clause), or the window's last row scores below
        the floor."""
        if self.covering.intersection(c.match for c in self.clauses[:split]):
            return True
        return len(hits) == fetch and hits[-1].bm25 < self._floor(split)

    def _restrict(self, split: int) -> tuple[str, tuple[object, ...]]:
        """The SQL condition (and its values) that keeps the rows holding one of the
        first ``split`` clauses, and every about match: one ``IN`` list of both (two
        ``IN`` tests OR-ed cost a second probe per row of the MATCH: 41.7 against 29.2 ms
        CPU for a 5-word query whose MATCH holds 140k rows)."""
        essential = " OR ".join(c.match for c in self.clauses[:split])
        t = self.table
        held = f"+rowid IN (SELECT rowid FROM {t} WHERE {t} MATCH ?)"
        if not self.about:
            return f" AND {held}", (essential,)
        either = (
            f" AND +rowid IN (SELECT rowid FROM {t} WHERE {t} MATCH ? "
            f"UNION ALL SELECT rowid FROM {ABOUT_TABLE} WHERE {ABOUT_TABLE} MATCH ?)"
        )
        return either, (essential, self.about)
