"""How a reindex job's span scales with the worker pool: E(W) = T(1) / (W · T(W)).

For each W of ``--workers``, a fresh index of the same files (the first ``--files``
markdown files of ``--corpus`` in sorted path order) is built by a local pool of W worker
processes on the SQLite broker. The pool is booted, and every process consuming, before
the clock starts; the span is submit → the job's ``finished_at``. One JSON line per W:

- ``workers``, ``span_s``, ``efficiency`` (T(1) / (W · T(W)), against the run's first W
  when it is not 1: then ``efficiency`` is relative to that W);
- ``units``: the job's work units (embed messages, one per unit of texts embedded);
- ``writer_busy``: the fraction of the span during which an index write transaction held
  SQLite's write lock (``BEGIN IMMEDIATE`` granted → ``COMMIT`` done, every process);
- ``first_embed_s``, ``last_chunk_s``, ``last_embed_s``, ``finalize_s`` (its start and
  end): the job's course, in seconds after submit;
- ``first_10s``: where the first 10 s after submit went, in worker-seconds per actor
  (plan, chunk, embed, write, finalize) and idle, out of W × 10 s;
- ``rows_sha256``: a digest of every stored chunk (file, hash, heading, text, index) with
  its vector, in path order, and ``same_rows``: whether it equals the first W's, so the
  index a pool of 16 builds is checked against the one a single worker builds.

``--simulated MS_PER_CHUNK`` embeds with a wall-time cost of MS_PER_CHUNK per text (a
sleep: no CPU), so a 2-core machine shows the pipeline's own limits at 16 workers;
without it the real ONNX model embeds (``RIFFLUX_ONNX_THREADS`` per worker: 1 unless set).
The workers run ``benchmarks.core_scaling_actors`` (the real actors, traced).

    .venv/bin/python -m benchmarks.core_scaling --workers 1 2 4 8 16 --simulated 50
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.corpus_sample import copy_files
from benchmarks.harness import DEFAULT_CORPUS, emit, emit_machine
from rifflux.config import Settings
from rifflux.logs import configure_logging
from rifflux.reindex.runner import JobRunner
from rifflux.store.connection import open_index
from workers.launcher import launch_local_pool

BOOT_TIMEOUT_S = 300.0
JOB_TIMEOUT_S = 3600.0
FIRST_SECONDS = 10.0
ACTORS = ("plan_job", "chunk_batch", "embed_batch", "write_batch", "finalize_job")


def read_trace(trace: Path) -> list[tuple[str, int, float, float]]:
    rows = []
    for path in trace.glob("trace-*.txt"):
        for line in path.read_text().splitlines():
            kind, pid, start, end = line.split()
            rows.append((kind, int(pid), float(start), float(end)))
    return rows


def busy_within(intervals: list[tuple[float, float]], begin: float, end: float) -> float:
    """Seconds of [begin, end] covered by the union of ``intervals``."""
    covered = 0.0
    reach = begin
    for start, stop in sorted(intervals):
        start, stop = max(start, reach), min(stop, end)
        if stop > start:
            covered += stop - start
            reach = stop
    return covered


def rows_digest(db_path: Path) -> str:
    """sha256 of every stored chunk with its file and vector, in (path, chunk) order."""
    digest = hashlib.sha256()
    conn = open_index(db_path)
    try:
        rows = conn.execute(
            "SELECT f.path, f.sha256, c.chunk_id, c.chunk_index, c.heading_path, c.content, "
            "e.model, e.vec FROM chunks c JOIN files f ON f.id = c.file_id "
            "LEFT JOIN embeddings e ON e.chunk_id = c.chunk_id ORDER BY f.path, c.chunk_index"
        )
        for row in rows:
            digest.update(repr(tuple(row)).encode())
    finally:
        conn.close()
    return digest.hexdigest()


def run_one(corpus: Path, workers: int, work: Path, backend: str, run: int) -> dict[str, Any]:
    trace = work / f"trace-{run}-{workers}"
    trace.mkdir()
    os.environ["CORE_SCALING_TRACE"] = str(trace)
    settings = Settings.from_env().with_overrides(
        db_path=work / f"index-{run}-{workers}" / "index.db",
        base_dir=corpus.parent,
        embedding_backend=backend,
        workers=workers,
    )
    runner = JobRunner(settings, launcher=launch_local_pool)
    try:
        runner.start_pool(workers)
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while len(runner.live_workers()) < workers:
            if time.monotonic() > deadline:
                raise SystemExit(f"the pool of {workers} did not boot in {BOOT_TIMEOUT_S:g} s")
            time.sleep(0.1)
        submitted = time.time()
        record = runner.wait(runner.submit([corpus]), timeout=JOB_TIMEOUT_S)
    finally:
        runner.close()
    if record.state != "completed" or record.finished_at is None:
        raise SystemExit(f"job {record.state}: {record.errors[:3]}")
    finished = record.finished_at
    span = finished - submitted
    rows = read_trace(trace)
    writes = [(s, e) for kind, _pid, s, e in rows if kind == "write"]
    first_end = submitted + min(FIRST_SECONDS, span)
    first: dict[str, float] = defaultdict(float)
    for kind, _pid, start, end in rows:
        if kind in ACTORS:
            first[kind] += max(0.0, min(end, first_end) - max(start, submitted))
    window = workers * (first_end - submitted)
    embeds = [(s, e) for kind, _pid, s, e in rows if kind == "embed_batch"]
    chunks = [(s, e) for kind, _pid, s, e in rows if kind == "chunk_batch"]
    finals = [(s, e) for kind, _pid, s, e in rows if kind == "finalize_job"]
    return {
        "workers": workers,
        "span_s": round(span, 3),
        "units": sum(1 for kind, *_ in rows if kind == "embed_batch"),
        "writer_busy": round(busy_within(writes, submitted, finished) / span, 3),
        "batches": record.batches_total,
        "chunks": record.chunks_embedded,
        # The job's course, seconds after submit: the first embed starts, the last chunk
        # step and the last embed end.
        "first_embed_s": round(min(s for s, _ in embeds) - submitted, 2) if embeds else None,
        "last_chunk_s": round(max(e for _, e in chunks) - submitted, 2) if chunks else None,
        "last_embed_s": round(max(e for _, e in embeds) - submitted, 2) if embeds else None,
        # The tail: the finalize step's start and end.
        "finalize_s": [round(x - submitted, 2) for x in max(finals)] if finals else None,
        "first_10s": {
            "window_s": round(first_end - submitted, 2),
            **{kind: round(first[kind], 2) for kind in ACTORS},
            "embed_share": round(first["embed_batch"] / window, 3) if window else 0.0,
        },
        "rows_sha256": rows_digest(settings.db_path),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument(
        "--simulated",
        type=float,
        metavar="MS_PER_CHUNK",
        help="embed at this wall-time cost per text instead of with the ONNX model",
    )
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--files", type=int, default=200)
    args = parser.parse_args()
    configure_logging("WARNING")
    work = Path(tempfile.mkdtemp(prefix="rifflux-core-scaling-"))
    os.environ["RIFFLUX_WORKER_ACTORS"] = "benchmarks.core_scaling_actors"
    os.environ.setdefault("RIFFLUX_ONNX_THREADS", "1")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")) if p
    )
    if args.simulated is not None:
        os.environ["CORE_SCALING_MS_PER_CHUNK"] = str(args.simulated)
    backend = "hash" if args.simulated is not None else "onnx"
    try:
        corpus = work / "corpus"
        files = copy_files(args.corpus, corpus, args.files)
        emit_machine(
            files=files,
            corpus=str(args.corpus),
            simulated_ms_per_chunk=args.simulated,
            onnx_threads=os.environ["RIFFLUX_ONNX_THREADS"] if backend == "onnx" else None,
            usable_cpus=len(os.sched_getaffinity(0)),
        )
        base: tuple[int, float, str] | None = None
        for run, workers in enumerate(args.workers):
            result = run_one(corpus, workers, work, backend, run)
            if base is None:
                base = (workers, result["span_s"], result["rows_sha256"])
            result["efficiency"] = round(base[0] * base[1] / (workers * result["span_s"]), 3)
            result["same_rows"] = result["rows_sha256"] == base[2]
            emit("core_scaling", **result)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
