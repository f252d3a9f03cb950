"""The vector cache publish after one edited file, at a generated corpus's scale.

Generates ``--files`` markdown files with ``benchmarks.scale_corpus`` (deterministic) unless the
work directory has them, indexes them in-process (hash embedder, ``--vector-index``,
default exact), then ``--edits`` times: rewrites one file, re-indexes in-process with
the indexer's own publish turned off, and times one :func:`~rifflux.vectors.publish.
publish` alone. Prints per edit the publish's seconds, its action, the rows it added and
removed, and the database rows it read (``rows_read``; a Rifflux whose
``PublishResult`` has no such field lists every vector row: printed as ``all``).

    nice -n 10 .venv/bin/python -m benchmarks.publish_delta --files 10000 \
        --workdir /tmp/publish-delta

The corpus and the index are kept in ``--workdir``, so a second run (another build of
Rifflux, e.g. with ``PYTHONPATH`` at an older checkout) measures the same index.

``--replicate N`` makes the index N times larger without indexing N times the files:
right after indexing, it copies every file's rows (files, chunks, vectors) N - 1 times
under the prefixes ``copy1/`` ... (outside the indexed root, so the edits' jobs leave
them alone), with the FTS5 triggers off while it copies (a publish reads no FTS5 row).
10k files × 10 is 784,490 vector rows, the scale run's 100k-file index size.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import rifflux.index.indexer as indexer_module
from benchmarks.harness import DEFAULT_CORPUS, emit, emit_machine
from benchmarks.scale_corpus import generate
from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.store.connection import _split_sql
from rifflux.store.schema import SCHEMA_SQL
from rifflux.vectors.publish import publish


def replicate(db_path: Path, copies: int) -> int:
    """Copy the rows of every file under ``corpus/`` ``copies - 1`` times; rows after."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("BEGIN IMMEDIATE")
    for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name NOT LIKE 'chunk_changes%'"
    ).fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    for k in range(1, copies):
        prefix, suffix = f"copy{k}/", f"-k{k}"
        conn.execute(
            "INSERT INTO files(path, mtime_ns, size_bytes, sha256, indexed_at) SELECT "
            "? || path, mtime_ns, size_bytes, sha256, indexed_at FROM files "
            "WHERE path LIKE 'corpus/%' ORDER BY path",
            (prefix,),
        )
        conn.execute(
            "INSERT INTO chunks(chunk_id, file_id, chunk_index, heading_path, content, "
            "embed_sha256, headings) SELECT c.chunk_id || ?, n.id, c.chunk_index, "
            "c.heading_path, c.content, c.embed_sha256, c.headings FROM files f "
            "JOIN chunks c ON c.file_id = f.id JOIN files n ON n.path = ? || f.path "
            "WHERE f.path LIKE 'corpus/%' ORDER BY n.id, c.chunk_index",
            (suffix, prefix),
        )
        conn.execute(
            "INSERT INTO embeddings(chunk_id, model, dim, vec) SELECT e.chunk_id || ?, "
            "e.model, e.dim, e.vec FROM embeddings e JOIN chunks c ON c.chunk_id = e.chunk_id "
            "JOIN files f ON f.id = c.file_id WHERE f.path LIKE 'corpus/%'",
            (suffix,),
        )
    for statement in _split_sql(SCHEMA_SQL):
        if statement.lstrip().upper().startswith("CREATE TRIGGER"):
            conn.execute(statement)
    conn.execute(
        "UPDATE index_metadata SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'"
    )
    conn.execute("COMMIT")
    rows = int(conn.execute("SELECT count(*) FROM embeddings").fetchone()[0])
    conn.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--edits", type=int, default=5)
    parser.add_argument("--vector-index", default="exact")
    parser.add_argument("--source", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--replicate", type=int, default=1)
    args = parser.parse_args()

    corpus = args.workdir / "corpus"
    settings = Settings(
        db_path=args.workdir / "index" / "index.db",
        base_dir=args.workdir,
        embedding_backend="hash",
        vector_index=args.vector_index,
    )
    emit_machine(files=args.files, rifflux=str(Path(indexer_module.__file__).parents[1]))
    if not corpus.exists():
        started = time.perf_counter()
        generate(corpus, args.files, 13, args.source)
        emit("generate", files=args.files, seconds=round(time.perf_counter() - started, 1))
    if not settings.db_path.exists():
        started = time.perf_counter()
        report = Indexer(settings).run([corpus])
        emit(
            "index",
            files=report.files_indexed,
            chunks=report.chunks_written,
            seconds=round(time.perf_counter() - started, 1),
        )
        if args.replicate > 1:
            started = time.perf_counter()
            rows = replicate(settings.db_path, args.replicate)
            emit("replicate", copies=args.replicate, rows=rows)
    # Bring the cache to the index's state first (and, on an index written by an older
    # Rifflux, take its one full listing), so each edit's publish is its own.
    started = time.perf_counter()
    first = publish(settings.db_path, source="benchmark", vector_index=args.vector_index)
    emit(
        "first_publish",
        action=first.action if first else None,
        seconds=round(time.perf_counter() - started, 2),
    )

    # The edits' publishes are timed alone: the indexer's own publish is turned off.
    indexer_module.publish_quietly = lambda *a, **k: None  # type: ignore[assignment]
    files = sorted(corpus.rglob("*.md"))
    seconds = []
    for i in range(args.edits):
        victim = files[(i * 7919) % len(files)]
        victim.write_text(victim.read_text() + f"\n\nEdit {i} of {time.time()} adds a line.\n")
        Indexer(settings).run([corpus])
        started = time.perf_counter()
        result = publish(settings.db_path, source="benchmark", vector_index=args.vector_index)
        took = time.perf_counter() - started
        seconds.append(took)
        assert result is not None
        rows_read = getattr(result, "rows_read", None)
        emit(
            "edit_publish",
            file=str(victim.relative_to(corpus)),
            seconds=round(took, 3),
            action=result.action,
            rows_added=result.rows_added,
            rows_removed=result.rows_removed,
            rows_read="all" if rows_read is None else rows_read,
            rows=result.manifest.rows,
        )
    emit(
        "publish_after_one_edit",
        rows=result.manifest.rows,
        median_s=round(statistics.median(seconds), 3),
        min_s=round(min(seconds), 3),
        edits=args.edits,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
