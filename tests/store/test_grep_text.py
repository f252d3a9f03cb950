"""The grep rows (rifflux.store.grep_text): a batch of files lands in the trigram table as
one FTS5 segment, not one per file, and stays searchable when rewritten; a file is a
candidate only where one block holds every trigram asked."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from rifflux_testing import AWESOME_COPILOT

from rifflux.index.changes import FileWork
from rifflux.index.prepare import chunk_file
from rifflux.search.grep import fts_match
from rifflux.store import grep_text
from rifflux.store.connection import open_index, transaction
from rifflux.store.rows import PreparedFile
from rifflux.store.schema import TRIGRAM_TABLE
from rifflux.store.segments import merges_deferred, segment_count
from rifflux.store.writer import IndexWriter

FILES = 20


def prepared_files(folder: Path, first: int = 0, count: int = FILES) -> list[PreparedFile]:
    """``count`` markdown files of the vendored corpus from the ``first`` in path order,
    chunked."""
    paths = sorted(folder.rglob("*.md"))[first : first + count]
    files = []
    for path in paths:
        data = path.read_bytes()
        work = FileWork(
            str(path.relative_to(folder)),
            0,
            len(data),
            hashlib.sha256(data).hexdigest(),
            data.decode("utf-8", "replace"),
        )
        files.append(chunk_file(work, max_chars=1200, min_chars=200))
    return files


def test_a_batch_writes_its_trigram_rows_as_one_segment(tmp_path: Path) -> None:
    """The batch's other statements (multi-row DELETEs among them) open savepoints, which
    flush FTS5's pending postings: trigram rows written per file between them would leave
    a segment per file."""
    files = prepared_files(AWESOME_COPILOT)
    conn = open_index(tmp_path / "index.db")
    try:
        writer = IndexWriter(conn)
        with transaction(conn), merges_deferred(conn):  # automerge off: raw segment count
            writer.write_rows(files, "hash")
        assert segment_count(conn, TRIGRAM_TABLE) == 1
        # A rewrite of the batch: its old rows' deletes, then its new rows.
        with transaction(conn), merges_deferred(conn):
            writer.write_rows(files, "hash")
        assert segment_count(conn, TRIGRAM_TABLE) <= 3
        assert len(grep_text.candidates(conn, None)) == FILES
        # Every file is still a candidate for a literal of its own first line.
        for prepared in files:
            line = next(t for t in (prepared.text or "").splitlines() if len(t.strip()) >= 12)
            match = fts_match(line.strip()[:12])
            paths = [found.path for found in grep_text.candidates(conn, match)]
            assert prepared.rel_path in paths
    finally:
        conn.close()


def test_blocks_are_whole_lines_that_rebuild_the_text() -> None:
    line = "word " * 30 + "\n"  # 151 characters
    text = line * 40 + "last line without an end"
    starts = grep_text.block_starts(text)
    blocks = grep_text.blocks_of(text, starts)
    assert "".join(blocks) == text and len(blocks) > 2
    assert all(b.endswith("\n") and len(b) >= grep_text.BLOCK_CHARS for b in blocks[:-1])
    assert all(len(b) - len(line) < grep_text.BLOCK_CHARS for b in blocks[:-1])
    assert grep_text.block_starts("") == [0] and grep_text.block_starts("a\n" * 3) == [0]


def write_texts(conn: sqlite3.Connection, texts: dict[str, str]) -> dict[str, int]:
    """Write ``texts`` as files (path -> text) with their grep rows; their file ids."""
    ids = {}
    with transaction(conn):
        for path, text in texts.items():
            sha = hashlib.sha256(text.encode()).hexdigest()
            ids[path] = conn.execute(
                "INSERT INTO files(path, mtime_ns, size_bytes, sha256, indexed_at) "
                "VALUES (?, 0, ?, ?, 0) "
                "ON CONFLICT(path) DO UPDATE SET sha256 = excluded.sha256 RETURNING id",
                (path, len(text), sha),
            ).fetchone()[0]
        rows = [
            grep_text.TextRow(ids[p], hashlib.sha256(t.encode()).hexdigest(), t, [1])
            for p, t in texts.items()
        ]
        grep_text.write_files(conn, rows)
    return ids


def candidate_paths(conn: sqlite3.Connection, literal: str) -> list[str]:
    return [found.path for found in grep_text.candidates(conn, fts_match(literal))]


def test_a_candidate_holds_every_trigram_within_one_block(tmp_path: Path) -> None:
    """``alpha`` and ``omega`` lie in blocks far apart in far.md and on one line in
    near.md: only near.md is a candidate for ``alpha omega`` (a table of a row per file
    names both), with the one block that holds both. Blocks left behind by a cascade and
    rewritten files' old ranges name no file."""
    filler = "filler text of a line\n" * 200
    texts = {
        "far.md": "alpha\n" + filler + "omega\n",
        "near.md": filler + "an alpha omega here\n" + filler,
        "other.md": "nothing\n" + filler,
    }
    conn = open_index(tmp_path / "index.db")
    try:
        write_texts(conn, texts)
        assert candidate_paths(conn, "alpha omega") == ["near.md"]
        assert candidate_paths(conn, "alpha") == ["far.md", "near.md"]
        (near,) = grep_text.candidates(conn, fts_match("alpha omega"))
        assert near.block_count > 2 and len(near.blocks) == 1
        reader = grep_text.BlockReader(conn)
        assert b"an alpha omega here\n" in reader.block(near.blocks[0])
        line = texts["near.md"].count("\n", 0, texts["near.md"].index("an alpha")) + 1
        k = near.blocks[0] - near.first_block
        data = reader.block(near.blocks[0])
        block_lines, _chunk_lines = grep_text.placing_lines(conn, near.file_id)
        assert block_lines[k] + data.count(b"\n", 0, data.index(b"an alpha")) == line
        whole = b"".join(reader.blocks(near.first_block, near.block_count).values())
        assert whole == texts["near.md"].encode()
        # near.md rewritten: its old blocks are unlearned, its new range is above all.
        write_texts(conn, {"near.md": filler + filler + "an ALPHA OMEGA there\n"})
        assert candidate_paths(conn, "alpha omega") == ["near.md"]
        assert candidate_paths(conn, "an alpha omega here") == []
        # A cascade that bypasses the writer leaves far.md's blocks behind: skipped.
        with transaction(conn):
            conn.execute("DELETE FROM files WHERE path = 'far.md'")
        assert candidate_paths(conn, "alpha") == ["near.md"]
        assert candidate_paths(conn, "omega") == ["near.md"]
        write_texts(conn, {"late.md": "omega\n"})  # ids above every range given before
        assert candidate_paths(conn, "omega") == ["late.md", "near.md"]
    finally:
        conn.close()


