"""Where a queued job's worker CPU goes: boot, the actors, and everything else.

Runs ``rifflux index CORPUS`` (a local pool of ``RIFFLUX_WORKERS`` processes, the hash
embedder, a fresh index each round) with ``timed_actors`` as the actors module: the real
actors plus a clock per message. For each worker process it reports the CPU it had
used when its Workers started (boot), the CPU of the actors' own threads while they ran
a message, and the rest up to its last message (``other``: the broker's polling, leases
and acks, Dramatiq's threads and middleware, heartbeats, the background publish of the
vector cache). Also the job's wall time (created → finished), when the first message
started, and the idle gaps between one process's messages. ``--repo`` adds a checkout
to alternate with this one.

    nice -n 5 .venv/bin/python benchmarks/worker_overhead.py --rounds 3 --repo /work/main
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_CORPUS = REPO.parent / "shared" / "corpora" / "awesome-copilot"


def python_of(repo: Path) -> str:
    python = repo / ".venv" / "bin" / "python"
    return str(python) if python.exists() else sys.executable


def one_round(repo: Path, corpus: Path) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="rifflux-overhead-"))
    try:
        times = work / "times.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")}
        env.update(
            PYTHONPATH=os.pathsep.join([str(HERE), str(repo)]),
            RIFFLUX_DB_PATH=str(work / "index.db"),
            RIFFLUX_EMBEDDING_BACKEND="hash",
            RIFFLUX_LOG_LEVEL="WARNING",
            RIFFLUX_ALLOWED_ROOTS=str(corpus),
            RIFFLUX_WORKER_ACTORS="timed_actors",
            TIMED_ACTORS_LOG=str(times),
        )
        command = [python_of(repo), "-m", "rifflux.cli", "index", str(corpus), "--json"]
        done = subprocess.run(
            command, env=env, cwd=repo, capture_output=True, text=True, check=True
        )
        report = json.loads(done.stdout)
        if report.get("state") != "completed":
            raise RuntimeError(f"job {report.get('state')}: {done.stderr[-2000:]}")
        return summarise(times, report["created_at"], report["finished_at"])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def summarise(times: Path, created: float, finished: float) -> dict[str, float]:
    boot_cpu: dict[str, float] = {}
    messages: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for line in times.read_text(encoding="ascii").splitlines():
        pid, actor, start, end, thread_cpu, process_cpu = line.split()
        if actor == "BOOT":
            boot_cpu[pid] = float(thread_cpu)  # the process's CPU at that moment
        else:
            messages[pid].append((float(start), float(end), float(thread_cpu), float(process_cpu)))
    actors = other = gaps = 0.0
    for pid, rows in messages.items():
        rows.sort()
        actor_cpu = sum(r[2] for r in rows)
        actors += actor_cpu
        other += max(r[3] for r in rows) - boot_cpu[pid] - actor_cpu
        gaps += sum(b[0] - a[1] for a, b in pairwise(rows))
    first = min(r[0] for rows in messages.values() for r in rows)
    return {
        "job_s": finished - created,
        "first_message_s": first - created,
        "boot_cpu": sum(boot_cpu.values()),
        "actors_cpu": actors,
        "other_cpu": other,
        "gaps_s": gaps,
        "messages": sum(len(rows) for rows in messages.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repo", type=Path, action="append", default=[], help="another checkout")
    args = parser.parse_args()
    checkouts = [REPO, *(r.resolve() for r in args.repo)]
    print(f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"corpus: {args.corpus}; load at start: {os.getloadavg()}")
    results: dict[Path, dict[str, list[float]]] = {}
    for n in range(args.rounds):
        for repo in checkouts if n % 2 == 0 else list(reversed(checkouts)):
            figures = one_round(repo, args.corpus)
            for key, value in figures.items():
                results.setdefault(repo, {}).setdefault(key, []).append(value)
            shown = " ".join(f"{k}={v:.3f}" for k, v in figures.items())
            print(f"round {n + 1} {repo}: {shown}", flush=True)
    print(f"load at end: {os.getloadavg()}")
    print("medians (min-max); CPU seconds summed over the worker processes")
    for repo, values in results.items():
        shown = ", ".join(
            f"{k} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})" for k, v in values.items()
        )
        print(f"{repo}: {shown}")


if __name__ == "__main__":
    main()
