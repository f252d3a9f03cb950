"""Worker processes started by the front process get the index's broker and a CPU share."""

from __future__ import annotations

import os
from pathlib import Path

from rifflux_testing import make_settings

from workers.launcher import onnx_threads_per_worker, worker_command, worker_environment


def test_cores_are_split_between_worker_processes(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    cpus = os.cpu_count() or 1
    assert onnx_threads_per_worker(settings, 1) == cpus
    assert onnx_threads_per_worker(settings, cpus) == 1
    assert onnx_threads_per_worker(settings, cpus * 4) == 1
    assert onnx_threads_per_worker(settings.with_overrides(onnx_threads=3), 2) == 3


def test_worker_environment_points_at_this_index(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    env = worker_environment(settings, 2)
    assert env["RIFFLUX_DB_PATH"] == str(settings.db_path.resolve())
    assert env["RIFFLUX_BROKER_URL"] == settings.resolved_broker_url
    assert env["RIFFLUX_EMBEDDING_BACKEND"] == "hash"
    assert env["RIFFLUX_ONNX_THREADS"] == str(onnx_threads_per_worker(settings, 2))
    command = worker_command(2, 1, ("rifflux_embed",), parent_pid=42, log_name="w.log")
    assert command[1:] == [
        "-m",
        "workers.pool",
        "--processes",
        "2",
        "--threads",
        "1",
        "--queues",
        "rifflux_embed",
        "--parent-pid",
        "42",
        "--log-name",
        "w.log",
    ]
