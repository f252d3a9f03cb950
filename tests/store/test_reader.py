"""The one chunked ``IN (...)`` helper stays under SQLite's bound-variable limit."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from rifflux.store.connection import connect, transaction
from rifflux.store.reader import select_in

SQL = "SELECT x FROM t WHERE tag = ? AND x IN ({marks})"


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    db = connect(tmp_path / "t.db")
    db.execute("CREATE TABLE t(x INTEGER PRIMARY KEY, tag TEXT)")
    with transaction(db):
        db.executemany("INSERT INTO t VALUES (?, 'a')", [(i,) for i in range(40_000)])
    yield db
    db.close()


def test_one_statement_over_the_limit_is_refused_by_sqlite(conn) -> None:
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    marks = ",".join("?" * limit)
    with pytest.raises(sqlite3.OperationalError, match="too many SQL variables"):
        conn.execute(SQL.format(marks=marks), ("a", *range(limit))).fetchall()


def test_values_at_the_limit_with_a_leading_parameter_all_match(conn) -> None:
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    values = list(range(limit + 1))
    # Asking for chunks as large as the limit: the leading "?" must still fit.
    found = [row[0] for row in select_in(conn, SQL, values, params=("a",), chunk=limit)]
    assert sorted(found) == [v for v in values if v < 40_000]


def test_a_lowered_limit_is_respected_and_every_value_found_once(conn) -> None:
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 10)
    values = list(range(0, 200, 7))
    found = [row[0] for row in select_in(conn, SQL, values, params=("a",))]
    assert found == values
    assert list(select_in(conn, SQL, [], params=("a",))) == []
    assert list(select_in(conn, SQL, values, params=("b",))) == []
