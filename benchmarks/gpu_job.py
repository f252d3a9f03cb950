"""A whole index job through the queue with one GPU embed worker beside CPU workers.

    python -m benchmarks.gpu_job --device cuda --cpu-workers 16          # the GPU run
    python -m benchmarks.gpu_job --device cpu --cpu-workers 1 --files 20  # a dry run

The job is what ``make run``'s setup with a GPU worker runs: ``rifflux worker --queues
rifflux_plan rifflux_write`` (``--cpu-workers`` processes: plan, chunk, write, never
embed) and ``rifflux worker --device DEVICE`` (one process, embed only), on the SQLite
broker next to a fresh index, then one job of ``RIFFLUX_EMBEDDING_BACKEND=torch`` over
the corpus (``--files``: the first N, sorted). With ``--device cpu`` the embed worker is
``rifflux worker --queues rifflux_embed`` with the torch backend on the CPU: the same
code path, for a dry run of the script where there is no GPU.

Timed from the submit to the job's completion, the workers already up (their boot and
the model's load are not in it). Prints the machine, then one ``gpu_job`` line: wall,
chunks and chunks/s, the mean ``nvidia-smi`` utilisation during the job (CUDA), and the
peak RSS and CPU seconds of each worker process.
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
from typing import Any

from benchmarks.corpus_sample import copy_files
from benchmarks.gpu_embed import GpuUtilisation, device_facts
from benchmarks.harness import DEFAULT_CORPUS, TreeSampler, emit, emit_machine

BOOT_TIMEOUT_SECONDS = 300.0


def start_pool(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rifflux.cli", "worker", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def run(corpus: Path, device: str, cpu_workers: int, workdir: Path) -> dict[str, Any]:
    from rifflux.config import Settings
    from rifflux.queue import names
    from rifflux.reindex.runner import JobRunner

    settings = Settings(
        db_path=workdir / "index" / "index.db",
        base_dir=corpus.parent,
        embedding_backend="torch",
    )
    settings.db_path.parent.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")}
    env.update(
        RIFFLUX_DB_PATH=str(settings.db_path),
        RIFFLUX_EMBEDDING_BACKEND="torch",
        RIFFLUX_LOG_LEVEL="WARNING",
    )
    index_host = start_pool(
        ["--processes", str(cpu_workers), "--queues", *names.INDEX_HOST_QUEUES],
        env,
        workdir / "cpu-workers.log",
    )
    if device == "cpu":
        embed_args = ["--processes", "1", "--threads", "2", "--queues", names.EMBED_QUEUE]
    else:
        embed_args = ["--device", device]
    embedder = start_pool(embed_args, env, workdir / "gpu-worker.log")
    samplers = [TreeSampler(index_host.pid), TreeSampler(embedder.pid)]
    queue = JobRunner(settings)
    try:
        deadline = time.monotonic() + BOOT_TIMEOUT_SECONDS
        while not (
            queue.index_host_workers()
            and any(names.EMBED_QUEUE in w["queues"] for w in queue.live_workers())
        ):
            if time.monotonic() > deadline or embedder.poll() is not None:
                raise SystemExit(f"workers did not start; see {workdir}/*.log")
            time.sleep(0.2)
        devices = sorted({w["device"] for w in queue.live_workers()})
        for sampler in samplers:
            sampler.start()
        utilisation = GpuUtilisation() if device != "cpu" and shutil.which("nvidia-smi") else None
        if utilisation is not None:
            utilisation.start()
        started = time.perf_counter()
        record = queue.wait(queue.submit([corpus]))
        seconds = time.perf_counter() - started
        gpu = utilisation.stop() if utilisation is not None else {}
    finally:
        queue.close()
        for sampler in samplers:
            if sampler.is_alive():
                sampler.finish()
        for pool in (index_host, embedder):
            os.killpg(pool.pid, signal.SIGTERM)
            pool.wait()
    processes = [
        {
            "pool": name,
            "pid": pid,
            "peak_rss_mb": round(sampler.peak_kib[pid] / 1024, 1),
            "cpu_s": round(sampler.cpu.get(pid, 0.0), 1),
        }
        for name, sampler in (("cpu", samplers[0]), ("embed", samplers[1]))
        for pid in sorted(sampler.peak_kib)
    ]
    return {
        "device": device,
        "cpu_workers": cpu_workers,
        "worker_devices": devices,
        "state": record.state,
        "files": record.files_done,
        "chunks": record.chunks_embedded,
        "wall_s": round(seconds, 2),
        "chunks_per_s": round(record.chunks_embedded / seconds, 1),
        **gpu,
        "processes": processes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--files", type=int, default=0, help="the first N files (0: all)")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (dry run)")
    parser.add_argument("--cpu-workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    corpus = args.corpus.expanduser().resolve()
    workdir = Path(tempfile.mkdtemp(prefix="rifflux-gpu-job-"))
    try:
        if args.files:
            copy_files(corpus, workdir / "corpus", args.files)
            corpus = workdir / "corpus"
        emit_machine(corpus=str(corpus), **device_facts(args.device))
        emit("gpu_job", **run(corpus, args.device, args.cpu_workers, workdir))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
