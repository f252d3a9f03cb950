"""Index database size against corpus text, with the bytes of every table and index.

Generates the corpus with ``benchmarks.scale_corpus`` if ``WORKDIR/corpus`` is missing (25k files
≈ 200k chunks by default), indexes it in-process with the hash embedder into ``--db``
(default ``WORKDIR/index.db``) if that file is missing, checkpoints the WAL into the main
file (so the figure is the database, not a leftover log), and prints the corpus text
bytes (the sum of the file sizes), the main file's bytes, their ratio, and the bytes of
every table and index (SQLite's ``dbstat`` virtual table; an FTS5 table's shadow tables
are grouped under it).

    nice -n 10 .venv/bin/python -m benchmarks.db_size --workdir /work/bench-dbsize --out size.json
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import rifflux
from benchmarks.harness import DEFAULT_CORPUS, emit, machine
from benchmarks.scale_corpus import generate
from rifflux.config import Settings
from rifflux.index.indexer import Indexer

FTS5_SHADOWS = ("_data", "_idx", "_docsize", "_content", "_config")


def corpus_bytes(corpus: Path) -> tuple[int, int]:
    """(files, bytes) of the markdown under ``corpus``."""
    sizes = [p.stat().st_size for p in corpus.rglob("*.md")]
    return len(sizes), sum(sizes)


def owner(name: str, fts_tables: set[str]) -> str:
    """The FTS5 table a shadow table belongs to, else ``name``."""
    for shadow in FTS5_SHADOWS:
        base = name.removesuffix(shadow)
        if base != name and base in fts_tables:
            return base
    return name


def breakdown(db: Path) -> dict[str, Any]:
    """Main file bytes after a checkpoint, and the bytes of every table and index."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        fts_tables = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%fts5%'"
            )
        }
        kinds = dict(conn.execute("SELECT name, type FROM sqlite_master").fetchall())
        per_object: dict[str, int] = {}
        for name, size in conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
            per_object[name] = int(size)
        grouped: dict[str, int] = {}
        for name, size in per_object.items():
            key = owner(name, fts_tables)
            if key != name:
                key = f"{key} (fts5)"
            elif kinds.get(name) == "index" or name.startswith("sqlite_autoindex"):
                key = f"{name} (index)"
            grouped[key] = grouped.get(key, 0) + size
        freelist = conn.execute("PRAGMA freelist_count").fetchone()[0] * page_size
        counts = {
            table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            for table in ("files", "chunks", "embeddings")
        }
        blob_bytes = conn.execute("SELECT COALESCE(SUM(length(vec)), 0) FROM embeddings")
        vec_bytes = blob_bytes.fetchone()[0]
    finally:
        conn.close()
    return {
        "db_bytes": db.stat().st_size,
        "page_size": page_size,
        "freelist_bytes": freelist,
        "rows": counts,
        "vector_blob_bytes": vec_bytes,
        "objects": dict(sorted(grouped.items(), key=lambda kv: -kv[1])),
        "shadow_tables": dict(sorted(per_object.items(), key=lambda kv: -kv[1])),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/work/bench-dbsize"))
    parser.add_argument("--db", type=Path, help="index (default: WORKDIR/index.db)")
    parser.add_argument("--files", type=int, default=25_000)
    parser.add_argument("--source", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--out", type=Path, help="write the JSON here (the log goes to stdout)")
    args = parser.parse_args()
    corpus = args.workdir / "corpus"
    db = args.db or args.workdir / "index.db"
    out: dict[str, Any] = {
        "machine": machine(),
        "rifflux": rifflux.__file__,
        "sqlite": sqlite3.sqlite_version,
        "corpus": str(corpus),
        "db": str(db),
    }
    if not corpus.is_dir():
        started = time.perf_counter()
        generate(corpus, args.files, source=args.source)
        out["generate_s"] = round(time.perf_counter() - started, 1)
    if not db.exists():
        settings = Settings(db_path=db, base_dir=corpus, embedding_backend="hash")
        started = time.perf_counter()
        Indexer(settings).run([corpus])
        out["index_s"] = round(time.perf_counter() - started, 1)
    out["corpus_files"], out["corpus_text_bytes"] = corpus_bytes(corpus)
    out.update(breakdown(db))
    out["ratio"] = round(out["db_bytes"] / out["corpus_text_bytes"], 2)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    emit("db_size", **out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
