"""A scale run on a generated corpus: through the real MCP server (``--mcp``), or the queue.

``--mcp`` (the issue-22 benchmark, ``benchmarks.scale_mcp``): the server and ``rifflux worker``
as ``make run`` starts them, a real MCP client over stdio; full index via ``reindex``,
search p50/p95/p99 per mode idle and during a reindex of 1,000 changed files, one-edit
freshness with the watcher on, peak RSS per process, database bytes per chunk. One
command per size; ``--repo PATH`` runs another checkout (the "before"):

    nice -n 10 .venv/bin/python -m benchmarks.scale_run --mcp --files 10000 --workdir W
    nice -n 10 .venv/bin/python -m benchmarks.scale_run --mcp --files 100000 --workdir W
    nice -n 10 .venv/bin/python -m benchmarks.scale_run --mcp --files 10000 --workdir W \
        --repo /work/main

Without ``--mcp``, in-process: generates ``--files`` markdown files with
``benchmarks.scale_corpus`` (deterministic), boots a local worker pool (``--processes``, as
``rifflux index`` would), then measures:

- the full index job (submit → completed), files/s, and each phase's span from the
  workers' log (plan; chunk and write rows; embed and write vectors; finalize);
- an incremental job with no change, and one after editing one file (with their phase
  spans, and the edit's vector cache publishes);
- the database size (with its WAL) and the vector cache's;
- peak RSS of this front process and of each worker process (sampled every 0.5 s);
- search p50 per mode over 20 queries × 5 rounds.

The generated corpus and the index are deleted at the end unless ``--keep``.

    nice -n 10 .venv/bin/python -m benchmarks.scale_run --files 100000 --workdir /work/scale \
        --vector-index exact
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.harness import DEFAULT_CORPUS, REPO, TreeSampler, emit, machine
from benchmarks.scale_corpus import Vocabulary, generate
from benchmarks.scale_mcp import main_mcp
from rifflux.config import Settings
from rifflux.reindex.runner import JobRunner as IndexQueue
from rifflux.search.service import SearchService
from workers.launcher import launch_local_pool


def dir_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def phase_spans(log_path: Path, since: float) -> dict[str, float]:
    """Seconds from ``since`` to the last event of each phase in the workers' log."""
    last: dict[str, float] = {}
    names = {
        "job.planned": "planned",
        "job.batch_chunked": "rows_written",
        "job.batch_vectors_written": "vectors_written",
        "job.finished": "finished",
    }
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        name = names.get(event.get("event", ""))
        if name is None:
            continue
        at = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
        if at >= since:
            last[name] = round(at - since, 1)
    return last


def publish_events(log_path: Path, since: float) -> list[dict[str, Any]]:
    """The vector cache publishes logged since ``since``: action, rows added, ms."""
    out = []
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") != "vectors.published":
            continue
        at = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
        if at >= since:
            keys = ("action", "added", "removed", "segments", "duration_ms")
            out.append({key: event.get(key) for key in keys})
    return out


def run_job(queue: IndexQueue, corpus: Path) -> tuple[float, Any]:
    started = time.perf_counter()
    record = queue.wait(queue.submit([corpus]), timeout=6 * 3600)
    return time.perf_counter() - started, record


def search_p50(settings: Settings, vocab: Vocabulary) -> dict[str, float]:
    rng = random.Random(5)
    queries = [" ".join(vocab.words_for(rng, rng.randint(2, 5))) for _ in range(20)]
    service = SearchService(settings)
    out = {}
    try:
        for mode in ("lexical", "semantic", "hybrid"):
            service.search(queries[0], top_k=10, mode=mode)  # warm-up (cache load)
            times = []
            for _ in range(5):
                for query in queries:
                    t0 = time.perf_counter()
                    service.search(query, top_k=10, mode=mode)
                    times.append((time.perf_counter() - t0) * 1000)
            out[mode] = round(statistics.median(times), 2)
    finally:
        service.close()
    return out


