"""Semantic search on the memory-mapped vector cache at 20k, 100k and 1M chunks.

Synthetic L2-normalised float32 vectors (dim 384) are written with the cache's own
segment writer and manifest, then a fresh process (so its RSS is the front process's)
memory-maps them through the reader the search service uses and times top-k searches
(limit 20: top_k 10 x the default candidate multiplier 2). The floor is one ``np.sum``
pass over the same memory-mapped matrix (memory bandwidth), measured in the same run.
``open_ms``/``open_cpu_s`` is the first map in the process, which verifies every file's
sha256; ``reopen_ms`` a second map (files already verified by this process);
``restat_us`` the per-search re-stat of the mapped files; ``rows_check_ms`` (service)
the one comparison of a fresh cache's rowids with the database per loaded manifest, and
``rows_check_thorough_ms`` the full identity comparison of ``rifflux status --check``.
Optionally times the ONNX query embedding, which a real hybrid search adds, and the
search service end to end (query embedding, cache, SQLite) on an existing index.

    .venv/bin/python benchmarks/vector_search.py
    .venv/bin/python benchmarks/vector_search.py --sizes 20000 100000 --onnx-queries 20
    .venv/bin/python benchmarks/vector_search.py --sizes --service-db /tmp/ac-onnx/index.db
    .venv/bin/python benchmarks/vector_search.py --sizes --publish-db /tmp/ac-onnx/index.db
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The query set of benchmarks/index_and_search.py, so the numbers compare.
from index_and_search import QUERIES as SERVICE_QUERIES
from index_and_search import percentile, time_searches

DIM = 384
LIMIT = 20
# Random rows are generated and normalised this many at a time.
BLOCK_ROWS = 100_000


def proc_status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon and RssFile of this process, in MiB."""
    wanted = ("VmRSS", "VmHWM", "RssAnon", "RssFile")
    out: dict[str, int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in wanted:
            out[f"{name}_mib"] = round(int(value.split()[0]) / 1024)
    return out


def machine() -> dict[str, object]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "mem_gib": round(mem_kib / 2**20, 1),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "load_avg": os.getloadavg(),
    }


def build(directory: Path, rows: int, seed: int) -> float:
    """Write one base segment of ``rows`` random unit vectors and publish its manifest."""
    from rifflux.vectors.segments import Manifest, normalize_rows, write_manifest, write_segment

    started = time.perf_counter()
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    vectors = np.empty((rows, DIM), dtype=np.float32)
    for start in range(0, rows, BLOCK_ROWS):
        stop = min(rows, start + BLOCK_ROWS)
        vectors[start:stop] = normalize_rows(rng.standard_normal((stop - start, DIM)))
    ids = np.arange(1, rows + 1, dtype=np.int64)
    # Ten chunks per file, paths sorted: the order the publisher writes rows in.
    paths = [f"docs/d{i // 10:07d}.md" for i in range(rows)]
    ref = write_segment(
        directory,
        0,
        vectors,
        ids,
        rng.integers(-(2**62), 2**62, rows),
        paths,
        ids % 10,
    )
    write_manifest(directory, Manifest("benchmark", 0, "synthetic:384", DIM, "benchmark", (ref,)))
    return time.perf_counter() - started


def measure(directory: Path, queries: int, seed: int) -> dict[str, object]:
    """Runs in a fresh process: map the cache, time searches and the np.sum floor."""
    from rifflux.vectors.cache import open_view

    rss_start = proc_status()
    cpu = os.times()
    started = time.perf_counter()
    view = open_view(directory)
    assert view is not None
    open_ms = (time.perf_counter() - started) * 1000
    after = os.times()
    open_cpu_s = (after.user - cpu.user) + (after.system - cpu.system)
    started = time.perf_counter()
    assert open_view(directory) is not None
    reopen_ms = (time.perf_counter() - started) * 1000
    restat = []
    for _ in range(200):
        t0 = time.perf_counter()
        assert view.changed_file() is None
        restat.append((time.perf_counter() - t0) * 1e6)
    rng = np.random.default_rng(seed)
    qs = rng.standard_normal((queries + 3, DIM)).astype(np.float32)
    for q in qs[:3]:  # warm-up: map the pages
        view.search(q, LIMIT)
    timings = []
    for q in qs[3:]:
        t0 = time.perf_counter()
        hits = view.search(q, LIMIT)
        timings.append((time.perf_counter() - t0) * 1000)
        assert len(hits) == LIMIT
    matrix = view.segments[0].vectors
    floor = []
    for _ in range(5):
        t0 = time.perf_counter()
        np.sum(matrix)
        floor.append((time.perf_counter() - t0) * 1000)
    p50 = statistics.median(timings)
    floor_ms = statistics.median(floor)
    return {
        "rows": view.live_rows,
        "matrix_mib": round(matrix.nbytes / 2**20),
        "queries": queries,
        "open_ms": round(open_ms, 1),
        "open_cpu_s": round(open_cpu_s, 2),
        "reopen_ms": round(reopen_ms, 1),
        "restat_us": round(statistics.median(restat), 1),
        "p50_ms": round(p50, 2),
        "p95_ms": round(percentile(timings, 0.95), 2),
        "np_sum_floor_ms": round(floor_ms, 2),
        "p50_over_floor": round(p50 / floor_ms, 2),
        "rss_before_open": rss_start,
        "rss_after_searches": proc_status(),
    }