OLDER_LAYOUTS = {
    "a text and trigram row per file": (
        "CREATE TABLE file_text (id INTEGER PRIMARY KEY AUTOINCREMENT, file_id INTEGER,"
        " sha256 TEXT, text BLOB, chunk_lines TEXT);"
        "CREATE VIRTUAL TABLE file_trigrams USING fts5(text, content='', detail=none,"
        " columnsize=0, tokenize='trigram');"
    ),
    "a text per file, trigram rows per block": (
        "CREATE TABLE grep_text (id INTEGER PRIMARY KEY AUTOINCREMENT, file_id INTEGER,"
        " sha256 TEXT, text BLOB, chunk_lines TEXT, block_starts TEXT, blocks INTEGER);"
        "CREATE INDEX grep_text_blocks ON grep_text(id, blocks, file_id, sha256);"
        "CREATE VIRTUAL TABLE grep_trigrams USING fts5(text, content='', detail=none,"
        " columnsize=0, tokenize='trigram');"
        "INSERT INTO grep_trigrams(rowid, text) VALUES (1, 'needle in an old row');"
    ),
}


@pytest.mark.parametrize("layout", OLDER_LAYOUTS)
def test_an_index_with_older_grep_tables_drops_them_and_rewrites(
    tmp_path: Path, layout: str
) -> None:
    """An index with the grep tables of an older layout: a writer drops them and adds
    these, and every file is stale until the next job writes its rows."""
    conn = open_index(tmp_path / "index.db")
    write_texts(conn, {"a.md": "needle here\n"})
    conn.executescript(
        "DROP TABLE grep_block_trigrams; DROP TABLE grep_blocks; DROP TABLE grep_files;"
        "DROP TABLE grep_dictionaries;" + OLDER_LAYOUTS[layout]
    )
    conn.close()
    conn = open_index(tmp_path / "index.db")
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"grep_files", "grep_blocks", "grep_dictionaries", "grep_block_trigrams"} <= tables
        assert not {"file_text", "file_trigrams", "grep_text", "grep_trigrams"} & tables
        assert grep_text.stale_paths(conn) == {"a.md"}
        write_texts(conn, {"a.md": "needle here\n"})
        assert grep_text.stale_paths(conn) == set()
        assert candidate_paths(conn, "needle") == ["a.md"]
    finally:
        conn.close()


