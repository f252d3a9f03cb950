"""Reads of the index tables: the one place their joins are written.

:class:`IndexReader` wraps a connection (read-only or not) and answers the questions
the indexer, the job steps and the vector cache ask of ``files``, ``chunks``,
``embeddings`` and ``index_metadata``. It never writes; :class:`~rifflux.store.writer.
IndexWriter` extends it with the writes. The FTS5 ``MATCH`` text that
``rifflux.search.lexical`` builds is the one query written elsewhere.

Lists of keys go through :func:`select_in`, the one chunked ``IN (...)``: SQLite refuses
a statement with more bound variables than ``SQLITE_LIMIT_VARIABLE_NUMBER`` (32,766 in
SQLite 3.40), so long lists are split into chunks of at most ``IN_CHUNK`` values.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from rifflux.store.connection import INDEX_UID_KEY

# Values per ``IN (...)`` statement: small enough for any SQLite build's variable limit
# (999 before 3.32), large enough that a 24k-row read is ~50 statements.
IN_CHUNK = 500


# index_metadata key: JSON list of the stored-path prefixes that jobs have indexed.
INDEXED_ROOTS_KEY = "indexed_roots"

# A chunk as searches return it, joined with its file's path.
_CHUNK_COLUMNS = (
    "SELECT c.id, c.chunk_id, f.path, c.heading_path, c.chunk_index, c.content "
    "FROM chunks c JOIN files f ON f.id = c.file_id "
)


def select_in(
    conn: sqlite3.Connection,
    sql: str,
    values: Iterable[Any],
    *,
    params: Sequence[Any] = (),
    chunk: int = IN_CHUNK,
) -> Iterator[sqlite3.Row]:
    """Rows of ``sql`` for every value, in chunks; ``sql`` has one ``{marks}`` placeholder.

    ``params`` bind the ``?`` that come before ``IN ({marks})`` in ``sql``. A chunk never
    binds more variables than the connection allows, whatever ``chunk`` asks for.
    """
    items = list(values)
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) - len(params)
    size = max(1, min(chunk, limit))
    for start in range(0, len(items), size):
        part = items[start : start + size]
        yield from conn.execute(sql.format(marks=",".join("?" * len(part))), (*params, *part))


def paths_under(folder: str) -> tuple[str, str]:
    """The stored paths strictly under ``folder`` are those ``> low`` and ``< high``:
    ("a/", "a0"), as "0" is the character after "/" (an indexed range on ``files.path``)."""
    head = folder.rstrip("/")
    return head + "/", head + "0"


def get_metadata(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM index_metadata WHERE key = ?", (key,)).fetchone()
    return str(row["value"]) if row else None


def current_generation(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM index_metadata WHERE key = 'generation'").fetchone()
    return int(row["value"]) if row else 0


# (rowid, path, chunk_index, embed hash) of the chunks with a vector of a model.
_VECTOR_ROWS = (
    "SELECT c.id, f.path, c.chunk_index, c.embed_sha256 FROM chunks c "
    "JOIN files f ON f.id = c.file_id JOIN embeddings e ON e.chunk_id = c.chunk_id "
)


def _icontains(content: str | None, needle: str) -> bool:
    return content is not None and needle in content.casefold()


class IndexReader:
    """Queries over one connection; several queries read one state inside
    ``transaction(conn, write=False)``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    # -- metadata ------------------------------------------------------------------

    def metadata(self, key: str) -> str | None:
        return get_metadata(self.conn, key)

    def generation(self) -> int:
        return current_generation(self.conn)

    def generation_and_uid(self) -> tuple[int, str | None]:
        """(generation, vector cache uid) in one read."""
        rows = self.conn.execute(
            "SELECT key, value FROM index_metadata WHERE key IN ('generation', ?)",
            (INDEX_UID_KEY,),
        ).fetchall()
        values = {row[0]: row[1] for row in rows}
        return int(values.get("generation", 0)), values.get(INDEX_UID_KEY)

    def embedding_dim(self, model: str) -> int:
        """The index's vector dimension: recorded, else read from a ``model`` vector."""
        dim = self.metadata("embedding_dim")
        if dim:
            return int(dim)
        row = self.conn.execute(
            "SELECT dim FROM embeddings WHERE model = ? LIMIT 1", (model,)
        ).fetchone()
        return int(row[0]) if row else 0

    # -- files ---------------------------------------------------------------------

    def file_states(self) -> list[tuple[str, int, int, str]]:
        """(path, mtime_ns, size_bytes, sha256) of every stored file, as plain tuples: a
        plan reads every row, and ``sqlite3.Row`` objects cost ~3x more (0.3 s at 100k)."""
        cursor = self.conn.cursor()
        cursor.row_factory = None
        return cursor.execute("SELECT path, mtime_ns, size_bytes, sha256 FROM files").fetchall()

    def stored_paths(self) -> list[str]:
        return [row[0] for row in self.conn.execute("SELECT path FROM files")]

    # -- vectors -------------------------------------------------------------------

    def reusable_vectors(self, hashes: Sequence[str], model: str) -> dict[str, tuple[int, bytes]]:
        """A stored ``model`` vector (dim, blob: int8, or float32 in an older index; see
        rifflux.store.vector_blobs) for each of ``hashes`` that has one."""
        found: dict[str, tuple[int, bytes]] = {}
        rows = select_in(
            self.conn,
            "SELECT c.embed_sha256, e.dim, e.vec FROM chunks c "
            "JOIN embeddings e ON e.chunk_id = c.chunk_id "
            "WHERE e.model = ? AND c.embed_sha256 IN ({marks})",
            hashes,
            params=(model,),
        )
        for key, dim, vec in rows:
            found.setdefault(key, (int(dim), vec))
        return found

    def chunks_without_vectors(self, paths: Iterable[str]) -> list[sqlite3.Row]:
        """(embed hash, heading_path, content) of the chunks of ``paths`` with no vector,
        one row per distinct hash, in (path, chunk_index) order."""
        return self._without_vectors("c.embed_sha256, c.heading_path, c.content", paths)

    def hashes_without_vectors(self, paths: Iterable[str]) -> list[str]:
        """The embed hashes of :meth:`chunks_without_vectors`, in its order, without
        reading the texts."""
        return [row[0] for row in self._without_vectors("c.embed_sha256", paths)]

    def _without_vectors(self, columns: str, paths: Iterable[str]) -> list[sqlite3.Row]:
        rows = select_in(
            self.conn,
            f"SELECT {columns} FROM files f "
            "JOIN chunks c ON c.file_id = f.id WHERE f.path IN ({marks}) "
            "AND NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.chunk_id = c.chunk_id) "
            "ORDER BY f.path, c.chunk_index",
            paths,
        )
        seen: set[str] = set()
        out = []
        for row in rows:
            if row[0] not in seen:
                seen.add(row[0])
                out.append(row)
        return out

    def has_files_under(self, folder: str) -> bool:
        """True if a stored file lies under the stored path ``folder`` (one indexed
        range probe, :func:`paths_under`)."""
        row = self.conn.execute(
            "SELECT 1 FROM files WHERE path > ? AND path < ? LIMIT 1", paths_under(folder)
        ).fetchone()
        return row is not None

    def paths_without_vectors(self) -> list[str]:
        """Stored files with at least one chunk that has no vector (a job that failed in
        its vector phase left them keyword-searchable only), sorted.

        Every vector belongs to one chunk (cascading deletes), so equal row counts prove
        there are none without reading a chunk.
        """
        counts = self.row_counts()
        if counts["chunks"] == counts["embeddings"]:
            return []
        rows = self.conn.execute(
            "SELECT f.path FROM files f WHERE EXISTS (SELECT 1 FROM chunks c "
            "WHERE c.file_id = f.id AND NOT EXISTS "
            "(SELECT 1 FROM embeddings e WHERE e.chunk_id = c.chunk_id)) ORDER BY f.path"
        )
        return [row[0] for row in rows]

    def vector_rows(
        self, model: str, dim: int | None, rowids: Iterable[int] | None = None
    ) -> Iterator[sqlite3.Row]:
        """(rowid, path, chunk_index, embed hash) of the chunks with a ``model`` vector
        (of ``dim``, unless None), one row at a time.

        Without ``rowids``: every such chunk, sorted by (path, chunk_index). CROSS JOIN
        fixes the join order so the rows come out of the ``files(path)`` and
        ``chunks(file_id, chunk_index)`` indexes already sorted; the planner's own order
        (embeddings first) sorts every row in a temporary B-tree, ~1.6x the time. A
        cursor, not a list: a list holds ~370 bytes a row (290 MB at 789k rows).

        With ``rowids``: those of them that have such a vector, unordered (a publish's
        changed rows, rifflux.store.changes; the cache's check of its candidates).
        """
        dim_test = "" if dim is None else " AND e.dim = ?"
        dim_param = () if dim is None else (dim,)
        if rowids is not None:
            return select_in(
                self.conn,
                _VECTOR_ROWS + f"WHERE e.model = ?{dim_test} AND c.id IN ({{marks}})",
                rowids,
                params=(model, *dim_param),
            )
        return self.conn.execute(
            "SELECT c.id, f.path, c.chunk_index, c.embed_sha256 FROM files f "
            "CROSS JOIN chunks c ON c.file_id = f.id "
            "CROSS JOIN embeddings e ON e.chunk_id = c.chunk_id "
            f"WHERE e.model = ?{dim_test} ORDER BY f.path, c.chunk_index",
            (model, *dim_param),
        )

    def vector_rowids(self, model: str, dim: int) -> Iterator[int]:
        """Rowids of the chunks with a ``model`` vector, unordered (no paths read)."""
        rows = self.conn.execute(
            "SELECT c.id FROM chunks c JOIN embeddings e ON e.chunk_id = c.chunk_id "
            "WHERE e.model = ? AND e.dim = ?",
            (model, dim),
        )
        return (row[0] for row in rows)

    def vectors_of_rowids(self, rowids: Iterable[int], model: str) -> Iterator[sqlite3.Row]:
        """(rowid, vector bytes) of the ``model`` vectors of chunk ``rowids``."""
        return select_in(
            self.conn,
            "SELECT c.id, e.vec FROM chunks c JOIN embeddings e ON e.chunk_id = c.chunk_id "
            "WHERE e.model = ? AND c.id IN ({marks})",
            rowids,
            params=(model,),
        )

    def vector_of_chunk(self, path: str, chunk_index: int) -> bytes | None:
        """The stored vector blob (rifflux.store.vector_blobs) of one chunk, if it has one."""
        row = self.conn.execute(
            "SELECT e.vec FROM embeddings e JOIN chunks c ON c.chunk_id = e.chunk_id "
            "JOIN files f ON f.id = c.file_id WHERE f.path = ? AND c.chunk_index = ?",
            (path, chunk_index),
        ).fetchone()
        return bytes(row[0]) if row is not None else None

    # -- chunks and files as searches show them ------------------------------------------

    def chunks_by_rowids(self, rowids: Iterable[int]) -> Iterator[sqlite3.Row]:
        """(id, chunk_id, path, heading_path, chunk_index, content) of chunk ``rowids``."""
        return select_in(self.conn, _CHUNK_COLUMNS + "WHERE c.id IN ({marks})", rowids)

    def chunk_by_id(self, chunk_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.conn.execute(
            _CHUNK_COLUMNS + "WHERE c.chunk_id = ?", (chunk_id,)
        ).fetchone()
        return row

    def chunk_ids_with_prefix(self, prefix: str) -> tuple[int, str | None]:
        """(how many chunk ids begin with the lowercase hex ``prefix``, the first of them):
        a range scan of the ``chunk_id`` index (ids are lowercase hex, all below "g")."""
        count, first = self.conn.execute(
            "SELECT COUNT(*), MIN(chunk_id) FROM chunks WHERE chunk_id >= ? AND chunk_id < ?",
            (prefix, prefix + "g"),
        ).fetchone()
        return int(count), first

    def chunk_ids_beside(self, chunk_id: str) -> tuple[str | None, str | None]:
        """The chunk ids just before and just after ``chunk_id`` in sorted order (two
        seeks of the ``chunk_id`` index): the ids sharing the longest prefix with it."""
        before = self.conn.execute(
            "SELECT MAX(chunk_id) FROM chunks WHERE chunk_id < ?", (chunk_id,)
        ).fetchone()[0]
        after = self.conn.execute(
            "SELECT MIN(chunk_id) FROM chunks WHERE chunk_id > ?", (chunk_id,)
        ).fetchone()[0]
        return before, after

    def headings_of_rowids(self, rowids: Iterable[int]) -> dict[int, str | None]:
        """``{rowid: headings column}`` of chunk ``rowids`` (rifflux.store.rows); every
        value None in an older index, which has no such column until a writer opens it."""
        ids = list(rowids)
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(chunks)")}
        if "headings" not in columns:
            return dict.fromkeys(ids)
        rows = select_in(self.conn, "SELECT id, headings FROM chunks WHERE id IN ({marks})", ids)
        return {int(row[0]): row[1] for row in rows}

    def file_by_path(self, path: str) -> sqlite3.Row | None:
        """(id, path, sha256) of the indexed file stored as ``path``."""
        row: sqlite3.Row | None = self.conn.execute(
            "SELECT id, path, sha256 FROM files WHERE path = ?", (path,)
        ).fetchone()
        return row

    def chunks_of_file(self, file_id: int) -> list[sqlite3.Row]:
        """A file's chunks in order, with the columns of :meth:`chunks_by_rowids`."""
        return self.conn.execute(
            _CHUNK_COLUMNS + "WHERE c.file_id = ? ORDER BY c.chunk_index", (file_id,)
        ).fetchall()

    # -- what search filters read ----------------------------------------------------

    def file_rows(self) -> sqlite3.Cursor:
        """(id, path, mtime_ns) of every stored file."""
        return self.conn.execute("SELECT id, path, mtime_ns FROM files")

    def chunk_rowids(self, file_ids: Iterable[int] | None, contains: str | None) -> list[int]:
        """Rowids of the chunks of ``file_ids`` (None: of every file) whose content has
        ``contains`` (already casefolded; None: any content) as a casefolded substring."""
        where = ""
        if contains is not None:
            self.conn.create_function("rifflux_icontains", 2, _icontains, deterministic=True)
            where = "rifflux_icontains(content, ?)"
        params: tuple[str, ...] = (contains,) if contains is not None else ()
        if file_ids is None:
            sql = "SELECT id FROM chunks" + (f" WHERE {where}" if where else "")
            return [int(row[0]) for row in self.conn.execute(sql, params)]
        sql = "SELECT id FROM chunks WHERE " + (f"{where} AND " if where else "")
        rows = select_in(self.conn, sql + "file_id IN ({marks})", file_ids, params=params)
        return [int(row[0]) for row in rows]

    def file_mtimes(self, paths: Iterable[str]) -> dict[str, int]:
        """``{path: mtime_ns}`` of those stored ``paths``."""
        rows = select_in(
            self.conn, "SELECT path, mtime_ns FROM files WHERE path IN ({marks})", paths
        )
        return {str(row[0]): int(row[1]) for row in rows}

    def chunks_of_file_between(self, file_id: int, first: int, last: int) -> list[sqlite3.Row]:
        """A file's chunks with ``first <= chunk_index <= last``, in order."""
        return self.conn.execute(
            _CHUNK_COLUMNS + "WHERE c.file_id = ? AND c.chunk_index BETWEEN ? AND ? "
            "ORDER BY c.chunk_index",
            (file_id, first, last),
        ).fetchall()

    def file_id_of_chunk(self, chunk_id: str) -> int | None:
        row = self.conn.execute(
            "SELECT file_id FROM chunks WHERE chunk_id = ?", (chunk_id,)
        ).fetchone()
        return int(row[0]) if row is not None else None

    def row_counts(self) -> dict[str, int]:
        """Rows in ``files``, ``chunks`` and ``embeddings``."""
        return {
            table: int(self.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            for table in ("files", "chunks", "embeddings")
        }

    def indexed_roots(self) -> list[str]:
        return list(json.loads(self.metadata(INDEXED_ROOTS_KEY) or "[]"))

    def counts_by_root(self) -> list[dict[str, Any]]:
        """Files, chunks and embedded chunks under each indexed root (a stored-path
        prefix; ``.`` is the base directory itself)."""
        out = []
        for root in self.indexed_roots():
            prefix = root.rstrip("/")
            where, params = (
                ("", ())
                if prefix in ("", ".")
                else (
                    "WHERE f.path = ? OR substr(f.path, 1, ?) = ?",
                    (prefix, len(prefix) + 1, prefix + "/"),
                )
            )
            row = self.conn.execute(
                "SELECT COUNT(DISTINCT f.id), COUNT(c.id), COUNT(e.chunk_id) FROM files f "
                "LEFT JOIN chunks c ON c.file_id = f.id "
                f"LEFT JOIN embeddings e ON e.chunk_id = c.chunk_id {where}",
                params,
            ).fetchone()
            out.append({"root": root, "files": row[0], "chunks": row[1], "embeddings": row[2]})
        return out