def onnx_query_ms(count: int) -> dict[str, object]:
    """Time the ONNX embedding of single queries (what a hybrid search pays on top)."""
    from rifflux.config import Settings
    from rifflux.embed.factory import make_embedder

    embedder = make_embedder(Settings(embedding_backend="onnx"))
    embedder.embed_batch(["warm up"])
    timings = []
    for i in range(count):
        t0 = time.perf_counter()
        embedder.embed_batch([SERVICE_QUERIES[i % len(SERVICE_QUERIES)]])
        timings.append((time.perf_counter() - t0) * 1000)
    return {
        "model": embedder.label,
        "n": count,
        "p50_ms": round(statistics.median(timings), 2),
        "p95_ms": round(percentile(timings, 0.95), 2),
    }


def service_ms(db_path: Path, rounds: int) -> dict[str, object]:
    """Semantic and hybrid p50/p95 through SearchService on an existing index."""
    from rifflux.config import Settings
    from rifflux.search.service import SearchService
    from rifflux.store.connection import open_index
    from rifflux.store.reader import get_metadata

    conn = open_index(db_path)
    model = get_metadata(conn, "embedding_model") or ""
    conn.close()
    backend = "onnx" if model.startswith("onnx:") else "hash"
    service = SearchService(Settings(db_path=db_path, embedding_backend=backend))
    report: dict[str, object] = {"db": str(db_path), "model": model}
    report.update(time_searches(service, ("semantic", "hybrid"), rounds))
    from rifflux.vectors.cache import open_view, rows_mismatch
    from rifflux.vectors.segments import vectors_dir

    view = open_view(vectors_dir(db_path))
    assert view is not None
    for thorough in (False, True):
        checks = []
        for _ in range(5):
            t0 = time.perf_counter()
            assert rows_mismatch(service.connection(), view, thorough=thorough) is None
            checks.append((time.perf_counter() - t0) * 1000)
        name = "rows_check_thorough_ms" if thorough else "rows_check_ms"
        report[name] = round(statistics.median(checks), 1)
    counts = service.counts()
    report["chunks"] = counts["chunks"]
    report["vector_cache"] = counts["vector_cache"]
    service.close()
    return report


def publish_ms(db_path: Path, rounds: int) -> dict[str, object]:
    """Full and no-op publishes on a copy of an index (CPU seconds and wall ms, p50)."""
    from rifflux.vectors.publish import publish

    with tempfile.TemporaryDirectory(prefix="rifflux-publish-") as tmp:
        db = Path(tmp) / "index.db"
        shutil.copyfile(db_path, db)
        walls, cpus = [], []
        for _ in range(rounds):
            shutil.rmtree(f"{db}.vectors", ignore_errors=True)
            c0, t0 = os.times(), time.perf_counter()
            publish(db, source="benchmark")
            walls.append((time.perf_counter() - t0) * 1000)
            c1 = os.times()
            cpus.append((c1.user - c0.user) + (c1.system - c0.system))
        noop = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            result = publish(db, source="benchmark")
            noop.append((time.perf_counter() - t0) * 1000)
            assert result is not None and result.action == "unchanged"
    return {
        "db": str(db_path),
        "full_publish_wall_ms": round(statistics.median(walls), 1),
        "full_publish_cpu_s": round(statistics.median(cpus), 3),
        "noop_publish_first_ms": round(noop[0], 1),
        "noop_publish_p50_ms": round(statistics.median(noop), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[20_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200, help="queries per size below 1M")
    parser.add_argument("--queries-large", type=int, default=50, help="queries at >= 1M rows")
    parser.add_argument("--onnx-queries", type=int, default=0, help="time ONNX query embedding")
    parser.add_argument("--service-db", type=Path, help="also time SearchService on this index")
    parser.add_argument("--rounds", type=int, default=5, help="passes over the service queries")
    parser.add_argument("--publish-db", type=Path, help="time publishes on a copy of this index")
    parser.add_argument("--workdir", type=Path, help="keep the caches here (default: temp dir)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    from rifflux.logs import configure_logging

    configure_logging("WARNING")
    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.queries, args.seed + 1)))
        return 0

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rifflux-vectors-"))
    report: dict[str, object] = {"machine": machine(), "dim": DIM, "limit": LIMIT, "sizes": []}
    try:
        for rows in args.sizes:
            directory = workdir / f"n{rows}" / "index.db.vectors"
            build_s = build(directory, rows, args.seed) if not directory.exists() else None
            queries = args.queries if rows < 1_000_000 else args.queries_large
            command = [sys.executable, __file__, "--measure", str(directory)]
            command += ["--queries", str(queries), "--seed", str(args.seed)]
            child = subprocess.run(
                command,
                check=True,
                capture_output=True,
                text=True,
            )
            result = json.loads(child.stdout.strip().splitlines()[-1])
            result["build_s"] = round(build_s, 1) if build_s is not None else None
            report["sizes"].append(result)  # type: ignore[attr-defined]
            print(json.dumps(result), file=sys.stderr)
        if args.onnx_queries:
            report["onnx_query_embedding"] = onnx_query_ms(args.onnx_queries)
        if args.service_db:
            report["service"] = service_ms(args.service_db, args.rounds)
        if args.publish_db:
            report["publish"] = publish_ms(args.publish_db, args.rounds)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
