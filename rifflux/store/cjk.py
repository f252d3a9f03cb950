"""Chinese, Japanese and Korean text in the lexical index: a bigram side table.

FTS5's ``unicode61`` tokenizer splits on spaces and punctuation only, so a run of Han,
kana or Hangul characters is one token: ``数据库索引`` is found by ``数据库索引`` and never
by ``数据库``, and a Korean word with a particle attached (``검색을``) never by ``검색``.

Invariants:

* ``chunks_cjk`` (schema.py) is a second FTS5 table of the same family, tokenizer and
  columns as ``chunks_fts``, with one row per chunk that contains CJK text (its rowid is
  the chunk's id). Its text is the chunk's text with every CJK run replaced by the run's
  overlapping character bigrams (``数据库`` → ``数据 据库``; a single character stays
  itself); Latin words are kept, so a mixed query ranks by both.
* A chunk with no CJK character has no row there: without CJK text the table is empty
  and the index costs nothing more.
* Rows are written by :class:`~rifflux.store.writer.IndexWriter` with the chunk, in the
  same transaction; the schema's triggers delete them with the chunk (and with a cascade
  from ``files``), and drop them when a chunk's text is updated in place.
* A CJK query ranks the chunks with a row here in this table and every other chunk in
  ``chunks_fts`` (rifflux.search.lexical): :func:`rows_with_cjk` tells them apart.
* The tokenizer (CJK runs, their bigrams) is :mod:`rifflux.bigrams`, in the base layer:
  this module writes and reads the side table, the query parser (rifflux.search.query)
  splits queries with the same functions.
* An index created before the table existed gets it, filled from its chunks, the next
  time a writer opens it (:func:`backfill`); a reader of such an index searches CJK
  queries in ``chunks_fts`` only (``has_cjk_table``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from rifflux.bigrams import bigram_text, has_cjk
from rifflux.store.schema import has_schema_object

CJK_TABLE = "chunks_cjk"


def insert_sql() -> str:
    return f"INSERT INTO {CJK_TABLE}(rowid, heading_path, content) VALUES (?, ?, ?)"


def chunk_has_cjk(heading_path: str, content: str) -> bool:
    return has_cjk(content) or has_cjk(heading_path)


def side_row(row_id: int, heading_path: str, content: str) -> tuple[int, str, str] | None:
    """The ``chunks_cjk`` row of a chunk, or ``None`` when it has no CJK text."""
    if not chunk_has_cjk(heading_path, content):
        return None
    return row_id, bigram_text(heading_path), bigram_text(content)


def has_cjk_table(conn: sqlite3.Connection) -> bool:
    return has_schema_object(conn, "table", CJK_TABLE)


# Rowids per ``IN (...)``: below any SQLite build's variable limit.
IN_CHUNK = 500


def rows_with_cjk(conn: sqlite3.Connection, rowids: Sequence[int]) -> set[int]:
    """Those of the chunk ``rowids`` that have a ``chunks_cjk`` row."""
    found: set[int] = set()
    for start in range(0, len(rowids), IN_CHUNK):
        part = list(rowids[start : start + IN_CHUNK])
        marks = ",".join("?" * len(part))
        rows = conn.execute(f"SELECT rowid FROM {CJK_TABLE} WHERE rowid IN ({marks})", part)
        found.update(int(row[0]) for row in rows)
    return found


def write_side_rows(conn: sqlite3.Connection, file_ids: Sequence[int] | None = None) -> int:
    """Write the side rows of the stored chunks with CJK text: those of the files
    ``file_ids`` (whose chunks were just written, so have none yet), or every chunk's. The
    caller holds a write transaction; the number of rows written. They go in by ascending
    rowid, so FTS5 keeps a batch's rows in one segment (rifflux.store.writer)."""
    sql = "SELECT id, heading_path, content FROM chunks"
    params: tuple[str, ...] = ()
    if file_ids is not None:
        sql += " WHERE file_id IN (SELECT value FROM json_each(?)) ORDER BY id"
        params = (json.dumps(list(file_ids)),)
    rows = []
    for row_id, heading_path, content in conn.execute(sql, params):
        side = side_row(int(row_id), str(heading_path), str(content))
        if side is not None:
            rows.append(side)
    conn.executemany(insert_sql(), rows)
    return len(rows)


def backfill(conn: sqlite3.Connection) -> int:
    """Write the side rows of every stored chunk with CJK text, into an index whose
    ``chunks_cjk`` was just created (so is empty)."""
    return write_side_rows(conn)
