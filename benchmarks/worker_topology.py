"""Job throughput for worker processes × ONNX threads, through the real queue.

For each topology, indexes the same files into a fresh index with real ``dramatiq``
worker processes on the SQLite broker and reports wall time and chunks/s.

    .venv/bin/python -m benchmarks.worker_topology --files 150 --topologies 1x2 2x1
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.corpus_sample import copy_files
from benchmarks.harness import DEFAULT_CORPUS, emit, machine


def run(topology: str, corpus: Path, backend: str) -> dict[str, object]:
    from rifflux.config import Settings
    from rifflux.reindex.runner import JobRunner as IndexQueue
    from workers.launcher import worker_command, worker_environment

    processes, threads = (int(x) for x in topology.split("x"))
    workdir = Path(tempfile.mkdtemp(prefix=f"rifflux-topology-{topology}-"))
    settings = Settings(
        db_path=workdir / "index.db", base_dir=corpus.parent, embedding_backend=backend
    )
    env = worker_environment(settings, processes)
    env["RIFFLUX_ONNX_THREADS"] = str(threads)
    env["RIFFLUX_LOG_LEVEL"] = "WARNING"
    pool = subprocess.Popen(
        worker_command(processes),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    queue = IndexQueue(settings)
    try:
        while not queue.index_host_workers():
            time.sleep(0.2)
        started = time.perf_counter()
        job_id = queue.submit([corpus])
        record = queue.wait(job_id)
        seconds = time.perf_counter() - started
    finally:
        queue.close()
        os.killpg(pool.pid, signal.SIGTERM)
        pool.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "topology": f"{processes} processes x {threads} ONNX threads",
        "state": record.state,
        "files": record.files_done,
        "chunks": record.chunks_embedded,
        "seconds": round(seconds, 1),
        "chunks_per_s": round(record.chunks_embedded / seconds, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--files", type=int, default=150)
    parser.add_argument("--backend", default="onnx")
    parser.add_argument("--topologies", nargs="+", default=["1x2", "2x1"])
    args = parser.parse_args()
    from rifflux.logs import configure_logging

    configure_logging("WARNING")
    sample = Path(tempfile.mkdtemp(prefix="rifflux-topology-corpus-")) / "corpus"
    count = copy_files(args.corpus, sample, args.files)
    report = {
        "machine": machine(),
        "corpus": f"{args.corpus} (first {count} .md files)",
        "backend": args.backend,
        "runs": [run(t, sample, args.backend) for t in args.topologies],
    }
    shutil.rmtree(sample.parent, ignore_errors=True)
    emit("worker_topology", **report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