def run_mcp(args: argparse.Namespace, corpus: Path, index_dir: Path) -> int:
    """The corpus generated afresh when a run edited it, then ``scale_mcp.main_mcp``."""
    edited = args.workdir / f"corpus-{args.files}.edited"
    if edited.exists():
        shutil.rmtree(corpus, ignore_errors=True)
        edited.unlink()
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        if not corpus.is_dir():
            started = time.perf_counter()
            size = generate(corpus, args.files, source=args.source)
            print(
                f"generated {args.files} files, {size / 1e6:.1f} MB in "
                f"{time.perf_counter() - started:.0f} s",
                file=sys.stderr,
            )
        edited.touch()  # the run edits files and adds some: the next run regenerates
        main_mcp(args, corpus, index_dir)
    finally:
        if not args.keep:
            shutil.rmtree(corpus, ignore_errors=True)
            shutil.rmtree(index_dir, ignore_errors=True)
            edited.unlink(missing_ok=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--source", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--vector-index",
        choices=("auto", "exact", "hnsw"),
        default=None,
        help="RIFFLUX_VECTOR_INDEX for the workers (default: the environment's). exact "
        "builds no HNSW graph: at 1M rows a graph build costs ~1.1 ms of CPU per row",
    )
    mcp = parser.add_argument_group("--mcp", "the benchmark through the MCP server")
    mcp.add_argument("--mcp", action="store_true", help="run it through the MCP server")
    mcp.add_argument("--repo", type=Path, default=REPO, help="the checkout to run (default: this)")
    mcp.add_argument("--backend", default="hash", choices=("hash", "onnx"))
    mcp.add_argument("--worker-processes", type=int, help="rifflux worker (default: CPU count)")
    mcp.add_argument("--queries", type=int, default=300, help="realistic queries per mode")
    mcp.add_argument("--rounds", type=int, default=1, help="passes over the queries, idle")
    mcp.add_argument("--seed", type=int, default=22, help="of the queries")
    mcp.add_argument("--edits", type=int, default=1000, help="files changed for the busy run")
    mcp.add_argument("--fresh-rounds", type=int, default=5, help="edits after the first")
    mcp.add_argument("--pause", type=float, default=1.0, help="seconds between edits")
    mcp.add_argument("--settle", type=float, default=0.0, help="seconds before the first edit")
    mcp.add_argument("--fresh-timeout", type=float, default=120.0, help="per edit")
    mcp.add_argument(
        "--full-background",
        action="store_true",
        help="full index as a background reindex polled with index_status (not waiting)",
    )
    mcp.add_argument("--out", type=Path, help="JSON report (default WORKDIR/scale-mcp-N.json)")
    args = parser.parse_args()
    args.repo = args.repo.resolve()
    args.workdir = args.workdir.resolve()
    corpus = args.workdir / f"corpus-{args.files}"
    index_dir = args.workdir / f"index-{args.files}"
    shutil.rmtree(index_dir, ignore_errors=True)
    if args.mcp:
        return run_mcp(args, corpus, index_dir)
    report: dict[str, Any] = {
        "machine": machine(),
        "files": args.files,
        "processes": args.processes,
    }
    if args.vector_index:
        # The local pool's workers inherit the environment (they publish the cache).
        os.environ["RIFFLUX_VECTOR_INDEX"] = args.vector_index
    report["vector_index"] = os.environ.get("RIFFLUX_VECTOR_INDEX", "auto")
    report["load_avg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    try:
        t0 = time.perf_counter()
        if not corpus.is_dir():
            report["corpus_mb"] = round(generate(corpus, args.files, source=args.source) / 1e6, 1)
        report["generate_s"] = round(time.perf_counter() - t0, 1)
        settings = Settings.from_env().with_overrides(
            db_path=index_dir / "index.db",
            embedding_backend="hash",
            workers=args.processes,
            base_dir=args.workdir,
        )
        queue = IndexQueue(settings, launcher=launch_local_pool)
        try:
            pool = queue.start_pool(args.processes)
            deadline = time.monotonic() + 120
            while len(queue.index_host_workers()) < args.processes:
                if time.monotonic() > deadline:
                    sys.exit("workers did not boot")
                time.sleep(0.2)
            sampler = TreeSampler(pool.process.pid, include_root=False)
            sampler.start()
            since = time.time()
            full_s, record = run_job(queue, corpus)
            assert record.state == "completed", record.errors
            report["full_index_s"] = round(full_s, 1)
            report["files_per_s"] = round(args.files / full_s, 1)
            report["chunks"] = record.chunks_written
            report["phases_s"] = phase_spans(pool.log_path, since)
            since = time.time()
            nochange_s, again = run_job(queue, corpus)
            assert again.state == "completed" and again.files_done == 0, again.errors
            report["incremental_no_change_s"] = round(nochange_s, 2)
            report["no_change_phases_s"] = phase_spans(pool.log_path, since)
            edited = corpus / "part-0000" / "doc-000007.md"
            with edited.open("a", encoding="utf-8") as out:
                out.write("\n\n## Scale run edit\n\nA paragraph added by the scale run.\n")
            since = time.time()
            edit_s, one = run_job(queue, corpus)
            assert one.state == "completed" and one.files_done == 1, one.errors
            report["one_edited_file_s"] = round(edit_s, 2)
            report["one_edit_phases_s"] = phase_spans(pool.log_path, since)
            report["one_edit_publish"] = publish_events(pool.log_path, since)
            sampler.finish()
            report["worker_peak_rss_mib"] = sorted(
                round(kib / 1024) for kib in sampler.peak_kib.values()
            )
        finally:
            queue.close()
        db = settings.db_path
        report["db_mib"] = round(
            sum(dir_size(p) for p in (db, Path(f"{db}-wal")) if p.exists()) / 2**20
        )
        report["vector_cache_mib"] = round(dir_size(Path(f"{db}.vectors")) / 2**20)
        report["search_p50_ms"] = search_p50(settings, Vocabulary.from_corpus(args.source))
        report["front_peak_rss_mib"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        )
    finally:
        if not args.keep:
            shutil.rmtree(corpus, ignore_errors=True)
            shutil.rmtree(index_dir, ignore_errors=True)
    report["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    emit("scale_run", **report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
