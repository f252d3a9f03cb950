"""Peak RSS and CPU time of a full vector-cache publish at scale, each in a fresh process.

    nice -n 10 .venv/bin/python -m benchmarks.publish_memory --workdir /tmp/pubmem \
        --rows 800000 --before /work/main

Builds (once, kept in ``--workdir``) a real index of ``--rows`` chunk rows without
indexing a corpus: ``rows / 8`` files of 8 chunks under ``corpus/dNNN/fNNNNNN.md``, each
chunk with a random embed hash and a random int8 row of 384 components, written with
SQL into the schema :func:`rifflux.store.connection.open_index` creates (FTS5 triggers off
while writing: a publish reads no FTS5 row). 789k rows is the 100k-file scale run's size.

Then runs ``publish(full=True)`` (what a first publish, ``rifflux index --repair`` and a
full rewrite by compaction do) in a child process per code version: ``--before PATH``
runs it first with ``PYTHONPATH=PATH`` (an older checkout), then with this checkout. Each
child reports its peak RSS (VmHWM), its anonymous and file-backed RSS at the end, its
CPU seconds (user + system) and wall seconds, and the segments it wrote.

``rewrite``: a full rewrite by compaction (no row changed, ``COMPACT_FRACTION`` set
below 0 in the child, the generation bumped): every row taken from the segments a full
publish by the same code wrote just before, in its own child.

``changes`` (not run by default: it changes the index): the publish of a job that
rewrote 30% of the rows since the last publish, read from the change log, as a large
job's mid-job and final publishes are (a full rewrite: tombstones and new rows exceed
``COMPACT_FRACTION``): a full publish by the same code first, then every row whose id
is 0, 1 or 2 mod 10 gets a new embed hash (logged by the schema's triggers).

``front`` (after the publishes, on the cache the last one left, for each code version):
a reader process's cache status, thorough status (``rifflux status --check``: every
row's identity against the database) and 20 semantic searches, with the same figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import emit, emit_machine
from rifflux.store.connection import _split_sql, open_index
from rifflux.store.schema import SCHEMA_SQL

MODEL, DIM, CHUNKS_PER_FILE = "hash:384", 384, 8
BLOCK_FILES = 5_000

PRELUDE = """
import json, resource, sys, time
from pathlib import Path
import numpy as np
import rifflux
db, mode = Path(sys.argv[1]), sys.argv[2]
started = time.perf_counter()
"""
PUBLISH = """
from rifflux.vectors.publish import publish
result = publish(db, source="bench", full=True, vector_index=mode)
out = {"rows": result.manifest.rows, "segments": [s.rows for s in result.manifest.segments]}
"""
REWRITE = """
import sqlite3
from rifflux.vectors import publish as publish_module
with sqlite3.connect(db) as conn:
    conn.execute("UPDATE index_metadata SET value = CAST(value AS INTEGER) + 1 "
                 "WHERE key = 'generation'")
publish_module.COMPACT_FRACTION = -1.0
result = publish_module.publish(db, source="bench", vector_index=mode)
out = {"action": result.action, "rows": result.manifest.rows,
       "segments": [s.rows for s in result.manifest.segments]}
"""
CHANGES = """
from rifflux.vectors.publish import publish
result = publish(db, source="bench", vector_index=mode)
out = {"action": result.action, "rows": result.manifest.rows, "rows_read": result.rows_read,
       "segments": [s.rows for s in result.manifest.segments]}
"""
FRONT = """
from rifflux.store.connection import open_index_readonly
from rifflux.vectors.cache import VectorCache
conn = open_index_readonly(db)
cache = VectorCache(vector_index=mode)
out = {"status": cache.status(conn, db)["state"],
       "thorough": cache.status(conn, db, thorough=True)["state"]}
queries = np.random.default_rng(3).standard_normal((20, 384))
hits = [cache.search(conn, db, "hash:384", q, 10) for q in queries]
out["hits"] = sum(len(h) for h in hits)
"""
EPILOGUE = """
wall = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_SELF)
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
mib = lambda key: round(int(status[key].split()[0]) / 1024)
print(json.dumps({"peak_rss_mib": mib("VmHWM"), "end_rss_anon_mib": mib("RssAnon"),
                  "end_rss_file_mib": mib("RssFile"),
                  "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "wall_s": round(wall, 2),
                  "code": str(Path(rifflux.__file__).parents[1]), **out}))
