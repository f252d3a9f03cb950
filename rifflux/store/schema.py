"""The index database schema, created on first open and versioned.

``chunks_fts`` is an external-content FTS5 table: it stores only the inverted index
and reads column text back from ``chunks``. Triggers keep it in step with every
insert, update and delete on ``chunks`` (including deletes cascaded from ``files``).

Columns added within a schema version are listed in ``ADDED_COLUMNS``: opening an older
index adds them (``ALTER TABLE ... ADD COLUMN``, idempotent) instead of asking for a
rebuild; ``BACKFILL_SQL`` then fills them from what older versions stored.

``files_fts`` is the file path as a lexical field (rifflux.store.paths): an
external-content FTS5 table over ``files(path)``, one row per file (rowid = ``files.id``),
kept in step by triggers on ``files``, so the writer pays one FTS row per file written,
never per chunk.

Tables added within a schema version are listed in ``ADDED_TABLES``: a writer opening an
older index creates them (their statements are ``IF NOT EXISTS``, and include the
triggers and indexes that serve them) and fills them (``chunks_cjk``:
rifflux.store.cjk.backfill; ``files_fts``: rifflux.store.paths.backfill;
``file_knowledge`` with ``file_tags`` and ``error_pairs``: by the next job, which
re-chunks every file without a row, rifflux.store.knowledge; ``chunk_changes``: needs no
filling, rifflux.store.changes; ``grep_files`` with ``grep_blocks``,
``grep_dictionaries`` and ``grep_block_trigrams``: by the next job, which re-chunks
every file without a row, rifflux.store.grep_text); a reader of an older
index works without them.

``chunk_changes`` is the log of chunk rowids whose vector row may have changed, written
by triggers on ``chunks``, ``embeddings`` and ``files`` in the writer's own transaction,
whatever Rifflux version the writer is; the vector cache publisher reads only the rowids
logged since the position its manifest records (rifflux.store.changes).
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 1

# porter stemming over unicode61 measured +0.014 nDCG@10 on SciFact against plain unicode61.
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"

SCHEMA_SQL = f"""
CREATE TABLE IF NOT EXISTS index_metadata (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS files (
    id         INTEGER PRIMARY KEY,
    path       TEXT NOT NULL UNIQUE,
    mtime_ns   INTEGER NOT NULL,
    size_bytes INTEGER NOT NULL,
    sha256     TEXT NOT NULL,
    indexed_at REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS chunks (
    id           INTEGER PRIMARY KEY,
    chunk_id     TEXT NOT NULL UNIQUE,
    file_id      INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    chunk_index  INTEGER NOT NULL,
    heading_path TEXT NOT NULL,
    content      TEXT NOT NULL,
    -- sha256 of the text given to the embedder: equal hashes share one vector.
    embed_sha256 TEXT NOT NULL,
    -- JSON list of the headings that start in the chunk (rifflux.store.rows); NULL in
    -- rows written before it was recorded.
    headings     TEXT,
    UNIQUE (file_id, chunk_index)
);
CREATE INDEX IF NOT EXISTS chunks_embed_sha256 ON chunks(embed_sha256);

CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    heading_path,
    content,
    content='chunks',
    content_rowid='id',
    tokenize='{FTS_TOKENIZER}'
);

CREATE TRIGGER IF NOT EXISTS chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, heading_path, content)
    VALUES (new.id, new.heading_path, new.content);
END;

CREATE TRIGGER IF NOT EXISTS chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, heading_path, content)
    VALUES ('delete', old.id, old.heading_path, old.content);
END;

CREATE TRIGGER IF NOT EXISTS chunks_fts_update AFTER UPDATE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, heading_path, content)
    VALUES ('delete', old.id, old.heading_path, old.content);
    INSERT INTO chunks_fts(rowid, heading_path, content)
    VALUES (new.id, new.heading_path, new.content);
END;

{{CJK_SQL}}
{{PATHS_SQL}}
CREATE TABLE IF NOT EXISTS embeddings (
    chunk_id TEXT PRIMARY KEY REFERENCES chunks(chunk_id) ON DELETE CASCADE,
    model    TEXT NOT NULL,
    dim      INTEGER NOT NULL,
    vec      BLOB NOT NULL
);
-- Covers listing a model's rows without reading the vector blobs (cache publishing).
CREATE INDEX IF NOT EXISTS embeddings_model ON embeddings(chunk_id, model, dim);

