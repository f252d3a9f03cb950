"""The file path as a lexical field: ``files_fts``, one FTS5 row per indexed file.

A file's path names what it is about (``skills/appinsights-instrumentation/references/
ASPNETCORE.md``, ``instructions/exclude-prompt-data.instructions.md``), often in words its
chunks use rarely. The lexical search (rifflux.search.lexical) adds ``PATH_WEIGHT`` × the
path's bm25() to each matching chunk of the file.

Invariants:

* ``files_fts`` (schema.py) is an external-content FTS5 table over ``files(path)`` with
  the tokenizer of ``chunks_fts``; its rowid is ``files.id``. The schema's triggers on
  ``files`` keep it in step with every insert, delete and change of path, in the
  writer's own transaction, so a reader's snapshot always sees the paths of its files and
  never builds anything: the writer pays one FTS row per file written, a
  search only reads.
* ``chunks_file_of`` (schema.py), a covering index on ``chunks(id, file_id)``, is how the
  search finds a matching chunk's file without reading the chunk's wide row.
* An index created before the table existed gets it, filled from ``files``, the next time
  a writer opens it (:func:`backfill`, through connection.py's ``ADDED_TABLES``); a reader
  of such an index searches without the path bonus (:func:`has_path_table`).
"""

from __future__ import annotations

import sqlite3

from rifflux.store.schema import has_schema_object

PATH_TABLE = "files_fts"
CHUNK_FILE_INDEX = "chunks_file_of"


def has_path_table(conn: sqlite3.Connection) -> bool:
    """Whether the index has ``files_fts`` and ``chunks_file_of`` (created together;
    ``sqlite_master`` probes, microseconds)."""
    return has_schema_object(conn, "table", PATH_TABLE) and has_schema_object(
        conn, "index", CHUNK_FILE_INDEX
    )


def backfill(conn: sqlite3.Connection) -> int:
    """Fill a just-created ``files_fts`` from ``files`` (FTS5's ``rebuild`` of an
    external-content table). The caller holds a write transaction; the rows indexed."""
    conn.execute(f"INSERT INTO {PATH_TABLE}({PATH_TABLE}) VALUES ('rebuild')")
    return int(conn.execute("SELECT COUNT(*) FROM files").fetchone()[0])
