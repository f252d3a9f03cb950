"""The file path as a lexical field: a per-connection FTS5 table of the indexed paths.

A file's path names what it is about (``skills/appinsights-instrumentation/references/
ASPNETCORE.md``, ``instructions/exclude-prompt-data.instructions.md``), often in words its
chunks use rarely or only in a front-matter line. The lexical search adds
``path_weight × bm25(path)`` of a chunk's file to the chunk's own bm25(): every chunk of a
file whose path matches the query gains the same bonus, so the chunks the semantic side
ranks first (often the front matter) also rank on the lexical side and the file's lexical
and semantic evidence meet in one chunk instead of two that each rank low in RRF.
Measured on the awesome-copilot judged queries (BENCHMARKS.md, issue 12), file-level
nDCG@10: hybrid 0.934 → 0.953 on the tuning half and 0.950 → 0.951 held out (the naive
pipeline: 0.943, 0.949); lexical on the whole corpus 0.842 → 0.850 and 0.799 → 0.825.
SciFact's paths (``docs/<id>.md``) match no claim, so its scores are unchanged.

Cost: the tables are built once per connection and index generation, ~2 µs per chunk
(16 ms for the 15,477 chunks of awesome-copilot, 28 ms for SciFact's 9,109); a query whose
terms match some path then pays the join, +2–4 ms lexical p50 on awesome-copilot. A query
matching no path skips it. A path column in the store's FTS schema would remove the build
(a schema change and reindex this avoids).

The table lives in the connection's TEMP schema, so the index file is never written (its
connections are read-only) and no schema change or reindex is needed. It holds one row per
indexed file (rowid = ``files.id``), porter-stemmed like ``chunks_fts``, and is rebuilt
inside one read transaction whenever the index generation differs from the one it was
built at (each job bumps it), so a search sees at worst the paths of the snapshot it
checked, and a missing path only costs a chunk its bonus.
"""

from __future__ import annotations

import sqlite3

from rifflux.store.reader import current_generation

PATH_TABLE = "rifflux_paths"
CHUNK_FILES_TABLE = "rifflux_chunk_files"
"""Each chunk's file id, a narrow copy of ``chunks(id, file_id)``: the path join reads it
instead of the wide ``chunks`` rows (the join's lexical p50 cost on awesome-copilot fell
from +8–12 ms to +2–4 ms)."""
_STATE_TABLE = "rifflux_paths_state"
_TOKENIZE = "porter unicode61 remove_diacritics 2"


def any_path_matches(conn: sqlite3.Connection, match: str) -> bool:
    """Whether some indexed path holds a term of the FTS5 MATCH ``match``. When none does
    (SciFact's ``docs/<id>.md``, most queries anywhere) the search skips the path join."""
    row = conn.execute(
        f"SELECT 1 FROM temp.{PATH_TABLE} WHERE {PATH_TABLE} MATCH ? LIMIT 1", (match,)
    ).fetchone()
    return row is not None


def _built_generation(conn: sqlite3.Connection) -> int | None:
    try:
        row = conn.execute(f"SELECT generation FROM temp.{_STATE_TABLE}").fetchone()
    except sqlite3.OperationalError:  # Not built on this connection yet.
        return None
    return None if row is None else int(row[0])


def ensure_path_table(conn: sqlite3.Connection) -> None:
    """Make ``temp.rifflux_paths`` hold the paths of the index's current generation."""
    if _built_generation(conn) == current_generation(conn):
        return
    in_transaction = conn.in_transaction
    if not in_transaction:
        conn.execute("BEGIN")
    try:
        generation = current_generation(conn)
        for table in (PATH_TABLE, CHUNK_FILES_TABLE, _STATE_TABLE):
            conn.execute(f"DROP TABLE IF EXISTS temp.{table}")
        conn.execute(
            f"CREATE VIRTUAL TABLE temp.{PATH_TABLE} USING fts5(path, tokenize='{_TOKENIZE}')"
        )
        conn.execute(
            f"CREATE TABLE temp.{CHUNK_FILES_TABLE} "
            "(id INTEGER PRIMARY KEY, file_id INTEGER NOT NULL)"
        )
        conn.execute(f"CREATE TABLE temp.{_STATE_TABLE} (generation INTEGER NOT NULL)")
        conn.execute(f"INSERT INTO temp.{PATH_TABLE}(rowid, path) SELECT id, path FROM main.files")
        conn.execute(
            f"INSERT INTO temp.{CHUNK_FILES_TABLE}(id, file_id) SELECT id, file_id FROM main.chunks"
        )
        conn.execute(f"INSERT INTO temp.{_STATE_TABLE} VALUES (?)", (generation,))
    except BaseException:
        if not in_transaction:
            conn.execute("ROLLBACK")
        raise
    if not in_transaction:
        conn.execute("COMMIT")
