"""The about bonus (front matter's about text, ``chunks_about``) is added to the text matches
by one grouped sort, not a LEFT JOIN that scans every about match for each text match:
the ranking is exactly each text match's bm25() plus its about bonus, and the plan has
no nested scan (issue 22: 3.5–19 s per query at ~200k generated chunks before)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rifflux_testing import make_settings

from rifflux.index.indexer import Indexer
from rifflux.search.lexical import DEFAULT_OPTIONS, lexical_search
from rifflux.search.query import build_match_query
from rifflux.store import fts
from rifflux.store.connection import open_index

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "knowledge"
QUERIES = (
    "permission denied error",
    "redis session storage",
    "database connection problems",
    "error handling http api",
    "kubernetes runbook",
)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("about")
    settings = make_settings(tmp)
    Indexer(settings).run([CORPUS])
    return Path(settings.db_path)


def reference(conn, match: str, limit: int) -> list[tuple[int, float]]:
    """Every text match's bm25() + its about bonus (+ its path bonus), computed in Python
    from the three tables' own bm25() values, in the order the SQL adds them."""
    w = DEFAULT_OPTIONS.weights
    text = dict(
        conn.execute(
            f"SELECT rowid, bm25(chunks_fts, {w.heading}, {w.content}) FROM chunks_fts "
            "WHERE chunks_fts MATCH ?",
            (match,),
        ).fetchall()
    )
    about = dict(
        conn.execute(
            f"SELECT rowid, {w.about} * bm25(chunks_about) FROM chunks_about "
            "WHERE chunks_about MATCH ?",
            (match,),
        ).fetchall()
    )
    path = dict(
        conn.execute(
            "SELECT rowid, bm25(files_fts) FROM files_fts WHERE files_fts MATCH ?", (match,)
        ).fetchall()
    )
    file_of = dict(conn.execute("SELECT id, file_id FROM chunks").fetchall())
    scores: dict[int, float] = {}
    for row, score in text.items():
        with_path = score + w.path * path.get(file_of[row], 0.0)
        scores[row] = with_path + about.get(row, 0.0)
    for row, bonus in about.items():  # a first chunk may match by its about text alone
        if row not in text:
            alone = bonus + w.path * path.get(file_of[row], 0.0)
            scores[row] = min(scores.get(row, alone), alone)
    return sorted(scores.items(), key=lambda kv: kv[1])[:limit]


@pytest.mark.parametrize("query", QUERIES)
def test_the_about_bonus_ranks_exactly_the_sum_of_bm25_values(db: Path, query: str) -> None:
    conn = open_index(db)
    try:
        match = build_match_query(query)
        assert match is not None and fts.any_about_matches(conn, match)
        hits = lexical_search(conn, query, 10)
        expected = reference(conn, match, 10)
    finally:
        conn.close()
    assert [h.bm25 for h in hits] == [score for _, score in expected]
    assert {h.row_id for h in hits} == {row for row, _ in expected}  # ties: order by path


@pytest.mark.parametrize("template", ["_TOP_ABOUT_SQL", "_TOP_ABOUT_WITH_PATH_SQL"])
def test_no_plan_scans_the_about_matches_once_per_text_match(db: Path, template: str) -> None:
    sql = getattr(fts, template).format(
        t=fts.FTS_TABLE, w=0.25, aw=0.5, where="", cand="", h=3.0, c=1.0
    )
    params = ("x",) * sql.count("?")
    conn = open_index(db)
    try:
        plan = [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
    finally:
        conn.close()
    assert not [step for step in plan if step.startswith("SCAN a") and "LEFT-JOIN" in step]
