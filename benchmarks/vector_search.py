"""Semantic search on the memory-mapped vector cache at 20k, 100k and 1M chunks: the exact
int8 scan against the HNSW graph.

Synthetic int8 rows (dim 384) drawn around a few thousand centroids (clustered, as real
embeddings are; 1M rows: 3,000 centroids) are written with the cache's own segment
writer, HNSW graph builder and manifest, in a fresh process (``build``: segment and graph
times, the RSS the graph build adds). Then a fresh process per mode (so its RSS is the
front process's) memory-maps them through the reader the search service uses and times
top-k searches (limit 20: top_k 10 x the default candidate multiplier 2) of queries drawn
around the same centroids: ``exact`` scans every row, ``hnsw`` asks the graph for ``--ef``
candidates and rescores them exactly. ``cpu_p50_ms`` is the searching thread's CPU time
(what other jobs on a shared machine do not inflate); ``recall_at_10`` compares each HNSW
search's top 10 with the exact scan's. ``open_ms``/``open_cpu_s`` is the first map in the
process, which verifies every file's sha256; ``restat_us`` the per-search re-stat of the
mapped files; RSS is split into anonymous and file-backed (mapped) memory.
``--real-db`` does exact vs HNSW on a copy of a real index (published with a graph) with
real queries; ``rows_check_ms`` (service) the one comparison of a fresh cache's rowids
with the database per loaded manifest, and ``rows_check_thorough_ms`` the full identity
comparison of ``rifflux status --check``. Optionally times the ONNX query embedding,
which a real hybrid search adds, and the search service end to end (query embedding,
cache, SQLite) on an existing index.

    .venv/bin/python -m benchmarks.vector_search
    .venv/bin/python -m benchmarks.vector_search --sizes 20000 100000 --onnx-queries 20
    .venv/bin/python -m benchmarks.vector_search --sizes \
        --real-db ~/.cache/rifflux/eval/scifact-76f8ce5360fd218e/index.db \
        --real-queries ../shared/eval/scifact/queries.jsonl
    .venv/bin/python -m benchmarks.vector_search --sizes --service-db /tmp/ac-onnx/index.db
    .venv/bin/python -m benchmarks.vector_search --sizes --publish-db /tmp/ac-onnx/index.db
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import REPO, emit, emit_machine, percentiles

# The query set of benchmarks/index_and_search.py, so the numbers compare.
from benchmarks.index_and_search import QUERIES as SERVICE_QUERIES
from benchmarks.index_and_search import time_searches

# A fresh process of this benchmark, for the build and each measurement.
SELF = [sys.executable, "-m", "benchmarks.vector_search"]
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


def centroid_count(rows: int) -> int:
    """Clusters of ~300 rows, at most 3,000 (1M rows: 3,000 centroids)."""
    return max(16, min(3000, rows // 300))


def centroids_for(rows: int, seed: int) -> np.ndarray:
    centroids = np.random.default_rng(seed).standard_normal((centroid_count(rows), DIM))
    return centroids / np.linalg.norm(centroids, axis=1, keepdims=True)


# Noise of norm ~1 around a unit centroid: rows at cosine ~0.7 to their centroid.
SPREAD = 1.0 / np.sqrt(DIM)


def clustered_rows(rows: int, seed: int) -> np.ndarray:
    """int8 rows (as the cache stores them) drawn around ``centroid_count`` centroids."""
    from rifflux.vectors.quantize import quantize_rows

    centroids = centroids_for(rows, seed)
    rng = np.random.default_rng(seed + 1)
    matrix = np.empty((rows, DIM), dtype=np.int8)
    for start in range(0, rows, BLOCK_ROWS):
        stop = min(rows, start + BLOCK_ROWS)
        around = centroids[rng.integers(0, centroids.shape[0], stop - start)]
        matrix[start:stop] = quantize_rows(around + SPREAD * rng.standard_normal(around.shape))
    return matrix


def clustered_queries(rows: int, queries: int, seed: int) -> np.ndarray:
    """Float queries drawn like the rows of ``clustered_rows(rows, seed)``."""
    centroids = centroids_for(rows, seed)
    rng = np.random.default_rng(seed + 2)
    around = centroids[rng.integers(0, centroids.shape[0], queries)]
    return around + SPREAD * rng.standard_normal(around.shape)


def clustered(rows: int, queries: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    return clustered_rows(rows, seed), clustered_queries(rows, queries, seed)


def build(directory: Path, rows: int, seed: int) -> dict[str, object]:
    """Runs in a fresh process: write one base segment of ``rows`` clustered int8 rows,
    its HNSW graph (timed apart; ``builder_rss_after_graph`` VmHWM is the peak during the
    graph build, the data generation's peak reset before it) and the manifest."""
    from rifflux.vectors.segments import (
        Manifest,
        attach_hnsw,
        write_manifest,
        write_segment,
    )

    started = time.perf_counter()
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    vectors = clustered_rows(rows, seed)
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
    segment_s = time.perf_counter() - started
    # Reset VmHWM (Linux: "5" to clear_refs), so the peak below is the graph build's.
    Path("/proc/self/clear_refs").write_text("5")
    before = proc_status()
    cpu = os.times()
    started = time.perf_counter()
    ref = attach_hnsw(directory, ref, vectors)
    hnsw_s = time.perf_counter() - started
    after = os.times()
    write_manifest(directory, Manifest("benchmark", 0, "synthetic:384", DIM, "benchmark", (ref,)))
    assert ref.hnsw is not None
    return {
        "segment_build_s": round(segment_s, 1),
        "hnsw_build_s": round(hnsw_s, 1),
        "hnsw_build_cpu_s": round((after.user - cpu.user) + (after.system - cpu.system), 1),
        "hnsw_file_mib": round((directory / ref.hnsw).stat().st_size / 2**20, 1),
        "vec_file_mib": round(rows * DIM / 2**20, 1),
        "builder_rss_before_graph": before,
        "builder_rss_after_graph": proc_status(),
    }


def measure(directory: Path, queries: int, seed: int, mode: str, ef: int) -> dict[str, object]:
    """Runs in a fresh process: map the cache (``mode`` exact or hnsw), time searches; for
    hnsw, then recall@10 of each search against the exact scan (after the RSS reading)."""
    from rifflux.vectors.cache import open_view
    from rifflux.vectors.scan import search_segments

    rss_start = proc_status()
    cpu = os.times()
    started = time.perf_counter()
    view = open_view(directory, None if mode == "exact" else ef)
    assert view is not None
    open_ms = (time.perf_counter() - started) * 1000
    after = os.times()
    open_cpu_s = (after.user - cpu.user) + (after.system - cpu.system)
    restat = []
    for _ in range(200):
        t0 = time.perf_counter()
        assert view.changed_file() is None
        restat.append((time.perf_counter() - t0) * 1e6)
    rows = view.live_rows
    qs = clustered_queries(rows, queries + 3, seed)
    for q in qs[:3]:  # warm-up: map the pages
        view.search(q, LIMIT)
    timings, cpu_timings, found = [], [], []
    for q in qs[3:]:
        t0, c0 = time.perf_counter(), time.thread_time()
        hits = view.search(q, LIMIT)
        timings.append((time.perf_counter() - t0) * 1000)
        cpu_timings.append((time.thread_time() - c0) * 1000)
        assert len(hits) == LIMIT
        found.append(hits)
    rss_searches = proc_status()
    report: dict[str, object] = {
        "mode": mode,
        "rows": rows,
        "queries": queries,
        "open_ms": round(open_ms, 1),
        "open_cpu_s": round(open_cpu_s, 2),
        "restat_us": round(statistics.median(restat), 1),
        "ms": percentiles(timings),
        # CPU time of the searching thread: what a search costs without the other jobs
        # that share the machine (wall time above includes waiting for a core).
        "cpu_p50_ms": round(statistics.median(cpu_timings), 2),
        "rss_before_open": rss_start,
        "rss_after_searches": rss_searches,
    }
    if mode == "exact":
        matrix = view.segments[0].vectors
        floor = []
        for _ in range(5):
            t0 = time.perf_counter()
            np.sum(matrix)
            floor.append((time.perf_counter() - t0) * 1000)
        report["np_sum_floor_ms"] = round(statistics.median(floor), 2)
    else:
        exact = [dataclasses.replace(s, graph=None) for s in view.segments]
        recalls = []
        for q, hits in zip(qs[3:], found, strict=True):
            truth = {c.row_id for c in search_segments(exact, q, 10)}
            recalls.append(len(truth & {h.row_id for h in hits[:10]}) / 10)
        report["ef"] = ef
        report["recall_at_10"] = round(float(np.mean(recalls)), 4)
        report["recall_at_10_min"] = round(float(np.min(recalls)), 2)
    return report


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
        "ms": percentiles(timings),
    }