CREATE TABLE IF NOT EXISTS jobs (
    id              TEXT PRIMARY KEY,
    roots           TEXT NOT NULL,
    options         TEXT NOT NULL,
    state           TEXT NOT NULL,
    files_total     INTEGER NOT NULL DEFAULT 0,
    files_done      INTEGER NOT NULL DEFAULT 0,
    files_skipped   INTEGER NOT NULL DEFAULT 0,
    files_failed    INTEGER NOT NULL DEFAULT 0,
    files_deleted   INTEGER NOT NULL DEFAULT 0,
    chunks_embedded INTEGER NOT NULL DEFAULT 0,
    batches_total   INTEGER NOT NULL DEFAULT 0,
    batches_done    INTEGER NOT NULL DEFAULT 0,
    retries         INTEGER NOT NULL DEFAULT 0,
    errors          TEXT NOT NULL DEFAULT '[]',
    -- The plan step's results, apart from the submitted settings in ``options``.
    planned         INTEGER NOT NULL DEFAULT 0,
    skipped         TEXT NOT NULL DEFAULT '[]',
    prune_paths     TEXT NOT NULL DEFAULT '[]',
    -- Progress per phase (lexical: rows written; embedding: texts to embed).
    files_planned   INTEGER NOT NULL DEFAULT 0,
    files_written   INTEGER NOT NULL DEFAULT 0,
    chunks_written  INTEGER NOT NULL DEFAULT 0,
    batches_written INTEGER NOT NULL DEFAULT 0,
    chunks_to_embed INTEGER NOT NULL DEFAULT 0,
    -- Of files_skipped, those left as they were (unchanged, or only their mtime refreshed).
    files_unchanged INTEGER NOT NULL DEFAULT 0,
    created_at      REAL NOT NULL,
    started_at      REAL,
    finished_at     REAL,
    updated_at      REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_created_at ON jobs(created_at);

-- The persisted plan of a job: one row per batch with its files. A batch moves from
-- 'pending' to 'chunked' (rows written) to 'written' (vectors in), or to 'failed', each
-- step exactly once, so redelivered messages are no-ops and a redelivered plan re-sends
-- only what is still pending.
CREATE TABLE IF NOT EXISTS job_batches (
    job_id   TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    batch_no INTEGER NOT NULL,
    state    TEXT NOT NULL,
    files    TEXT NOT NULL DEFAULT '[]',
    -- The embed units of a chunked batch whose vectors are written: bit n for unit n.
    units_done INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, batch_no)
);
"""

# Chunks with Chinese, Japanese or Korean text, their CJK runs as bigrams (rifflux.store.cjk).
# Written by IndexWriter with the chunk; the triggers keep it from outliving the chunk or
# its text. Rows are only ever inserted by the writer, which deletes and re-inserts a
# file's chunks, so an in-place update (none in Rifflux) simply drops the row.
CJK_SQL = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_cjk USING fts5(
    heading_path,
    content,
    tokenize='{FTS_TOKENIZER}'
);

CREATE TRIGGER IF NOT EXISTS chunks_cjk_delete AFTER DELETE ON chunks BEGIN
    DELETE FROM chunks_cjk WHERE rowid = old.id;
END;

CREATE TRIGGER IF NOT EXISTS chunks_cjk_update AFTER UPDATE OF heading_path, content ON chunks
BEGIN
    DELETE FROM chunks_cjk WHERE rowid = old.id;
END;
"""

# The file path as a lexical field (rifflux.store.paths). A file's path never changes in
# place (the writer's upsert conflicts on it; a rename is a delete and an insert), but the
# update trigger keeps the table right if one ever did. ``chunks_file_of`` is the narrow
# (id, file_id) index the path bonus joins each matching chunk through, instead of the
# wide ``chunks`` row.
PATHS_SQL = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS files_fts USING fts5(
    path,
    content='files',
    content_rowid='id',
    tokenize='{FTS_TOKENIZER}'
);

CREATE TRIGGER IF NOT EXISTS files_fts_insert AFTER INSERT ON files BEGIN
    INSERT INTO files_fts(rowid, path) VALUES (new.id, new.path);
END;

CREATE TRIGGER IF NOT EXISTS files_fts_delete AFTER DELETE ON files BEGIN
    INSERT INTO files_fts(files_fts, rowid, path) VALUES ('delete', old.id, old.path);
END;

CREATE TRIGGER IF NOT EXISTS files_fts_update AFTER UPDATE OF path ON files BEGIN
    INSERT INTO files_fts(files_fts, rowid, path) VALUES ('delete', old.id, old.path);
    INSERT INTO files_fts(rowid, path) VALUES (new.id, new.path);
END;

