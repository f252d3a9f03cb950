"""Peak RSS of ONNX worker processes during a real queue job, and embedder throughput.

    .venv/bin/python -m benchmarks.worker_memory              # first 600 files, 2 workers
    .venv/bin/python -m benchmarks.worker_memory --files 100  # a quick iteration

Copies the first ``--files`` markdown files (sorted paths) of the awesome-copilot corpus
into a temporary directory and then measures two things:

job        A real reindex job through the SQLite broker, run by ``python -m dramatiq
           workers.actors --processes N --threads 1`` with the ONNX embedder. A sampler
           thread reads VmRSS of every descendant of the dramatiq parent from /proc every
           ``--interval`` seconds; VmHWM (the kernel's own peak) and the CPU seconds
           (utime + stime from /proc/PID/stat) are read once more when the job is done,
           before the pool is stopped. CPU seconds count from job submission, so the
           workers' idle start-up is excluded and the model load is included.
inprocess  The same files chunked and embedded by ``rifflux.index.pipeline.embed`` (the
           worker's embed step) in a fresh child process, message by message as the
           planner batches them, with the same ONNX thread count as one worker. Reports
           chunks/s, chunks per CPU-second (``resource.getrusage`` of that process) and
           its peak RSS (VmHWM).

Other agents share the CPUs, so compare chunks per CPU-second across runs; wall-clock
chunks/s is printed for reference only. Prints one JSON report.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.corpus_sample import copy_files
from benchmarks.harness import (
    DEFAULT_CORPUS,
    REPO,
    command_line,
    cpu_seconds,
    descendants,
    emit,
    machine,
    status_kib,
)

MIB = 1024 * 1024


@dataclass
class ProcessTrack:
    pid: int
    command: str
    peak_rss_kib: int = 0
    hwm_kib: int = 0
    cpu_start: float | None = None
    cpu_end: float = 0.0
    samples: int = 0


@dataclass
class Sampler:
    """Samples RSS of all descendants of ``root`` until stopped."""

    root: int
    interval: float
    tracks: dict[int, ProcessTrack] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sample(self) -> None:
        with self._lock:
            for pid in descendants(self.root):
                status = status_kib(pid)
                if not status:
                    continue
                cpu = cpu_seconds(pid)
                track = self.tracks.get(pid)
                if track is None:
                    track = self.tracks[pid] = ProcessTrack(pid, command_line(pid))
                track.peak_rss_kib = max(track.peak_rss_kib, status.get("VmRSS", 0))
                track.hwm_kib = max(track.hwm_kib, status.get("VmHWM", 0))
                track.cpu_end = cpu
                track.samples += 1

    def mark_cpu_start(self) -> None:
        self.sample()
        with self._lock:
            for track in self.tracks.values():
                track.cpu_start = track.cpu_end

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._stop.set()


def run_job(
    corpus: Path,
    processes: int,
    threads: int,
    interval: float,
    tmpdir: Path | None,
    backend: str = "onnx",
) -> dict[str, Any]:
    from rifflux.config import Settings
    from rifflux.reindex.runner import JobRunner as IndexQueue

    workdir = Path(tempfile.mkdtemp(prefix="worker-memory-job-", dir=tmpdir))
    settings = Settings(
        db_path=workdir / "index.db", base_dir=corpus.parent, embedding_backend=backend
    )
    env = dict(os.environ)
    env.update(
        RIFFLUX_DB_PATH=str(settings.db_path),
        RIFFLUX_BROKER_URL=settings.resolved_broker_url,
        RIFFLUX_EMBEDDING_BACKEND=backend,
        RIFFLUX_ONNX_THREADS=str(threads),
        RIFFLUX_LOG_LEVEL="WARNING",
    )
    command = [sys.executable, "-m", "dramatiq", "workers.actors"]
    command += ["--processes", str(processes), "--threads", "1"]
    log_path = workdir / "workers.log"
    with log_path.open("wb") as log_file:
        pool = subprocess.Popen(
            command, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
    sampler = Sampler(pool.pid, interval)
    thread = threading.Thread(target=sampler.run, daemon=True)
    queue = IndexQueue(settings)
    try:
        while len(queue.index_host_workers()) < processes:
            if pool.poll() is not None:
                raise SystemExit(f"workers exited early; see {log_path}")
            time.sleep(0.2)
        sampler.mark_cpu_start()
        thread.start()
        started = time.perf_counter()
        job_id = queue.submit([corpus])
        record = queue.wait(job_id)
        seconds = time.perf_counter() - started
        sampler.stop()
        thread.join()
        sampler.sample()
    finally:
        queue.close()
        if pool.poll() is None:
            os.killpg(pool.pid, signal.SIGTERM)
            pool.wait()
    shutil.rmtree(workdir, ignore_errors=True)
    workers = [t for t in sampler.tracks.values() if "workers.actors" in t.command]
    cpu = sum(t.cpu_end - (t.cpu_start or 0.0) for t in workers)
    return {
        "command": " ".join(["python", *command[1:]]),
        "backend": backend,
        "onnx_threads_per_worker": threads,
        "state": record.state,
        "files": record.files_done,
        "chunks": record.chunks_embedded,
        "wall_seconds": round(seconds, 1),
        "chunks_per_s_wall": round(record.chunks_embedded / seconds, 2),
        "worker_cpu_seconds": round(cpu, 1),
        "chunks_per_cpu_s": round(record.chunks_embedded / cpu, 3) if cpu else None,
        "processes": [
            {
                "pid": t.pid,
                "command": t.command[-60:],
                "peak_rss_mib_sampled": round(t.peak_rss_kib / 1024, 1),
                "vm_hwm_mib": round(t.hwm_kib / 1024, 1),
                "cpu_seconds": round(t.cpu_end - (t.cpu_start or 0.0), 1),
                "samples": t.samples,
            }
            for t in sorted(sampler.tracks.values(), key=lambda t: t.pid)
        ],
    }


def embed_in_process(corpus: Path, threads: int) -> dict[str, Any]:
    """The worker's embed step over the job's batches, in this process (a fresh one)."""
    from rifflux.config import Settings
    from rifflux.embed.factory import make_embedder
    from rifflux.index.changes import batch_by_bytes
    from rifflux.index.messages import EmbedRequest
    from rifflux.index.pipeline import embed, read_works
    from rifflux.index.planner import batch_bytes_for
    from rifflux.index.prepare import chunk_file, embedding_input

    settings = replace(Settings.from_env(), embedding_backend="onnx", onnx_threads=threads)
    paths = sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*.md"))
    works, _ = read_works(corpus, paths, settings.max_file_bytes, [corpus.resolve()])
    target = batch_bytes_for(sum(w.size_bytes for w in works), settings.batch_target_bytes)
    payloads = []
    for n, batch in enumerate(batch_by_bytes(works, target)):
        texts: dict[str, str] = {}
        for work in batch:
            prepared = chunk_file(
                work, max_chars=settings.max_chunk_chars, min_chars=settings.min_chunk_chars
            )
            for c in prepared.chunks:
                texts.setdefault(c.embed_sha256, embedding_input(c.heading_path, c.content))
        payloads.append(
            EmbedRequest(
                db_path="",
                job_id="benchmark",
                batch_no=n,
                model="onnx:all-MiniLM-L6-v2-int8",
                paths=tuple(w.rel_path for w in batch),
                texts=tuple(texts.items()),
            )
        )
    embedder = make_embedder(settings)
    embedder.embed_batch(["warm-up"])
    rss_after_load = status_kib(os.getpid()).get("VmHWM", 0)
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    chunks = sum(len(embed(payload, embedder).vectors) for payload in payloads)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "onnx_threads": threads,
        "messages": len(payloads),
        "chunks": chunks,
        "wall_seconds": round(seconds, 1),
        "chunks_per_s_wall": round(chunks / seconds, 2),
        "cpu_seconds": round(cpu, 1),
        "chunks_per_cpu_s": round(chunks / cpu, 3),
        "vm_hwm_mib_after_model_load": round(rss_after_load / 1024, 1),
        "vm_hwm_mib": round(status_kib(os.getpid()).get("VmHWM", 0) / 1024, 1),
    }


def run_in_process(corpus: Path, threads: int) -> dict[str, Any]:
    """Run :func:`embed_in_process` in a child process, so its peak RSS is its own."""
    command = [sys.executable, "-m", "benchmarks.worker_memory", "--inprocess-child", str(corpus)]
    command += ["--threads", str(threads)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--files", type=int, default=600)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--threads", type=int, default=0, help="ONNX threads per worker (0: cores / processes)"
    )
    parser.add_argument("--interval", type=float, default=0.1, help="RSS sampling seconds")
    parser.add_argument("--skip", choices=("job", "inprocess"), action="append", default=[])
    parser.add_argument(
        "--backend",
        default="onnx",
        choices=("onnx", "hash"),
        help="the job's embedder (hash: what the workers hold besides the model)",
    )
    parser.add_argument("--tmpdir", type=Path, help="where the corpus copy and index go")
    parser.add_argument("--inprocess-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.processes)
    if args.inprocess_child:
        print(json.dumps(embed_in_process(args.inprocess_child, threads)))
        return 0

    import onnxruntime

    from rifflux.logs import configure_logging

    configure_logging("WARNING")
    sample = Path(tempfile.mkdtemp(prefix="worker-memory-corpus-", dir=args.tmpdir)) / "corpus"
    count = copy_files(args.corpus, sample, args.files)
    if count == 0:
        parser.error(f"no .md files under {args.corpus}; pass --corpus DIR")
    git = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    report: dict[str, Any] = {
        "machine": {**machine(), "onnxruntime": onnxruntime.__version__},
        "commit": git.stdout.strip(),
        "corpus": f"{args.corpus} (first {count} .md files)",
        "settings": {k: v for k, v in os.environ.items() if k.startswith("RIFFLUX_")},
    }
    try:
        if "job" not in args.skip:
            report["job"] = run_job(
                sample, args.processes, threads, args.interval, args.tmpdir, args.backend
            )
        if "inprocess" not in args.skip:
            report["inprocess"] = run_in_process(sample, threads)
    finally:
        shutil.rmtree(sample.parent, ignore_errors=True)
    emit("worker_memory", **report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
