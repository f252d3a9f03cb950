"""A job embedded by a torch embed-only worker (the GPU worker's code path, on the CPU
device) beside index-host workers on the SQLite broker: its rows are those of an
in-process index with the same embedder.

Skipped where torch is not installed (``pip install 'rifflux[gpu]'``)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rifflux_testing import copy_corpus, index_rows, queue_settings, reference_rows, worker_env
from test_jobs_e2e import run_job

from rifflux.embed.torch_minilm import TORCH_LABEL
from rifflux.queue import names
from rifflux.queue.client import IndexQueue
from rifflux.store.vector_blobs import float_row

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="torch is not installed (pip install 'rifflux[gpu]')",
    ),
]

# Rows are (path, sha256, chunk_id, chunk_index, heading_path, content, model, vec).
VEC = 7


def test_a_torch_embed_worker_gives_the_rows_of_an_in_process_torch_index(
    tmp_path: Path, start_workers
) -> None:
    corpus = copy_corpus(tmp_path / "docs", limit=6)
    settings = queue_settings(tmp_path, embedding_backend="torch")
    # The index host plans, chunks and writes; it never embeds (no embed queue).
    start_workers(settings, queues=names.INDEX_HOST_QUEUES)
    # The embed worker as `rifflux worker` starts it: a supervised pool, two threads.
    log = (tmp_path / "embed-worker.log").open("ab")
    command = [sys.executable, "-m", "rifflux.cli", "worker", "--processes", "1"]
    command += ["--threads", "2", "--queues", names.EMBED_QUEUE]
    embedder = subprocess.Popen(
        command,
        env=worker_env(settings, RIFFLUX_ONNX_THREADS="1"),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=tmp_path,
    )
    try:
        record = run_job(settings, corpus, timeout=300)
        queue = IndexQueue(settings)
        try:
            live = queue.live_workers()
        finally:
            queue.close()
    finally:
        os.killpg(embedder.pid, signal.SIGKILL)
        embedder.wait()
    assert record.state == "completed", record.errors
    assert {(tuple(w["queues"]), w["device"]) for w in live} == {
        (tuple(sorted(names.INDEX_HOST_QUEUES)), "cpu"),
        ((names.EMBED_QUEUE,), "cpu"),
    }
    stored = index_rows(settings.db_path)
    reference = reference_rows(tmp_path, corpus, settings)
    assert [row[:VEC] for row in stored] == [row[:VEC] for row in reference]
    assert {row[VEC - 1] for row in stored} == {TORCH_LABEL}
    # The vectors: the int8 rows the index keeps, from batches cut otherwise than the
    # in-process index's. The float32 vectors differ by ~1e-7 (the batch shapes change
    # the order of the sums), which can move a component across a rounding boundary:
    # on 6 files, 1 row of 104 differed, by one step of 127; none by more.
    got = np.stack([float_row(row[VEC], 384) for row in stored])
    want = np.stack([float_row(row[VEC], 384) for row in reference])
    assert np.abs(got - want).max() <= 1
