"""CPU and wall time of a worker pool's boot, from spawn to every child consuming.

Two modes, each run ``--rounds`` times per checkout, the checkouts alternated
(``--repo`` adds another checkout, e.g. ``main``, run with its own ``.venv`` Python):

- ``child``: ``--processes`` children (``python -m workers.child``, the command line the
  pool gives them), spawned at once as the pool spawns them; each is timed from its
  spawn to the byte it writes on ``--ready-fd`` once its Workers consume. CPU is the
  child's own (``/proc/PID/stat``: every thread, user + system) at that moment.
- ``pool``: ``python -m workers.pool --processes N`` as ``rifflux worker`` and a local
  pool start it; timed from its spawn until N heartbeats (written once a child's
  Workers have started) are in the queue file. CPU: the arbiter and its children.

After the boot, ``--idle-seconds`` more of CPU on empty queues (polling, heartbeats)
is measured for each mode. Every run gets a fresh directory and index, its queue file
created first (as the front process creates it before it starts a pool), and the hash
embedder (the ONNX model is loaded on the first embed message, not at boot).

    nice -n 5 .venv/bin/python -m benchmarks.worker_boot --rounds 5 --repo /work/main
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from benchmarks.harness import (
    REPO,
    checkout_env,
    checkout_python,
    cpu_seconds,
    descendants,
    emit,
    emit_machine,
)


def boot_env(repo: Path, work: Path) -> dict[str, str]:
    return checkout_env(
        repo,
        RIFFLUX_DB_PATH=str(work / "index.db"),
        RIFFLUX_EMBEDDING_BACKEND="hash",
        RIFFLUX_LOG_LEVEL="WARNING",
    )


PREPARE = """
from rifflux.config import Settings
from rifflux.queue.brokers import make_broker
from rifflux.queue.presence import presence_store_for
settings = Settings.from_env()
broker = make_broker(settings.resolved_broker_url)
presence_store_for(broker, settings).live_workers()
broker.close()
"""


def prepare(repo: Path, env: Mapping[str, str]) -> None:
    """Create the queue file and its tables as the front process does before it starts a
    pool (it enqueues the job and looks for live workers first); not timed."""
    subprocess.run([checkout_python(repo), "-c", PREPARE], env=env, cwd=repo, check=True)


def child_round(repo: Path, processes: int, idle: float) -> dict[str, float]:
    """Spawn ``processes`` children at once; CPU and wall of each to its ready byte."""
    work = Path(tempfile.mkdtemp(prefix="rifflux-boot-child-"))
    env = boot_env(repo, work)
    prepare(repo, env)
    command = [checkout_python(repo), "-m", "workers.child", "--actors", "workers.actors"]
    started: list[tuple[subprocess.Popen[bytes], int, float]] = []
    try:
        for _ in range(processes):
            read_fd, write_fd = os.pipe()
            t0 = time.perf_counter()
            process = subprocess.Popen(
                [*command, "--ready-fd", str(write_fd)],
                env=env,
                cwd=repo,
                stdin=subprocess.DEVNULL,
                pass_fds=(write_fd,),
            )
            os.close(write_fd)
            started.append((process, read_fd, t0))
        walls, cpus = [], []
        for process, read_fd, t0 in started:
            if os.read(read_fd, 1) != b"1":
                raise RuntimeError(f"child {process.pid} exited before it was ready")
            walls.append(time.perf_counter() - t0)
            cpus.append(cpu_seconds(process.pid))
            os.close(read_fd)
        at_ready = sum(cpu_seconds(p.pid) for p, _, _ in started)
        time.sleep(idle)
        idle_cpu = sum(cpu_seconds(p.pid) for p, _, _ in started) - at_ready
        return {
            "wall": max(walls),
            "cpu": statistics.mean(cpus),
            "cpu_all": sum(cpus),
            "idle_cpu": idle_cpu,
        }
    finally:
        stop([p for p, _, _ in started])
        shutil.rmtree(work, ignore_errors=True)


def heartbeats(queue_db: Path) -> int:
    if not queue_db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{queue_db}?mode=ro", uri=True, timeout=1)
        try:
            return conn.execute("SELECT COUNT(*) FROM workers").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.OperationalError:  # Not created yet.
        return 0


def pool_round(repo: Path, processes: int, idle: float) -> dict[str, float]:
    """Spawn the pool; CPU of the arbiter and its children when all N have a heartbeat."""
    work = Path(tempfile.mkdtemp(prefix="rifflux-boot-pool-"))
    env = boot_env(repo, work)
    prepare(repo, env)
    command = [checkout_python(repo), "-m", "workers.pool", "--processes", str(processes)]
    t0 = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=repo, stdin=subprocess.DEVNULL)
    try:
        while heartbeats(work / "queue.db") < processes:
            if process.poll() is not None:
                raise RuntimeError(f"the pool exited with {process.returncode}")
            time.sleep(0.005)
        wall = time.perf_counter() - t0
        pids = [process.pid, *descendants(process.pid)]
        arbiter = cpu_seconds(process.pid)
        at_ready = sum(cpu_seconds(pid) for pid in pids)
        time.sleep(idle)
        idle_cpu = sum(cpu_seconds(pid) for pid in pids) - at_ready
        return {"wall": wall, "cpu_all": at_ready, "arbiter_cpu": arbiter, "idle_cpu": idle_cpu}
    finally:
        stop([process])
        shutil.rmtree(work, ignore_errors=True)


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def describe(values: Mapping[str, list[float]]) -> dict[str, dict[str, float]]:
    """Median, min and max of each figure over the rounds."""
    return {
        key: {"median": round(statistics.median(v), 3), "min": min(v), "max": max(v)}
        for key, v in values.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--modes", nargs="+", default=["child", "pool"], choices=["child", "pool"])
    parser.add_argument("--repo", type=Path, action="append", default=[], help="another checkout")
    args = parser.parse_args()
    checkouts = [REPO, *(r.resolve() for r in args.repo)]
    emit_machine(processes=args.processes, rounds=args.rounds, idle_seconds=args.idle_seconds)
    rounds = {"child": child_round, "pool": pool_round}
    results: dict[tuple[str, Path], dict[str, list[float]]] = {}
    for n in range(args.rounds):
        for mode in args.modes:
            order = checkouts if n % 2 == 0 else list(reversed(checkouts))
            for repo in order:
                figures = rounds[mode](repo, args.processes, args.idle_seconds)
                row = results.setdefault((mode, repo), {})
                for key, value in figures.items():
                    row.setdefault(key, []).append(value)
                rounded = {k: round(v, 3) for k, v in figures.items()}
                emit("boot_round", mode=mode, repo=str(repo), round=n + 1, seconds=rounded)
    # Seconds, median and range; cpu: per child, cpu_all: every process.
    for (mode, repo), values in results.items():
        emit("worker_boot", mode=mode, repo=str(repo), seconds=describe(values))


if __name__ == "__main__":
    main()
