"""The grep rows' writes (rifflux.store.grep_text): a batch of files lands in the trigram
table as one FTS5 segment, not one per file, and stays searchable when rewritten."""

from __future__ import annotations

import hashlib
from pathlib import Path

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


def prepared_files(folder: Path) -> list[PreparedFile]:
    """The first ``FILES`` markdown files of the vendored corpus, chunked."""
    paths = sorted(folder.rglob("*.md"))[:FILES]
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
    """Every file's knowledge rows are written between its chunks and the next file's
    (multi-row DELETEs, which open a savepoint and so flush FTS5's pending postings):
    trigram rows written per file there would leave a segment per file."""
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
            paths = [row[2] for row in grep_text.candidates(conn, match)]
            assert prepared.rel_path in paths
    finally:
        conn.close()