def test_blocks_are_compressed_with_a_dictionary_trained_once_per_index(tmp_path: Path) -> None:
    """A batch with enough text trains a dictionary, stored with its rows; later batches
    compress with the stored one; every block inflates to its text, and a rewritten or
    deleted file's trigram rows are unlearned through it. A small batch in a new index
    compresses without one."""
    conn = open_index(tmp_path / "index.db")
    small = open_index(tmp_path / "small.db")
    try:
        writer = IndexWriter(conn)
        first = grep_text.compressed(conn, prepared_files(AWESOME_COPILOT, 0, 120))
        dictionary = first[0].dictionary
        assert dictionary and all(f.dictionary == dictionary for f in first)
        with transaction(conn):
            writer.write_rows(first, "hash")
        second = grep_text.compressed(conn, prepared_files(AWESOME_COPILOT, 120, 40))
        assert all(f.dictionary == dictionary for f in second)
        with transaction(conn):
            writer.write_rows(second, "hash")
        assert conn.execute("SELECT count(*) FROM grep_dictionaries").fetchone()[0] == 1
        nulls = "SELECT count(*) FROM grep_blocks WHERE dictionary IS NULL"
        assert conn.execute(nulls).fetchone()[0] == 0
        reader = grep_text.BlockReader(conn)
        everything = grep_text.candidates(conn, None)
        assert len(everything) == 160
        texts = {f.rel_path: f.text for f in first + second}
        for found in everything:
            whole = b"".join(reader.blocks(found.first_block, found.block_count).values())
            assert whole == (texts[found.path] or "").encode()
        # The stored blocks take less than the text they hold.
        stored = conn.execute("SELECT sum(length(text)) FROM grep_blocks").fetchone()[0]
        assert stored < 0.5 * sum(len((t or "").encode()) for t in texts.values())
        gone = first[0]
        literal = next(t.strip() for t in (gone.text or "").splitlines() if len(t.strip()) >= 16)
        assert gone.rel_path in candidate_paths(conn, literal[:16])
        writer.delete_files([gone.rel_path])
        assert gone.rel_path not in candidate_paths(conn, literal[:16])

        few = grep_text.compressed(small, prepared_files(AWESOME_COPILOT, 0, 3))
        assert all(f.dictionary == b"" for f in few)
        with transaction(small):
            IndexWriter(small).write_rows(few, "hash")
        assert small.execute("SELECT count(*) FROM grep_dictionaries").fetchone()[0] == 0
        assert small.execute(nulls).fetchone()[0] > 0
    finally:
        conn.close()
        small.close()
