"""Whole-pipeline embedding throughput against the raw embedder, same texts, same processes.

1. Chunk the first ``--files`` awesome-copilot files as the workers do and collect the
   distinct texts to embed.
2. Raw: ``--processes`` fresh processes, each with the ONNX threads a pool worker gets
   (the cores split evenly), embed an equal share of those texts (dealt round-robin by
   length) in one ``embed_batch`` call each; the model load is not timed. Raw
   throughput = texts ÷ the slowest process's embedding time.
3. Pipeline: a local worker pool of ``--processes`` (booted before the clock starts)
   runs a real reindex job of the same files through the SQLite broker: plan, chunk and
   write rows, embed, write vectors, finalize (model load included). Pipeline throughput
   = texts ÷ (submit → completed).

    .venv/bin/python -m benchmarks.pipeline_throughput --files 150 --processes 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.corpus_sample import copy_files
from benchmarks.harness import DEFAULT_CORPUS, emit, machine
from rifflux.config import Settings
from rifflux.index.changes import FileWork
from rifflux.index.prepare import chunk_file, embedding_input
from rifflux.reindex.runner import JobRunner as IndexQueue
from workers.launcher import launch_local_pool, onnx_threads_per_worker

RAW_WORKER = """
import json, sys, time
from rifflux.config import Settings
from rifflux.embed.factory import make_embedder
texts = json.load(open(sys.argv[1]))
embedder = make_embedder(Settings.from_env())
embedder.embed_batch(["warm-up"])
started = time.perf_counter()
embedder.embed_batch(texts)
print(time.perf_counter() - started)
"""


def distinct_texts(corpus: Path, settings: Settings) -> list[str]:
    texts: dict[str, str] = {}
    for path in sorted(corpus.rglob("*.md")):
        data = path.read_bytes()
        work = FileWork(path.name, 0, len(data), "", data.decode("utf-8", "replace"))
        for chunk in chunk_file(
            work, max_chars=settings.max_chunk_chars, min_chars=settings.min_chunk_chars
        ).chunks:
            texts.setdefault(chunk.embed_sha256, embedding_input(chunk.heading_path, chunk.content))
    return list(texts.values())


def raw(texts: list[str], processes: int, work: Path, threads: int) -> float:
    # Balanced shares: texts dealt round-robin by length, so no process waits for another.
    by_length = sorted(texts, key=len)
    env = {**os.environ, "RIFFLUX_EMBEDDING_BACKEND": "onnx", "RIFFLUX_ONNX_THREADS": str(threads)}
    procs = []
    for n in range(processes):
        part = work / f"texts-{n}.json"
        part.write_text(json.dumps(by_length[n::processes]))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RAW_WORKER, str(part)], env=env, stdout=subprocess.PIPE
            )
        )
    seconds = [float(p.communicate()[0]) for p in procs]
    return max(seconds)


def pipeline(corpus: Path, processes: int, work: Path) -> float:
    settings = Settings.from_env().with_overrides(
        db_path=work / "index" / "index.db", embedding_backend="onnx", workers=processes
    )
    queue = IndexQueue(settings, launcher=launch_local_pool)
    try:
        queue.start_pool(processes)
        deadline = time.monotonic() + 120
        while len(queue.live_workers()) < processes and time.monotonic() < deadline:
            time.sleep(0.2)
        started = time.perf_counter()
        record = queue.wait(queue.submit([corpus]), timeout=3600)
        seconds = time.perf_counter() - started
        assert record.state == "completed", record.errors
        return seconds
    finally:
        queue.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--files", type=int, default=150)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rifflux-throughput-"))
    try:
        corpus = work / "corpus"
        copy_files(args.corpus, corpus, args.files)
        settings = Settings.from_env()
        texts = distinct_texts(corpus, settings)
        threads = onnx_threads_per_worker(settings, args.processes)
        raw_s = raw(texts, args.processes, work, threads)
        pipeline_s = pipeline(corpus, args.processes, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    raw_rate, pipeline_rate = len(texts) / raw_s, len(texts) / pipeline_s
    emit(
        "pipeline_throughput",
        **{
            "machine": machine(),
            "files": args.files,
            "texts": len(texts),
            "processes": args.processes,
            "onnx_threads_per_process": threads,
            "raw_s": round(raw_s, 2),
            "raw_texts_per_s": round(raw_rate, 2),
            "pipeline_s": round(pipeline_s, 2),
            "pipeline_texts_per_s": round(pipeline_rate, 2),
            "pipeline_over_raw": round(pipeline_rate / raw_rate, 3),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
