"""Knowledge rows: each file's front matter fields and kind, its tags and its error pairs.

Tables (created by ``schema.py``, added to older indexes through ``ADDED_TABLES``):

* ``file_knowledge``: one row per file written since the table exists (``file_id`` =
  ``files.id``): the rules' ``version``, ``kind`` (decision, error, note), ``title``,
  ``about`` (front matter title, name, description and summary),
  ``doc_type`` (front matter ``type``), ``status``, ``date``, ``decision_type``, the
  ``decision`` text of a decision record, and ``extra``, the other front matter keys as
  JSON. Index ``file_knowledge_kind`` on (kind, status).
* ``chunks_about``: the ``about`` text as an FTS5 row of the file's first chunk (rowid =
  ``chunks.id``), a lexical field where the front matter block used to be
  (rifflux.search.lexical); deleted with the chunk by a trigger.
* ``file_tags``: (tag, file_id), tags normalised (lower case); ``file_tags_file`` indexes
  it by file for the cascade.
* ``error_pairs``: one row per error section: heading_path, signature, solution, and the
  chunk indexes ``first_chunk``..``last_chunk`` it spans; ``error_pairs_file`` indexes it
  by (file_id, first_chunk).

Invariants:

* The writer replaces a file's three kinds of rows in the transaction that replaces its
  chunks (:func:`write_files`), so they always describe the chunks stored; deleting a file
  deletes them (``ON DELETE CASCADE``).
* A chunk's kind is derived, never stored: ``decision`` when its file's row says so, else
  ``error`` when its index lies in one of its file's error pairs, else ``note``. A file
  without a row (an index written before these tables, not yet re-chunked) is a note with
  no tags and no status; :func:`stale_file_ids` lists such files (and files built by an
  older rule version) so the next job re-chunks them.
* A reader of an index without the tables (:func:`has_knowledge`) sees every chunk as a
  note and no file with a tag or status.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from rifflux.store import grep_text
from rifflux.store.grep_text import has_grep
from rifflux.store.reader import paths_under
from rifflux.store.rows import KINDS, FileKnowledge
from rifflux.store.schema import GREP_TABLE, KNOWLEDGE_TABLE, has_schema_object


def has_knowledge(conn: sqlite3.Connection) -> bool:
    """Whether the index has the knowledge tables (created together)."""
    return has_schema_object(conn, "table", KNOWLEDGE_TABLE)


def write_files(conn: sqlite3.Connection, files: Sequence[tuple[int, FileKnowledge]]) -> None:
    """Replace the knowledge rows of a batch's files, ``(file id, knowledge)`` pairs (call
    inside the transaction writing their chunks, after them: an about row belongs to its
    file's first chunk; the old one went with the old chunk, by the trigger).

    A few statements for the whole batch, the about rows last and by ascending rowid:
    FTS5 writes its pending postings as a new segment at every statement that opens a
    savepoint and whenever a rowid is not above the last one (rifflux.store.writer), so
    one statement per file would leave a ``chunks_about`` segment per file."""
    if not files:
        return
    file_ids = json.dumps([file_id for file_id, _knowledge in files])
    conn.execute(
        "DELETE FROM file_tags WHERE file_id IN (SELECT value FROM json_each(?))", (file_ids,)
    )
    conn.execute(
        "DELETE FROM error_pairs WHERE file_id IN (SELECT value FROM json_each(?))", (file_ids,)
    )
    conn.executemany(
        "INSERT OR REPLACE INTO file_knowledge(file_id, version, kind, title, about, doc_type, "
        "status, date, decision_type, decision, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                file_id,
                k.version,
                k.kind,
                k.title,
                k.about,
                k.doc_type,
                k.status,
                k.date,
                k.decision_type,
                k.decision,
                k.extra,
            )
            for file_id, k in files
        ],
    )
    conn.executemany(
        "INSERT OR IGNORE INTO file_tags(tag, file_id) VALUES (?, ?)",
        [(tag, file_id) for file_id, k in files for tag in k.tags],
    )
    conn.executemany(
        "INSERT INTO error_pairs(file_id, heading_path, signature, solution, first_chunk, "
        "last_chunk) VALUES (?, ?, ?, ?, ?, ?)",
        [
            (file_id, e.heading_path, e.signature, e.solution, e.first_chunk, e.last_chunk)
            for file_id, k in files
            for e in k.errors
        ],
    )
    about = {file_id: k.about for file_id, k in files if k.about}
    if about:
        first_chunks = conn.execute(
            "SELECT id, file_id FROM chunks WHERE chunk_index = 0 "
            "AND file_id IN (SELECT value FROM json_each(?)) ORDER BY id",
            (json.dumps(list(about)),),
        ).fetchall()
        conn.executemany(
            "INSERT INTO chunks_about(rowid, about) VALUES (?, ?)",
            [(row_id, about[file_id]) for row_id, file_id in first_chunks],
        )


# Stored files per read of :func:`file_states`.
FILE_STATES_PAGE = 2_000


def _file_states_select(conn: sqlite3.Connection, version: int) -> tuple[str, tuple[int, ...]]:
    """The SELECT of :func:`file_states` rows, with its leading parameters."""
    if has_knowledge(conn):
        # A file without its grep text row is stale too (rifflux.store.grep_text).
        text_stale, text_join = (
            (" OR t.sha256 IS NOT f.sha256", f"LEFT JOIN {GREP_TABLE} t ON t.file_id = f.id ")
            if has_grep(conn)
            else ("", "")
        )
        sql = (
            "SELECT f.path, f.mtime_ns, f.size_bytes, f.sha256, "
            f"(k.version IS NOT ?{text_stale}) FROM files f "
            "LEFT JOIN file_knowledge k ON k.file_id = f.id " + text_join
        )
        return sql, (version,)
    return "SELECT path, mtime_ns, size_bytes, sha256, 1 FROM files f ", ()


def file_states(
    conn: sqlite3.Connection, version: int, *, page: int = FILE_STATES_PAGE
) -> Iterator[tuple[str, int, int, str, bool]]:
    """(path, mtime_ns, size_bytes, sha256, stale) of every stored file, sorted by path,
    lazily: ``stale`` when its knowledge row is missing or was built by another rule
    version, or its grep text row is missing or outdated (:func:`stale_paths`).

    Read a page of ``page`` rows at a time, each page its own short read from the
    ``files(path)`` index after the last path of the previous one: a plan merges this
    with its sorted scan, and holds neither every row nor a read transaction open while
    it reads the changed files (0.3 s at 100k files, as one ``fetchall``).
    """
    sql, head = _file_states_select(conn, version)
    cursor = conn.cursor()
    cursor.row_factory = None
    after: str | None = None
    while True:
        where, params = ("", ()) if after is None else ("WHERE f.path > ? ", (after,))
        rows = cursor.execute(
            sql + where + "ORDER BY f.path LIMIT ?", (*head, *params, page)
        ).fetchall()
        for path, mtime_ns, size_bytes, sha256, stale in rows:
            yield path, mtime_ns, size_bytes, sha256, bool(stale)
        if len(rows) < page:
            return
        after = rows[-1][0]


def file_states_at(
    conn: sqlite3.Connection, version: int, prefixes: Iterable[str]
) -> list[tuple[str, int, int, str, bool]]:
    """:func:`file_states` of the stored files at or under ``prefixes`` (stored paths;
    a scoped plan's), sorted by path: one indexed range read per prefix."""
    sql, head = _file_states_select(conn, version)
    where = "WHERE f.path = ? OR (f.path > ? AND f.path < ?)"
    found: dict[str, tuple[str, int, int, str, bool]] = {}
    for prefix in prefixes:
        rows = conn.execute(sql + where, (*head, prefix.rstrip("/"), *paths_under(prefix)))
        for path, mtime_ns, size_bytes, sha256, stale in rows:
            found[path] = (path, mtime_ns, size_bytes, sha256, bool(stale))
    return [found[path] for path in sorted(found)]


def stale_paths(conn: sqlite3.Connection, version: int) -> set[str]:
    """Stored files whose knowledge row is missing or was built by another rule version,
    or whose grep text row is missing or outdated (rifflux.store.grep_text): the next job
    re-chunks them even when unchanged (one read of the tables)."""
    if not has_knowledge(conn):
        return {str(row[0]) for row in conn.execute("SELECT path FROM files")}
    rows = conn.execute(
        "SELECT f.path FROM files f LEFT JOIN file_knowledge k ON k.file_id = f.id "
        "WHERE k.version IS NOT ? ",
        (version,),
    )
    return {str(row[0]) for row in rows} | grep_text.stale_paths(conn)


# The chunks of decision files, and the chunks inside an error pair of other files: the
# two small kinds, read by joins from their own tables (a note is every other chunk).
_DECISION_CHUNKS = (
    "SELECT c.id FROM file_knowledge k JOIN chunks c ON c.file_id = k.file_id "
    "WHERE k.kind = 'decision'"
)
# CROSS JOIN keeps SQLite's planner from scanning every chunk: the few pairs come first,
# each seeks its chunk range in the (file_id, chunk_index) index.
_ERROR_CHUNKS = (
    "SELECT DISTINCT c.id FROM error_pairs p CROSS JOIN chunks c ON c.file_id = p.file_id "
    "AND c.chunk_index BETWEEN p.first_chunk AND p.last_chunk "
    "WHERE p.file_id NOT IN (SELECT file_id FROM file_knowledge WHERE kind = 'decision')"
)
_KIND_CHUNKS = {"decision": _DECISION_CHUNKS, "error": _ERROR_CHUNKS}


def _rowids(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> np.ndarray:
    rows = conn.execute(sql, params).fetchall()
    return np.unique(np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows)))