CREATE INDEX IF NOT EXISTS chunks_file_of ON chunks(id, file_id);
"""

# Each file's front matter fields and kind, its tags and its error-solution sections
# (rifflux.store.knowledge). No backfill: a file without a row is re-chunked by the next
# job (``stale_paths``), which writes it. ``chunks_about`` is the front matter's title,
# name, description and summary as a lexical field of the file's first chunk, where the
# block used to be (rifflux.search.lexical): an FTS5 table whose rowid is that chunk's,
# written by IndexWriter with the chunk, deleted with it by the trigger (as chunks_cjk).
KNOWLEDGE_TABLE = "file_knowledge"
ABOUT_TABLE = "chunks_about"
KNOWLEDGE_SQL = f"""
CREATE TABLE IF NOT EXISTS file_knowledge (
    file_id       INTEGER PRIMARY KEY REFERENCES files(id) ON DELETE CASCADE,
    version       INTEGER NOT NULL,
    kind          TEXT NOT NULL,
    title         TEXT NOT NULL DEFAULT '',
    about         TEXT NOT NULL DEFAULT '',
    doc_type      TEXT NOT NULL DEFAULT '',
    status        TEXT NOT NULL DEFAULT '',
    date          TEXT NOT NULL DEFAULT '',
    decision_type TEXT NOT NULL DEFAULT '',
    decision      TEXT NOT NULL DEFAULT '',
    extra         TEXT NOT NULL DEFAULT '{{}}'
);
CREATE INDEX IF NOT EXISTS file_knowledge_kind ON file_knowledge(kind, status);

CREATE VIRTUAL TABLE IF NOT EXISTS chunks_about USING fts5(
    about,
    tokenize='{FTS_TOKENIZER}'
);

CREATE TRIGGER IF NOT EXISTS chunks_about_delete AFTER DELETE ON chunks BEGIN
    DELETE FROM chunks_about WHERE rowid = old.id;
END;

