"""Lexical search by bounds (issue 22): seeking the best rows among those holding a query's
rarer terms first returns exactly what scoring every match returns, rows and bm25() values,
for every query shape (terms common and rare, phrases, CJK, filters, the path and about
bonuses, any limit), and the bounds do vouch for a good share of the queries."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from rifflux_testing import make_settings

from rifflux.index.indexer import Indexer
from rifflux.search.lexical import DEFAULT_OPTIONS, LexicalOptions, lexical_search
from rifflux.store import fts
from rifflux.store.connection import open_index

COMMON = ["alpha", "beta", "gamma", "delta"]  # in most chunks
MID = [f"mid{i}" for i in range(12)]  # in about one chunk in ten
RARE = [f"rare{i}" for i in range(60)]  # in a few chunks
CJK = ["数据库索引", "검색을 위한", "東京都の天気", "索引"]
REFERENCE = LexicalOptions(bounded=False)


def _words(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.55:
            out.append(rng.choice(COMMON))
        elif roll < 0.85:
            out.append(rng.choice(MID))
        else:
            out.append(rng.choice(RARE))
    return out


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~300 one-section files: common, mid and rare words, topic words in the paths, front
    matter descriptions (the about field) on a third, CJK text on a tenth."""
    rng = random.Random(22)
    tmp = tmp_path_factory.mktemp("bounds")
    corpus = tmp / "corpus"
    for i in range(300):
        folder = corpus / rng.choice([*MID[:4], "misc", "notes"])
        folder.mkdir(parents=True, exist_ok=True)
        lines = []
        if rng.random() < 0.33:
            lines += ["---", f"description: {' '.join(_words(rng, 5))}", "---", ""]
        lines.append(f"# {' '.join(_words(rng, 3))}")
        lines.append("")
        body = _words(rng, rng.randint(20, 90))
        if rng.random() < 0.1:
            body.insert(rng.randrange(len(body)), rng.choice(CJK))
        lines.append(" ".join(body))
        (folder / f"{rng.choice(COMMON)}-{i}.md").write_text("\n".join(lines) + "\n")
    settings = make_settings(tmp)
    Indexer(settings).run([corpus])
    return Path(settings.db_path)


def _queries(count: int) -> list[tuple[str, int, float]]:
    """(query, limit, share of chunks admitted by a filter; 1: no filter)."""
    rng = random.Random(7)
    queries = []
    for _ in range(count):
        words = _words(rng, rng.randint(1, 6))
        roll = rng.random()
        if roll < 0.2 and len(words) >= 2:
            cut = rng.randint(2, len(words))
            text = f'"{" ".join(words[:cut])}" {" ".join(words[cut:])}'
        elif roll < 0.3:
            text = f"{' '.join(words)} {rng.choice(CJK)}"
        elif roll < 0.35:
            text = f"{' '.join(words)} {rng.choice(RARE)}* OR NEAR(x)"
        else:
            text = " ".join(words)
        limit = rng.choice([1, 3, 10, 25, 60, 200])
        share = rng.choice([1.0, 1.0, 1.0, 0.5, 0.1])
        queries.append((text, limit, share))
    return queries


def test_bounded_search_returns_exactly_the_full_scoring(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vouched = []
    original = fts._Bounded.rows

    def counted(self: fts._Bounded, ranked, fetch: int):  # type: ignore[no-untyped-def]
        rows = original(self, ranked, fetch)
        vouched.append(rows is not None)
        return rows

    monkeypatch.setattr(fts._Bounded, "rows", counted)
    monkeypatch.setattr(fts, "BOUND_MIN_POSTINGS", 0)  # bounds even on a small index
    conn = open_index(db)
    try:
        ids = np.array([r[0] for r in conn.execute("SELECT id FROM chunks ORDER BY id")])
        rng = np.random.default_rng(3)
        for text, limit, share in _queries(120):
            admitted = None if share >= 1 else np.sort(rng.choice(ids, int(share * len(ids))))
            got = lexical_search(conn, text, limit, DEFAULT_OPTIONS, admitted)
            expected = lexical_search(conn, text, limit, REFERENCE, admitted)
            assert got == expected, (text, limit, share)
    finally:
        conn.close()
    # The bounds decided a good share of the windows, and fell back on others.
    assert sum(vouched) >= 20, (sum(vouched), len(vouched))
    assert not all(vouched)


def test_the_bound_is_the_formula_of_fts5(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No row's bm25() for one clause is below −idf × (k1 + 1), the clause's bound, with
    FTS5's own row count as N."""
    monkeypatch.setattr(fts, "BOUND_MIN_POSTINGS", 0)
    conn = open_index(db)
    try:
        total = fts.fts_row_count(conn, "chunks_fts")
        assert total == conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        for term in [*COMMON, *MID[:3], *RARE[:3]]:
            clause = f'"{term}"'
            plan = fts._Bounded.plan(conn, "chunks_fts", [clause, clause], "", 0.0, term, False)
            assert plan is not None
            first = plan.clauses[0]
            w = DEFAULT_OPTIONS.weights
            best = conn.execute(
                f"SELECT bm25(chunks_fts, {w.heading}, {w.content}) AS s FROM chunks_fts "
                "WHERE chunks_fts MATCH ? ORDER BY s LIMIT 1",
                (f'"{term}"',),
            ).fetchone()[0]
            assert -first.upper < best
    finally:
        conn.close()


def test_counts_of_another_state_than_the_row_count_fall_back_to_full_scoring(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clause count taken before a job deleted rows can exceed FTS5's row count read
    after it (a search during a job raised "math domain error"): no bound then."""
    monkeypatch.setattr(fts, "BOUND_MIN_POSTINGS", 0)
    conn = open_index(db)
    try:
        total = fts.fts_row_count(conn, "chunks_fts")
        clause = f'"{COMMON[0]}"'
        stale = fts.ClauseCounts()
        stale.refresh(conn)
        stale._counts["chunks_fts", clause] = total + 5
        plan = fts._Bounded.plan(
            conn, "chunks_fts", [clause, clause], "", 0.0, COMMON[0], False, counts=stale
        )
        assert plan is None
    finally:
        conn.close()
