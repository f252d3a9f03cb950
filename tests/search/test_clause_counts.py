"""Clause row counts kept across searches (issue 22, rifflux.store.fts's ClauseCounts): a
count is only used in the database state it was taken in. Another connection's commit
between two searches, or between the two tiers of one phrase search, drops the counts,
and the bounded search still returns exactly what scoring every match returns."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from rifflux_testing import make_settings

from rifflux.index.indexer import Indexer
from rifflux.search import lexical
from rifflux.search.lexical import DEFAULT_OPTIONS, LexicalOptions, lexical_search
from rifflux.store import fts
from rifflux.store.connection import open_index, open_index_readonly

REFERENCE = LexicalOptions(bounded=False)
# "alpha" is in half the chunks, then (after ``_drop_most_alpha``) in 5 of 155: from
# a term whose idf FTS5 clamps to 1e-6 to the rarest term of the query.
PHRASE_QUERY = '"qa qb" alpha'
TERMS_QUERY = "qa qb alpha"
KEPT_ALPHA = {f"doc-{i}.md" for i in range(145, 150)}  # the chunks still holding alpha


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """300 one-chunk files: alpha in 150, qa in 23, qb in 23 (3 of them hold "qa qb")."""
    monkeypatch.setattr(fts, "BOUND_MIN_POSTINGS", 0)  # bounds even on a small index
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(300):
        words = [f"filler{(i * 7 + k) % 11}" for k in range(8 + i % 5)]
        if i < 150:
            words.insert(i % 4, "alpha")
        elif i < 170:
            words.insert(2, "qa")
        elif i < 190:
            words.insert(3, "qb")
        elif i < 193:
            words[1:1] = ["qa", "qb"]
        name = f"alpha-{i}.md" if i < 145 else f"doc-{i}.md"
        (corpus / name).write_text(f"# note {i}\n\n{' '.join(words)}\n")
    settings = make_settings(tmp_path)
    Indexer(settings).run([corpus])
    return Path(settings.db_path)


def _drop_most_alpha(db: Path, writer: sqlite3.Connection | None = None) -> None:
    """Another connection (a job), or ``writer``, deletes 145 of the 150 chunks holding
    alpha."""
    conn = open_index(db) if writer is None else writer
    try:
        with conn:
            conn.execute("DELETE FROM files WHERE path LIKE '%alpha-%'")
    finally:
        if writer is None:
            conn.close()


def test_a_commit_between_the_tiers_of_a_search_drops_the_counts(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The phrase tier counts every clause; a job deletes most alpha chunks before the
    second tier ranks: its bounds must come from the counts of its own snapshot, so the
    second tier ranks as scoring every match in that state does."""
    tiers: list[list[fts.LexicalHit]] = []
    original = lexical.top_hits

    def then_commit(*args: Any, **kwargs: Any) -> list[fts.LexicalHit]:
        tiers.append(original(*args, **kwargs))
        if len(tiers) == 1:
            _drop_most_alpha(db)
        return tiers[-1]

    monkeypatch.setattr(lexical, "top_hits", then_commit)
    conn = open_index_readonly(db)
    try:
        lexical_search(conn, PHRASE_QUERY, 5, DEFAULT_OPTIONS)
        monkeypatch.setattr(lexical, "top_hits", original)
        expected = lexical_search(conn, PHRASE_QUERY, 5, REFERENCE)
    finally:
        conn.close()
    first, second = tiers
    assert [h.row_id for h in first] == [h.row_id for h in expected[: len(first)]]
    assert KEPT_ALPHA & {Path(h.key[0]).name for h in expected}  # alpha's count matters
    assert second == expected[len(first) :]


@pytest.mark.parametrize("own", [False, True], ids=["another connection", "its own"])
def test_counts_kept_across_searches_are_dropped_when_a_connection_commits(
    db: Path, own: bool
) -> None:
    """Another connection's commit changes ``PRAGMA data_version``; the connection's own
    commit does not, but changes its ``total_changes``."""
    conn = open_index(db) if own else open_index_readonly(db)
    counts = fts.ClauseCounts()
    try:
        first = lexical_search(conn, TERMS_QUERY, 3, DEFAULT_OPTIONS, counts=counts)
        assert first == lexical_search(conn, TERMS_QUERY, 3, REFERENCE)
        assert len(counts) == 3  # qa, qb, alpha
        _drop_most_alpha(db, conn if own else None)
        got = lexical_search(conn, TERMS_QUERY, 3, DEFAULT_OPTIONS, counts=counts)
        expected = lexical_search(conn, TERMS_QUERY, 3, REFERENCE)
    finally:
        conn.close()
    assert KEPT_ALPHA & {Path(h.key[0]).name for h in expected}
    assert got == expected


def test_an_unchanged_index_is_not_counted_again(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Repeated terms cost no count statement while no one commits; the least recently
    used count goes first when the cache is full."""
    conn = open_index_readonly(db)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    counts = fts.ClauseCounts(size=4)
    try:
        lexical_search(conn, TERMS_QUERY, 3, DEFAULT_OPTIONS, counts=counts)
        counted = [s for s in statements if s.startswith("SELECT count(*)")]
        assert len(counted) == 3
        statements.clear()
        lexical_search(conn, "alpha qb qa", 3, DEFAULT_OPTIONS, counts=counts)
        assert not [s for s in statements if s.startswith("SELECT count(*)")]
        lexical_search(conn, "filler1 filler2", 3, DEFAULT_OPTIONS, counts=counts)
        assert len(counts) == 4
        statements.clear()
        lexical_search(conn, "qa alpha", 3, DEFAULT_OPTIONS, counts=counts)  # alpha went
        assert sum(s.startswith("SELECT count(*)") for s in statements) == 1
    finally:
        conn.close()


def test_counts_taken_inside_a_rolled_back_write_are_not_kept(db: Path) -> None:
    """A connection searches inside its own write transaction (alpha added to every
    chunk), then rolls it back: its data_version and total_changes stay as after the
    writes, the rows are as before them (alpha in 5 chunks)."""
    _drop_most_alpha(db)
    conn = open_index(db)
    counts = fts.ClauseCounts()
    try:
        conn.execute("BEGIN")
        conn.execute("UPDATE chunks SET content = content || ' alpha'")
        lexical_search(conn, TERMS_QUERY, 3, DEFAULT_OPTIONS, counts=counts)
        conn.execute("ROLLBACK")
        got = lexical_search(conn, TERMS_QUERY, 3, DEFAULT_OPTIONS, counts=counts)
        expected = lexical_search(conn, TERMS_QUERY, 3, REFERENCE)
    finally:
        conn.close()
    assert KEPT_ALPHA & {Path(h.key[0]).name for h in expected}
    assert got == expected
