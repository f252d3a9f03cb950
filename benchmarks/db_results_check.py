"""Same results from two versions of Rifflux, each indexing the same corpus its own way.

A storage change (issue 22: int8 vector rows, index and page changes) must not change a
single search result. This script indexes one generated corpus (``scale_corpus.py``,
400 files ≈ 3-4k chunks by default) twice, in-process with the hash embedder: once with
the source tree given as ``--before`` (for example ``git archive main | tar -x -C DIR``)
and once with this checkout, each in its own process and its own database; then runs
~100 realistic queries (runs of 2-6 words lifted from the corpus, 20% quoted as phrases)
in lexical, semantic and hybrid mode, top 10, query cache off, with each version against
its own database, and compares every result field by field (paths, chunk ids, scores,
``score_breakdown``). Prints the databases' sizes (main file after a checkpoint) and
exits 1 on the first difference.

    nice -n 10 .venv/bin/python benchmarks/db_results_check.py --before /tmp/rifflux-main
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORD = re.compile(r"[A-Za-z]{2,}")
MODES = ("lexical", "semantic", "hybrid")


def make_queries(corpus: Path, count: int, seed: int) -> list[str]:
    """Runs of 2-6 consecutive words of random files, 20% quoted as phrases."""
    rng = random.Random(seed)
    files = sorted(corpus.rglob("*.md"))
    queries: list[str] = []
    while len(queries) < count:
        words = WORD.findall(rng.choice(files).read_text(encoding="utf-8"))
        n = rng.randint(2, 6)
        if len(words) < n:
            continue
        start = rng.randrange(len(words) - n + 1)
        text = " ".join(w.lower() for w in words[start : start + n])
        queries.append(f'"{text}"' if rng.random() < 0.2 else text)
    return queries


def dump(corpus: Path, db: Path, queries_path: Path, out: Path) -> None:
    """Index ``corpus`` into ``db`` (if missing) and write every query's results to ``out``
    (runs in the version under test, imported from PYTHONPATH)."""
    from rifflux.config import Settings
    from rifflux.index.indexer import Indexer
    from rifflux.search.service import SearchService

    settings = Settings(db_path=db, base_dir=corpus, embedding_backend="hash", query_cache_size=0)
    if not db.exists():
        Indexer(settings).run([corpus])
    queries = json.loads(queries_path.read_text())
    service = SearchService(settings)
    try:
        results = {
            f"{mode}|{query}": service.search(query, top_k=10, mode=mode)
            for query in queries
            for mode in MODES
        }
    finally:
        service.close()
    out.write_text(json.dumps(results, sort_keys=True))


def main_bytes(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return db.stat().st_size


def run_version(source: Path, args: argparse.Namespace, name: str) -> tuple[dict[str, Any], int]:
    db = args.workdir / f"{name}.db"
    out = args.workdir / f"{name}.json"
    env = {**os.environ, "PYTHONPATH": f"{source}{os.pathsep}{HERE}"}
    env = {k: v for k, v in env.items() if not k.startswith("RIFFLUX_")}
    subprocess.run(
        [
            sys.executable,
            __file__,
            "--dump",
            str(args.corpus),
            str(db),
            str(args.queries_file),
            str(out),
        ],
        check=True,
        env=env,
    )
    return json.loads(out.read_text()), main_bytes(db)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="source tree of the version to compare")
    parser.add_argument("--workdir", type=Path, default=Path("/work/bench-dbsize/check"))
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--dump", nargs=4, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dump:
        dump(*args.dump)
        return 0
    if args.before is None:
        parser.error("--before SOURCE_TREE is required")
    from scale_corpus import generate

    args.workdir.mkdir(parents=True, exist_ok=True)
    args.corpus = args.workdir / "corpus"
    if not args.corpus.is_dir():
        generate(args.corpus, args.files)
    queries = make_queries(args.corpus, args.queries, args.seed)
    args.queries_file = args.workdir / "queries.json"
    args.queries_file.write_text(json.dumps(queries))
    for name in ("before", "after"):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{args.workdir / name}.db{suffix}").unlink(missing_ok=True)
    before, before_bytes = run_version(args.before.resolve(), args, "before")
    after, after_bytes = run_version(HERE.parent, args, "after")
    chunks = sqlite3.connect(args.workdir / "after.db").execute("SELECT count(*) FROM chunks")
    print(f"corpus {args.corpus}: {chunks.fetchone()[0]} chunks, {len(queries)} queries")
    print(f"database bytes: before {before_bytes:,}, after {after_bytes:,}")
    differ = [key for key in before if before[key] != after.get(key)]
    empty = sum(1 for key in before if not before[key])
    print(f"{len(before)} searches compared ({empty} with no result), {len(differ)} differ")
    for key in differ[:5]:
        print(f"  differs: {key}")
    return 1 if differ or before.keys() != after.keys() else 0


if __name__ == "__main__":
    sys.exit(main())
