"""Where a queued reindex spends its CPU: every job step run inline, timed per step.

Runs the steps the actors run (plan, chunk, embed, write_vectors, finalize) one after
another in this process, each message through its JSON wire encoding as a broker would
carry it, and reports CPU seconds per step (``time.process_time``) and per part of a
step. CPU time, unlike wall time, is comparable on a shared machine.

A connection to the index stays open for the whole run, as the front process's waiter
keeps one while a job runs: SQLite checkpoints the whole WAL when the last connection
to a database closes, which the steps of a real job never do (0.1-0.2 CPU-s here, and
more in wall time).

As the actors do (``workers.actors.inline_embedder``), the hash embedder runs inside the
chunk step, which then writes the vectors too: the embed and write_vectors steps (and
their messages) are left for ONNX.

    .venv/bin/python -m benchmarks.queue_profile --backend hash

``--keep-db PATH`` keeps a copy of the finished index (the steps run in one process, so
two checkouts write the same rows in the same order, and their copies compare table by
table).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.harness import DEFAULT_CORPUS, emit, machine
from rifflux.config import Settings
from rifflux.embed.factory import make_embedder
from rifflux.index import pipeline
from rifflux.index.jobspec import JobSpec
from rifflux.index.messages import (
    ChunkRequest,
    EmbedRequest,
    VectorsRequest,
    finalize_request,
    plan_request,
)
from rifflux.store import jobs
from rifflux.store.connection import open_index

T = TypeVar("T")


class Clock:
    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def run(self, name: str, fn: Callable[[], T]) -> T:
        started = time.process_time()
        try:
            return fn()
        finally:
            self.cpu[name] += time.process_time() - started
            self.calls[name] += 1


def wire(clock: Clock, message: Any, cls: Any) -> Any:
    """Encode to JSON text and back, as the broker carries it, timed as ``wire``."""
    return clock.run(
        "wire (encode, json, decode)",
        lambda: cls.from_dict(json.loads(json.dumps(message.to_dict()))),
    )


def profile(corpus: Path, backend: str, keep_db: Path | None = None) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="rifflux-queue-profile-"))
    try:
        settings = Settings.from_env().with_overrides(
            db_path=work / "index.db", embedding_backend=backend
        )
        embedder = make_embedder(settings)
        embedder.embed_batch(["warm-up"])
        conn = open_index(settings.db_path)
        job_id = jobs.create_job(
            conn,
            [str(corpus)],
            JobSpec.from_settings(settings, force=False, prune_missing=True).to_dict(),
        )
        db = str(settings.db_path)
        clock = Clock()
        chunks: list[ChunkRequest] = []
        embeds: list[EmbedRequest] = []
        started = time.perf_counter()
        clock.run(
            "plan (scan, hash, persist)",
            lambda: pipeline.plan(settings, plan_request(db, job_id), chunks.append, embeds.append),
        )
        inline = embedder if backend == "hash" else None
        for request in chunks:
            request = wire(clock, request, ChunkRequest)
            outcome = clock.run(
                "chunk (read, markdown parse + rows write)",
                lambda r=request: pipeline.chunk(r, inline),
            )
            embeds.extend(outcome.embeds)
        for request in embeds:
            request = wire(clock, request, EmbedRequest)
            vectors = clock.run("embed", lambda r=request: pipeline.embed(r, embedder))
            vectors = wire(clock, vectors, VectorsRequest)
            clock.run(
                "write_vectors (incl. throttled publish)",
                lambda v=vectors: pipeline.write_vectors(v),
            )
        record = clock.run(
            "finalize (prune, settle, publish)",
            lambda: pipeline.finalize(finalize_request(db, job_id)),
        )
        wall = time.perf_counter() - started
        conn.close()
        if keep_db is not None:
            # The backup API copies pages as they are (VACUUM may renumber rowids).
            with sqlite3.connect(settings.db_path) as source, sqlite3.connect(keep_db) as copy:
                source.backup(copy)
        assert record is not None and record.state == "completed", record
        return {
            "files": record.files_done,
            "chunks": record.chunks_written,
            "batches": record.batches_total,
            "wall_s": round(wall, 2),
            "cpu_s": {k: round(v, 2) for k, v in clock.cpu.items()},
            "cpu_total_s": round(sum(clock.cpu.values()), 2),
            "calls": dict(clock.calls),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--backend", default="hash", choices=("hash", "onnx"))
    parser.add_argument("--keep-db", type=Path, help="copy the finished index to this file")
    args = parser.parse_args()
    report = {
        "machine": machine(),
        "corpus": str(args.corpus),
        "backend": args.backend,
        **profile(args.corpus.resolve(), args.backend, args.keep_db),
    }
    emit("queue_profile", **report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