def service_ms(db_path: Path, rounds: int) -> dict[str, object]:
    """Semantic and hybrid p50/p95 through SearchService on an existing index."""
    from rifflux.config import Settings
    from rifflux.search.service import SearchService
    from rifflux.status import index_counts
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
    counts = index_counts(service)
    report["chunks"] = counts["chunks"]
    report["vector_cache"] = counts["vector_cache"]
    service.close()
    return report


def real_index(db_path: Path, queries_file: Path, count: int, ef: int) -> dict[str, object]:
    """Exact vs HNSW on a real index (a copy, published with a graph): p50 and recall@10
    of ``count`` real queries, embedded with the index's model."""
    from rifflux.config import Settings
    from rifflux.embed.factory import make_embedder
    from rifflux.store.connection import open_index
    from rifflux.store.reader import get_metadata
    from rifflux.vectors.cache import open_view
    from rifflux.vectors.publish import publish
    from rifflux.vectors.scan import search_segments
    from rifflux.vectors.segments import vectors_dir

    texts = [json.loads(line)["text"] for line in queries_file.read_text().splitlines()][:count]
    with tempfile.TemporaryDirectory(prefix="rifflux-real-") as tmp:
        db = Path(tmp) / "index.db"
        shutil.copyfile(db_path, db)
        conn = open_index(db)
        model = get_metadata(conn, "embedding_model") or ""
        conn.close()
        backend = "onnx" if model.startswith("onnx:") else "hash"
        embedder = make_embedder(Settings(embedding_backend=backend))
        qs = embedder.embed_batch(texts)
        started = time.perf_counter()
        result = publish(db, source="benchmark", full=True, vector_index="hnsw")
        assert result is not None
        publish_s = time.perf_counter() - started
        exact_view = open_view(vectors_dir(db))
        hnsw_view = open_view(vectors_dir(db), ef)
        assert exact_view is not None and hnsw_view is not None
        report: dict[str, object] = {
            "db": str(db_path),
            "model": model,
            "rows": exact_view.live_rows,
            "queries": len(texts),
            "publish_with_graph_s": round(publish_s, 1),
        }
        for name, view in (("exact", exact_view), ("hnsw", hnsw_view)):
            timings = []
            for q in qs:
                t0 = time.perf_counter()
                view.search(q, LIMIT)
                timings.append((time.perf_counter() - t0) * 1000)
            report[f"{name}_p50_ms"] = round(statistics.median(timings), 2)
        recalls = []
        for q in qs:
            truth = {c.row_id for c in search_segments(exact_view.segments, q, 10)}
            found = {c.row_id for c in hnsw_view.search(q, LIMIT)[:10]}
            recalls.append(len(truth & found) / 10)
        report["ef"] = ef
        report["recall_at_10"] = round(float(np.mean(recalls)), 4)
        report["recall_at_10_min"] = round(float(np.min(recalls)), 2)
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


