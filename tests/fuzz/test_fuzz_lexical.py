"""Fuzzing the lexical query parser: any string gives no query or a valid FTS5 query,
and searching it against a real index never raises an SQLite error."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator

import pytest
from fuzz_support import FUZZ
from hypothesis import given
from hypothesis import strategies as st

from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.search.lexical import lexical_search
from rifflux.search.query import MAX_QUERY_TERMS, build_match_query
from rifflux.store.connection import open_index_readonly

# FTS5 query syntax and other characters that have broken query builders before.
SYNTAX = [
    '"',
    "'",
    "*",
    "^",
    ":",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    "-",
    "+",
    ",",
    ".",
    ";",
    "\\",
    "AND",
    "OR",
    "NOT",
    "NEAR",
    "NEAR(",
    "near/3",
    "content:",
    "heading_path:",
    "rowid",
    "_",
    "__",
    "\x00",
    "\t",
    "\n",
    "\u0300",
    "\u200b",
    "ß",
    "İ",
    "ﬁ",
    "Ⅷ",
    "²",
    "٣",
    "中文",
    "😀",
    "e\u0301",
    "\ufeff",
    "\U0001d7d8",
]
QUERY = st.one_of(
    st.text(max_size=200),
    st.lists(st.one_of(st.sampled_from(SYNTAX), st.text(max_size=8)), max_size=30).map(" ".join),
    st.lists(st.sampled_from(SYNTAX), max_size=30).map("".join),
)
PHRASE = re.compile(r'"[^"]+"')


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sqlite3.Connection]:
    root = tmp_path_factory.mktemp("lexfuzz")
    (root / "a.md").write_text("# Near and far\n\nThe NEAR operator, AND or NOT: café ß 中文.\n")
    (root / "b.md").write_text("# Underscores\n\nsnake_case __dunder__ x² Ⅷ e\u0301 😀\n")
    settings = Settings(db_path=root / "index.db", embedding_backend="hash", base_dir=root)
    Indexer(settings).run([root])
    conn = open_index_readonly(settings.db_path)
    yield conn
    conn.close()


@FUZZ
@given(QUERY)
def test_any_text_is_no_query_or_quoted_terms_joined_by_or(text: str) -> None:
    match = build_match_query(text)
    if match is None:
        return
    terms = match.split(" OR ")
    assert 1 <= len(terms) <= MAX_QUERY_TERMS
    assert all(PHRASE.fullmatch(term) for term in terms), match


@FUZZ
@given(QUERY)
def test_any_text_searches_a_real_fts5_index_without_an_sqlite_error(
    index: sqlite3.Connection, text: str
) -> None:
    hits = lexical_search(index, text, 5)
    assert len(hits) <= 5
    assert [h.bm25 for h in hits] == sorted(h.bm25 for h in hits)