CREATE TABLE IF NOT EXISTS file_tags (
    tag     TEXT NOT NULL,
    file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    PRIMARY KEY (tag, file_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS file_tags_file ON file_tags(file_id);

CREATE TABLE IF NOT EXISTS error_pairs (
    id           INTEGER PRIMARY KEY,
    file_id      INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    heading_path TEXT NOT NULL,
    signature    TEXT NOT NULL,
    solution     TEXT NOT NULL,
    first_chunk  INTEGER NOT NULL,
    last_chunk   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS error_pairs_file ON error_pairs(file_id, first_chunk);
"""

# The chunk rowids whose row in the vector cache may have changed (rifflux.store.changes):
# a chunk deleted (its cached row goes; deletes cascaded from ``files`` fire the trigger
# too), a vector attached, removed or replaced, a chunk or a file path changed in place
# (none in Rifflux; logged all the same). A chunk inserted without a vector needs no
# entry: no cached row can describe it, and the chunk its rowid may have had before was
# logged when it was deleted. ``seq`` is AUTOINCREMENT, so a position is never reused
# even after the entries below it are pruned; the publisher records the position its
# cache includes, and prunes what it has consumed.
CHANGES_TABLE = "chunk_changes"
CHANGES_SQL = """
CREATE TABLE IF NOT EXISTS chunk_changes (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    chunk_rowid INTEGER NOT NULL
);

CREATE TRIGGER IF NOT EXISTS chunk_changes_chunk_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunk_changes(chunk_rowid) VALUES (old.id);
END;

CREATE TRIGGER IF NOT EXISTS chunk_changes_chunk_update
AFTER UPDATE OF id, chunk_id, file_id, chunk_index, embed_sha256 ON chunks BEGIN
    INSERT INTO chunk_changes(chunk_rowid) VALUES (old.id);
    INSERT INTO chunk_changes(chunk_rowid) SELECT new.id WHERE new.id != old.id;
END;

CREATE TRIGGER IF NOT EXISTS chunk_changes_vector_insert AFTER INSERT ON embeddings BEGIN
    INSERT INTO chunk_changes(chunk_rowid) SELECT id FROM chunks WHERE chunk_id = new.chunk_id;
END;

CREATE TRIGGER IF NOT EXISTS chunk_changes_vector_delete AFTER DELETE ON embeddings BEGIN
    INSERT INTO chunk_changes(chunk_rowid) SELECT id FROM chunks WHERE chunk_id = old.chunk_id;
END;

CREATE TRIGGER IF NOT EXISTS chunk_changes_vector_update AFTER UPDATE ON embeddings BEGIN
    INSERT INTO chunk_changes(chunk_rowid) SELECT id FROM chunks
    WHERE chunk_id IN (old.chunk_id, new.chunk_id);
END;

CREATE TRIGGER IF NOT EXISTS chunk_changes_file_path AFTER UPDATE OF id, path ON files BEGIN
    INSERT INTO chunk_changes(chunk_rowid) SELECT id FROM chunks
    WHERE file_id IN (old.id, new.id);
END;
"""

# Each file's whole text as indexed, front matter included, for exact and regex search
# (rifflux.store.grep_text): per file its sha256, the first line of each chunk and its
# blocks (whole lines, about ``grep_text.BLOCK_CHARS`` characters, the consecutive ids
# ``first_block`` .. ``first_block + blocks - 1``); per block its text,
# Zstandard-compressed with one of the index's dictionaries or none; and a trigram index
# over the blocks, rowid the block's id, contentless (it stores no text) and
# ``detail=none`` (rowids only, no positions). Block ids are never reused
# (AUTOINCREMENT), so postings or blocks left by a delete that did not go through the
# writer name no live block, and a search skips them.
GREP_TABLE = "grep_files"
GREP_BLOCKS = "grep_blocks"
DICTIONARY_TABLE = "grep_dictionaries"
TRIGRAM_TABLE = "grep_block_trigrams"
# The tables of the same role in older indexes (a text and trigram row per file, then a
# text per file with trigram rows per block): dropped when these are added, and the
# next job rewrites every file's rows.
OLD_GREP_TABLES = ("file_trigrams", "file_text", "grep_text", "grep_trigrams")
GREP_SQL = """
CREATE TABLE IF NOT EXISTS grep_files (
    file_id      INTEGER PRIMARY KEY REFERENCES files(id) ON DELETE CASCADE,
    -- files.sha256 of the text stored: a file rewritten without this row is stale.
    sha256       TEXT NOT NULL,
    -- JSON list: the 1-based line of the file where each chunk (by chunk_index) starts.
    chunk_lines  TEXT NOT NULL,
    first_block  INTEGER NOT NULL,
    blocks       INTEGER NOT NULL,
    -- JSON list: the 1-based line of the file where each block starts.
    block_lines  TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS grep_blocks (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    file_id      INTEGER NOT NULL,
    dictionary   INTEGER,
    text         BLOB NOT NULL
);

CREATE TABLE IF NOT EXISTS grep_dictionaries (
    id           INTEGER PRIMARY KEY,
    data         BLOB NOT NULL
);

CREATE VIRTUAL TABLE IF NOT EXISTS grep_block_trigrams USING fts5(
    text,
    content='',
    detail=none,
    columnsize=0,
    tokenize='trigram'
);
"""

SCHEMA_SQL = SCHEMA_SQL.replace("{CJK_SQL}", CJK_SQL).replace("{PATHS_SQL}", PATHS_SQL)
SCHEMA_SQL += KNOWLEDGE_SQL + CHANGES_SQL + GREP_SQL

# Tables added since schema version 1 was first released: created, with their triggers
# and indexes, when a writer opens an index that lacks them (see module docstring).
ADDED_TABLES: dict[str, str] = {
    "chunks_cjk": CJK_SQL,
    "files_fts": PATHS_SQL,
    KNOWLEDGE_TABLE: KNOWLEDGE_SQL,
    CHANGES_TABLE: CHANGES_SQL,
    GREP_TABLE: GREP_SQL,
}

# table -> (column, declaration) added since the table was first created, in order.
ADDED_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    # No backfill: an older row's NULL reads as "not recorded" (its heading_path alone).
    "chunks": (("headings", "TEXT"),),
    "jobs": (
        ("planned", "INTEGER NOT NULL DEFAULT 0"),
        ("skipped", "TEXT NOT NULL DEFAULT '[]'"),
        ("prune_paths", "TEXT NOT NULL DEFAULT '[]'"),
        ("files_planned", "INTEGER NOT NULL DEFAULT 0"),
        ("files_written", "INTEGER NOT NULL DEFAULT 0"),
        ("chunks_written", "INTEGER NOT NULL DEFAULT 0"),
        ("batches_written", "INTEGER NOT NULL DEFAULT 0"),
        ("chunks_to_embed", "INTEGER NOT NULL DEFAULT 0"),
        ("files_unchanged", "INTEGER NOT NULL DEFAULT 0"),
    ),
    "job_batches": (("units_done", "INTEGER NOT NULL DEFAULT 0"),),
}

# Run once, right after a table's columns were added: older versions kept the plan's
# results in the job's ``options`` JSON.
BACKFILL_SQL: dict[str, tuple[str, ...]] = {
    "jobs": (
        "UPDATE jobs SET planned = 1, "
        "skipped = COALESCE(json_extract(options, '$.skipped'), '[]'), "
        "prune_paths = COALESCE(json_extract(options, '$.prune_paths'), '[]') "
        "WHERE json_extract(options, '$.planned')",
    ),
}


def has_schema_object(conn: sqlite3.Connection, kind: str, name: str) -> bool:
    """Whether the database has the ``kind`` (``table``, ``index``) called ``name``: one
    ``sqlite_master`` probe, how readers and writers ask for the tables added within a
    schema version."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = ? AND name = ?", (kind, name)
    ).fetchone()
    return row is not None