def child_json(command: list[str]) -> dict[str, object]:
    """Run a fresh process of this script; its last stdout line is a JSON object."""
    child = subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO)
    result: dict[str, object] = json.loads(child.stdout.strip().splitlines()[-1])
    return result


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
    parser.add_argument("--ef", type=int, default=200, help="HNSW search breadth")
    parser.add_argument("--real-db", type=Path, help="exact vs HNSW on a copy of this index")
    parser.add_argument("--real-queries", type=Path, help="JSONL of {'text': ...} queries")
    parser.add_argument("--real-count", type=int, default=300, help="real queries used")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="exact", help=argparse.SUPPRESS)
    args = parser.parse_args()

    from rifflux.logs import configure_logging

    configure_logging("WARNING")
    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.queries, args.seed, args.mode, args.ef)))
        return 0
    if args.build is not None:
        print(json.dumps(build(args.build, args.rows, args.seed)))
        return 0

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rifflux-vectors-"))
    emit_machine(dim=DIM, limit=LIMIT)
    try:
        for rows in args.sizes:
            directory = workdir / f"n{rows}" / "index.db.vectors"
            result: dict[str, object] = {"rows": rows}
            if not directory.exists():
                command = [
                    sys.executable,
                    "-m",
                    "benchmarks.vector_search",
                    "--build",
                    str(directory),
                ]
                command += ["--rows", str(rows), "--seed", str(args.seed)]
                result["build"] = child_json(command)
            queries = args.queries if rows < 1_000_000 else args.queries_large
            for mode in ("exact", "hnsw"):
                command = [
                    sys.executable,
                    "-m",
                    "benchmarks.vector_search",
                    "--measure",
                    str(directory),
                ]
                command += ["--queries", str(queries), "--seed", str(args.seed)]
                command += ["--mode", mode, "--ef", str(args.ef)]
                result[mode] = child_json(command)
            emit("vector_cache", **result)
        if args.real_db and args.real_queries:
            emit(
                "real_index",
                **real_index(args.real_db, args.real_queries, args.real_count, args.ef),
            )
        if args.onnx_queries:
            emit("onnx_query_embedding", **onnx_query_ms(args.onnx_queries))
        if args.service_db:
            emit("service", **service_ms(args.service_db, args.rounds))
        if args.publish_db:
            emit("publish", **publish_ms(args.publish_db, args.rounds))
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
