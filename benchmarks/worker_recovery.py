"""kill -9 of a worker in the middle of a job → how long until its messages move again.

Runs a job over awesome-copilot files with real worker processes on the SQLite broker,
kills one worker process that holds leased messages, and measures the seconds from the
kill until every message it held was taken again by another worker (or finished), and
until the pool is back at full size. Two setups:

- ``pool``: ``rifflux worker`` (the supervised pool, which hands a dead child's leases
  back at once);
- ``cli``: Dramatiq's own CLI (``python -m dramatiq``), separate single-process
  workers (one per kill, plus one), so the killed worker's messages wait for their
  lease to expire.

    .venv/bin/python benchmarks/worker_recovery.py --files 300 --kills 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from corpus_sample import copy_files

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "corpora" / "awesome-copilot"


def children_of(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def held_by(queue_db: Path, pid: int) -> set[str]:
    conn = sqlite3.connect(queue_db, timeout=30)
    try:
        rows = conn.execute(
            "SELECT message_id FROM messages WHERE state = 'leased' AND lease_owner LIKE ?",
            (f"{socket.gethostname()}:{pid}:%",),
        ).fetchall()
    finally:
        conn.close()
    return {row[0] for row in rows}


def moved_again(queue_db: Path, message_ids: set[str], dead_pid: int) -> bool:
    """True when none of ``message_ids`` is still waiting: each is leased by another
    process or gone (acked)."""
    conn = sqlite3.connect(queue_db, timeout=30)
    try:
        marks = ",".join("?" * len(message_ids))
        rows = conn.execute(
            f"SELECT state, lease_owner FROM messages WHERE message_id IN ({marks})",
            tuple(message_ids),
        ).fetchall()
    finally:
        conn.close()
    dead = f"{socket.gethostname()}:{dead_pid}:"
    return all(state == "leased" and not owner.startswith(dead) for state, owner in rows)


def run(setup: str, corpus: Path, kills: int) -> dict[str, object]:
    sys.path.insert(0, str(REPO))
    from rifflux.config import Settings
    from rifflux.reindex.runner import JobRunner as IndexQueue
    from workers.launcher import worker_environment

    workdir = Path(tempfile.mkdtemp(prefix=f"rifflux-recovery-{setup}-"))
    settings = Settings(
        db_path=workdir / "index.db",
        base_dir=corpus.parent,
        embedding_backend="hash",
        batch_target_bytes=4_000,
    )
    queue_db = workdir / "queue.db"
    env = worker_environment(settings, 2)
    env.update(
        RIFFLUX_LOG_LEVEL="WARNING",
        RIFFLUX_WORKER_ACTORS="rifflux_test_actors",
        RIFFLUX_TEST_EMBED_DELAY="0.5",
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests" / "queue")]),
    )
    log = (workdir / "workers.log").open("ab")
    quiet = {"stdout": log, "stderr": subprocess.STDOUT}
    if setup == "pool":
        command = [sys.executable, "-m", "rifflux.cli", "worker", "--processes", "2"]
        procs = [subprocess.Popen(command, env=env, start_new_session=True, **quiet)]
    else:
        command = [sys.executable, "-m", "dramatiq", "rifflux_test_actors", "--processes", "1"]
        command += ["--threads", "1"]
        # Dramatiq's CLI exits when its child dies: one more CLI than kills keeps one alive.
        procs = [
            subprocess.Popen(command, env=env, start_new_session=True, **quiet)
            for _ in range(kills + 1)
        ]

    def workers() -> list[int]:
        return [pid for proc in procs for pid in children_of(proc.pid)]

    queue = IndexQueue(settings)
    recoveries: list[float] = []
    refills: list[float] = []
    try:
        boot_deadline = time.monotonic() + 120
        while len(workers()) < 2 or len(queue.index_host_workers()) < min(len(procs), 2):
            if time.monotonic() > boot_deadline:
                sys.exit(f"workers did not start; see {workdir / 'workers.log'}")
            time.sleep(0.2)
        job_id = queue.submit([corpus])
        for _ in range(kills):
            while True:
                victim = next((pid for pid in workers() if held_by(queue_db, pid)), None)
                held = held_by(queue_db, victim) if victim is not None else set()
                if victim is not None and held:
                    break
                time.sleep(0.05)
            killed_at = time.perf_counter()
            os.kill(victim, signal.SIGKILL)
            refilled = None
            while True:
                now = time.perf_counter()
                current = workers()
                full = setup == "pool" and len(current) == 2 and victim not in current
                if refilled is None and full:
                    refilled = now - killed_at
                if moved_again(queue_db, held, victim):
                    recoveries.append(now - killed_at)
                    break
                time.sleep(0.02)
            if refilled is not None:
                refills.append(refilled)
            time.sleep(1.0)
        record = queue.wait(job_id, timeout=600)
    finally:
        queue.close()
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.wait()
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "setup": setup,
        "job_state": record.state,
        "kills": kills,
        "recovery_s": [round(r, 2) for r in recoveries],
        "recovery_median_s": round(statistics.median(recoveries), 2),
        "pool_refilled_s": [round(r, 2) for r in refills] or None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--setups", nargs="+", default=["pool", "cli"], choices=["pool", "cli"])
    args = parser.parse_args()
    corpus_dir = Path(tempfile.mkdtemp(prefix="rifflux-recovery-corpus-"))
    try:
        copy_files(args.corpus, corpus_dir / "docs", args.files)
        print(json.dumps({"machine": platform.platform(), "cpus": os.cpu_count()}))
        for setup in args.setups:
            print(json.dumps(run(setup, corpus_dir / "docs", args.kills)), flush=True)
    finally:
        shutil.rmtree(corpus_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