"""


def build_index(db_path: Path, rows: int) -> None:
    """A real index of ``rows`` chunk rows with random int8 vectors (see the docstring)."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    open_index(db_path).close()
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    triggers = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name NOT LIKE 'chunk_changes%'"
    ).fetchall()
    for (name,) in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    rng = np.random.default_rng(22)
    files = rows // CHUNKS_PER_FILE
    for first in range(0, files, BLOCK_FILES):
        ids = range(first, min(first + BLOCK_FILES, files))
        conn.executemany(
            "INSERT INTO files(id, path, mtime_ns, size_bytes, sha256, indexed_at) "
            "VALUES (?, ?, 0, 0, '', 0)",
            ((f + 1, f"corpus/d{f % 997:03d}/f{f:06d}.md") for f in ids),
        )
        count = len(ids) * CHUNKS_PER_FILE
        vectors = rng.integers(-127, 128, size=(count, DIM), dtype=np.int8)
        hashes = rng.bytes(32 * count)
        chunk_rows = [
            (
                f"{f}-{k}",
                f + 1,
                k,
                hashes[32 * i : 32 * i + 32].hex(),
            )
            for i, (f, k) in enumerate((f, k) for f in ids for k in range(CHUNKS_PER_FILE))
        ]
        conn.executemany(
            "INSERT INTO chunks(chunk_id, file_id, chunk_index, heading_path, content, "
            "embed_sha256) VALUES (?, ?, ?, '', '', ?)",
            chunk_rows,
        )
        conn.executemany(
            "INSERT INTO embeddings(chunk_id, model, dim, vec) VALUES (?, ?, ?, ?)",
            ((r[0], MODEL, DIM, vectors[i].tobytes()) for i, r in enumerate(chunk_rows)),
        )
    for statement in _split_sql(SCHEMA_SQL):
        if statement.lstrip().upper().startswith("CREATE TRIGGER"):
            conn.execute(statement)
    conn.execute(
        "INSERT OR REPLACE INTO index_metadata(key, value) VALUES "
        "('embedding_model', ?), ('embedding_dim', ?)",
        (MODEL, str(DIM)),
    )
    conn.execute(
        "UPDATE index_metadata SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'"
    )
    conn.execute("COMMIT")
    conn.close()


def run_child(db_path: Path, mode: str, pythonpath: str | None, step: str) -> dict[str, object]:
    """One step in a fresh child process: ``publish`` (a full publish, the cache removed
    first), ``rewrite`` (a full rewrite by compaction of the cache a ``publish`` by the
    same code just wrote: the generation bumped, ``COMPACT_FRACTION`` below 0, so every
    row is rewritten from the segments) or ``front`` (a reader: cache status, thorough
    status, 20 semantic searches, on the cache the last publish left)."""
    if step == "publish":
        shutil.rmtree(f"{db_path}.vectors", ignore_errors=True)
    if step in ("rewrite", "changes"):
        run_child(db_path, mode, pythonpath, "publish")
    if step == "changes":
        with sqlite3.connect(db_path, isolation_level=None) as conn:
            conn.execute("BEGIN IMMEDIATE")
            # The text index holds none of these rows (build_index): only the change log's
            # triggers may see the update.
            triggers = conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                "AND name NOT LIKE 'chunk_changes%'"
            ).fetchall()
            for name, _ in triggers:
                conn.execute(f"DROP TRIGGER {name}")
            conn.execute(
                "UPDATE chunks SET embed_sha256 = lower(hex(randomblob(32))) WHERE id % 10 < 3"
            )
            for _, sql in triggers:
                conn.execute(sql)
            conn.execute(
                "UPDATE index_metadata SET value = CAST(value AS INTEGER) + 1 "
                "WHERE key = 'generation'"
            )
            conn.execute("COMMIT")
    steps = {"publish": PUBLISH, "rewrite": REWRITE, "changes": CHANGES, "front": FRONT}
    code = PRELUDE + steps[step] + EPILOGUE
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    else:
        env.pop("PYTHONPATH", None)
    out = subprocess.run(
        [sys.executable, "-c", code, str(db_path), mode],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        # Not the checkout's root: ``-c`` puts the working directory first on sys.path.
        cwd=db_path.parent if pythonpath else Path(__file__).resolve().parents[1],
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=800_000)
    parser.add_argument("--mode", default="exact", help="vector_index: exact, auto, hnsw")
    parser.add_argument("--before", help="an older checkout, run first with PYTHONPATH")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--steps", nargs="*", default=["publish", "rewrite", "front"])
    args = parser.parse_args()
    db_path = args.workdir / f"index-{args.rows}" / "index.db"
    emit_machine(rows=args.rows, mode=args.mode, before=args.before)
    if not db_path.exists():
        started = time.perf_counter()
        build_index(db_path, args.rows)
        emit("build", db=str(db_path), rows=args.rows, seconds=round(time.perf_counter() - started))
    versions = ([("before", args.before)] if args.before else []) + [("after", None)]
    for step in args.steps:
        for i in range(args.repeat):
            for name, path in versions:
                result = run_child(db_path, args.mode, path, step)
                emit("publish_memory", step=step, side=name, round=i + 1, **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
