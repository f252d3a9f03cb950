"""What the CJK bigram side table (chunks_cjk, rifflux.store.cjk) costs an index.

Indexes a corpus in-process with hash embeddings, then reports the chunks with CJK text,
the side table's rows, and the database size (after VACUUM) with the side table and with
it dropped, plus the indexing time. Run it under a tree without the side table
(``PYTHONPATH=/path/to/older/checkout``) for the "before" indexing time.

    .venv/bin/python benchmarks/cjk_overhead.py --corpus ../shared/corpora/awesome-copilot
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.search.lexical import lexical_search
from rifflux.store.connection import open_index_readonly

# Words that occur in awesome-copilot's Japanese, Korean and Chinese files, and English ones.
CJK_QUERIES = ("確認", "エージェント", "에이전트", "実行 セッション", "作成", "信用风险")
LATIN_QUERIES = ("security review checklist", "docker image size", "unit tests in python")
REPEATS = 20

REPO = Path(__file__).resolve().parents[1]


def vacuumed_size(db: Path) -> int:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.close()
    return db.stat().st_size


def query_latency(db: Path) -> dict[str, float]:
    """p50 milliseconds of a top-20 lexical search, CJK and English queries."""
    conn = open_index_readonly(db)
    out = {}
    for name, queries in (("cjk", CJK_QUERIES), ("latin", LATIN_QUERIES)):
        times = []
        for _ in range(REPEATS):
            for query in queries:
                started = time.perf_counter()
                lexical_search(conn, query, 20)
                times.append(1000 * (time.perf_counter() - started))
        out[name] = round(sorted(times)[len(times) // 2], 2)
    conn.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus", type=Path, default=REPO.parent / "shared/corpora/awesome-copilot"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "index" / "index.db"
        settings = Settings(db_path=db, base_dir=args.corpus, embedding_backend="hash")
        started = time.perf_counter()
        report = Indexer(settings).run([args.corpus])
        elapsed = time.perf_counter() - started
        conn = sqlite3.connect(db)
        chunks = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        has_side = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_cjk'").fetchone()
        side_rows = (
            conn.execute("SELECT COUNT(*) FROM chunks_cjk").fetchone()[0] if has_side else None
        )
        conn.close()
        result: dict[str, object] = {
            "machine": f"{platform.machine()} {platform.python_version()}",
            "corpus": str(args.corpus),
            "files": report.files_indexed,
            "chunks": chunks,
            "index_seconds": round(elapsed, 2),
            "side_table": bool(has_side),
            "side_rows": side_rows,
        }
        result["lexical_p50_ms"] = query_latency(db)
        with_side = vacuumed_size(db)
        result["db_bytes"] = with_side
        if has_side:
            copy = Path(tmp) / "without.db"
            shutil.copyfile(db, copy)
            conn = sqlite3.connect(copy)
            conn.executescript(
                "DROP TRIGGER chunks_cjk_delete; DROP TRIGGER chunks_cjk_update; "
                "DROP TABLE chunks_cjk;"
            )
            conn.close()
            without = vacuumed_size(copy)
            result["db_bytes_without_side_table"] = without
            result["overhead_bytes"] = with_side - without
            result["overhead_pct"] = round(100 * (with_side - without) / without, 3)
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