def chunk_rowids(
    conn: sqlite3.Connection,
    *,
    kinds: Sequence[str] | None = None,
    tags: Sequence[str] | None = None,
    status: str | None = None,
    decision_type: str | None = None,
) -> np.ndarray | None:
    """Sorted rowids of the chunks admitted by every given condition: a kind among
    ``kinds``, a file with every tag of ``tags``, with ``status``, with ``decision_type``
    (values already normalised: lower case); None when the conditions admit every chunk.

    Decision and error chunks are read by joins from their small tables and notes are
    every other chunk (set difference), so ``kinds=note`` on 15k chunks costs one read of
    the rowids rather than a correlated subquery per chunk.
    """
    wanted = set(kinds) if kinds is not None else set(KINDS)
    if not has_knowledge(conn):
        if tags or status or decision_type or "note" not in wanted:
            return np.zeros(0, dtype=np.int64)
        return None
    found: np.ndarray | None = None
    if wanted != set(KINDS):
        if "note" in wanted:
            left_out = [_rowids(conn, _KIND_CHUNKS[k]) for k in _KIND_CHUNKS if k not in wanted]
            excluded = np.concatenate(left_out)
            if excluded.shape[0]:
                every = _rowids(conn, "SELECT id FROM chunks")
                found = np.setdiff1d(every, excluded, assume_unique=True)
        else:
            found = np.unique(np.concatenate([_rowids(conn, _KIND_CHUNKS[k]) for k in wanted]))
    file_sets: list[tuple[str, list[Any]]] = []
    if tags:
        marks = ",".join("?" * len(tags))
        file_sets.append(
            (
                f"SELECT file_id FROM file_tags WHERE tag IN ({marks}) "
                "GROUP BY file_id HAVING COUNT(*) = ?",
                [*tags, len(tags)],
            )
        )
    for column, value in (("status", status), ("decision_type", decision_type)):
        if value is not None:
            file_sets.append((f"SELECT file_id FROM file_knowledge WHERE {column} = ?", [value]))
    for files_sql, params in file_sets:
        admitted = _rowids(
            conn, f"SELECT c.id FROM chunks c WHERE c.file_id IN ({files_sql})", params
        )
        found = admitted if found is None else np.intersect1d(found, admitted, assume_unique=True)
    return found


