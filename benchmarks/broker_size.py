"""The SQLite broker's file during and after a reindex job of a generated corpus.

Generates ``--files`` markdown files (``benchmarks.scale_corpus``, deterministic), boots
a local pool of ``--workers`` processes, runs one job with the ``--backend`` embedder and
reports the broker file's size (``queue.db`` plus its WAL): its peak while the job runs
(sampled every 0.2 s) and after the job (the pool still up, then stopped), with the job's
span and the corpus's size.

    .venv/bin/python -m benchmarks.broker_size --files 10000 --workers 2
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.harness import emit, emit_machine
from benchmarks.scale_corpus import generate
from rifflux.config import Settings
from rifflux.logs import configure_logging
from rifflux.reindex.runner import JobRunner
from workers.launcher import launch_local_pool


def broker_bytes(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return sum(p.stat().st_size for p in (path, wal) if p.exists())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", default="hash")
    args = parser.parse_args()
    configure_logging("WARNING")
    work = Path(tempfile.mkdtemp(prefix="rifflux-broker-size-"))
    try:
        corpus = work / "corpus"
        generate(corpus, args.files)
        corpus_bytes = sum(p.stat().st_size for p in corpus.rglob("*.md"))
        emit_machine(files=args.files, corpus_mb=round(corpus_bytes / 1e6, 1))
        settings = Settings.from_env().with_overrides(
            db_path=work / "index" / "index.db",
            base_dir=work,
            embedding_backend=args.backend,
            workers=args.workers,
        )
        queue_db = settings.db_path.parent / "queue.db"
        runner = JobRunner(settings, launcher=launch_local_pool)
        peak = 0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.wait(0.2):
                peak = max(peak, broker_bytes(queue_db))

        try:
            runner.start_pool(args.workers)
            while len(runner.live_workers()) < args.workers:
                time.sleep(0.1)
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            started = time.time()
            record = runner.wait(runner.submit([corpus]), timeout=7200)
            span = (record.finished_at or time.time()) - started
            time.sleep(1.0)  # The last acks land after the job reads completed.
            after_job = broker_bytes(queue_db)
            done.set()
            sampler.join()
        finally:
            runner.close()
        emit(
            "broker_size",
            files=args.files,
            workers=args.workers,
            backend=args.backend,
            state=record.state,
            chunks=record.chunks_written,
            span_s=round(span, 1),
            corpus_mb=round(corpus_bytes / 1e6, 1),
            broker_peak_mb=round(max(peak, after_job) / 1e6, 1),
            broker_after_job_mb=round(after_job / 1e6, 2),
            broker_after_pool_stop_mb=round(broker_bytes(queue_db) / 1e6, 2),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