def decisions_of_files(conn: sqlite3.Connection, paths: Iterable[str]) -> dict[str, sqlite3.Row]:
    """``{path: (path, title, status, date, decision_type, decision)}`` of those decision
    files."""
    found: dict[str, sqlite3.Row] = {}
    for path in paths:
        row = conn.execute(
            "SELECT f.path, k.title, k.status, k.date, k.decision_type, k.decision "
            "FROM files f JOIN file_knowledge k ON k.file_id = f.id "
            "WHERE f.path = ? AND k.kind = 'decision'",
            (path,),
        ).fetchone()
        if row is not None:
            found[path] = row
    return found


def error_pairs_of_file(conn: sqlite3.Connection, path: str) -> list[sqlite3.Row]:
    """(heading_path, signature, solution, first_chunk, last_chunk) of a file's error pairs,
    in file order."""
    if not has_knowledge(conn):
        return []
    return conn.execute(
        "SELECT p.heading_path, p.signature, p.solution, p.first_chunk, p.last_chunk "
        "FROM error_pairs p JOIN files f ON f.id = p.file_id WHERE f.path = ? "
        "ORDER BY p.first_chunk, p.id",
        (path,),
    ).fetchall()


def summary(conn: sqlite3.Connection, *, max_tags: int) -> dict[str, Any]:
    """The knowledge bases' sizes: ``{decisions: {total, by_status}, error_pairs,
    error_files, notes, tags: [{tag, files}], tags_total, chunks_by_kind: {decision,
    error, note}}`` (files for decisions, error_files and notes; the ``max_tags`` most
    used tags, most used first, then by name). An index without the tables: all notes."""
    if not has_knowledge(conn):
        chunks = int(conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
        return {
            "decisions": {"total": 0, "by_status": {}},
            "error_pairs": 0,
            "error_files": 0,
            "notes": int(conn.execute("SELECT COUNT(*) FROM files").fetchone()[0]),
            "tags": [],
            "tags_total": 0,
            "chunks_by_kind": {"decision": 0, "error": 0, "note": chunks},
        }
    by_status = {
        str(row[0]) or "unknown": int(row[1])
        for row in conn.execute(
            "SELECT status, COUNT(*) FROM file_knowledge WHERE kind = 'decision' "
            "GROUP BY status ORDER BY status"
        )
    }
    kinds = dict(conn.execute("SELECT kind, COUNT(*) FROM file_knowledge GROUP BY kind").fetchall())
    decision_chunks, error_chunks = (len(_rowids(conn, sql)) for sql in _KIND_CHUNKS.values())
    chunks = int(conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
    files = int(conn.execute("SELECT COUNT(*) FROM files").fetchone()[0])
    unclassified = files - sum(int(v) for v in kinds.values())
    tags = conn.execute(
        "SELECT tag, COUNT(*) AS n FROM file_tags GROUP BY tag ORDER BY n DESC, tag LIMIT ?",
        (max_tags,),
    ).fetchall()
    return {
        "decisions": {"total": sum(by_status.values()), "by_status": by_status},
        "error_pairs": int(conn.execute("SELECT COUNT(*) FROM error_pairs").fetchone()[0]),
        "error_files": int(kinds.get("error", 0)),
        "notes": int(kinds.get("note", 0)) + unclassified,
        "tags": [{"tag": str(row[0]), "files": int(row[1])} for row in tags],
        "tags_total": int(conn.execute("SELECT COUNT(DISTINCT tag) FROM file_tags").fetchone()[0]),
        "chunks_by_kind": {
            "decision": decision_chunks,
            "error": error_chunks,
            "note": chunks - decision_chunks - error_chunks,
        },
    }
