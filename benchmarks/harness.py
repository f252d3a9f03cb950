"""What every benchmark needs, in one place: where the corpora are, the machine line,
percentiles, the CPU and peak RSS of a process tree, another checkout's interpreter and
environment for before/after runs, and the output format.

Output: one JSON object per line, each naming its ``measure`` (``emit``); a run opens with
a ``machine`` line (``emit_machine``). Everything reads ``/proc``, so it is Linux only.
Benchmarks run from the repository root as modules (``python -m benchmarks.NAME``); they
import ``rifflux`` and this package, never ``tests``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
# The vendored sample (a part of awesome-copilot) ships with the repository; the whole
# corpus (1,727 files) lives in ../shared when the machine has it.
VENDORED_CORPUS = REPO / "tests" / "corpus" / "awesome-copilot"
SHARED_CORPUS = SHARED / "corpora" / "awesome-copilot"
DEFAULT_CORPUS = SHARED_CORPUS if SHARED_CORPUS.is_dir() else VENDORED_CORPUS
SCIFACT = SHARED / "eval" / "scifact"

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def emit(measure: str, **fields: Any) -> None:
    """Print one measure as one JSON line (flushed, so a suite's output streams)."""
    print(json.dumps({"measure": measure, **fields}, default=str), flush=True)


def machine() -> dict[str, Any]:
    """The machine a figure was taken on: CPU, cores, memory, versions, load average."""
    cpu = platform.processor() or "unknown"
    mem_gib = 0.0
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
        mem_kib = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
        mem_gib = round(mem_kib / 2**20, 1)
    except (OSError, StopIteration):
        pass
    import sqlite3

    import numpy

    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "mem_gib": mem_gib,
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "numpy": numpy.__version__,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def emit_machine(**inputs: Any) -> None:
    """The opening line of a run: the machine and the run's inputs."""
    emit("machine", **machine(), **inputs)


def percentiles(samples: Iterable[float], digits: int = 2) -> dict[str, float]:
    """n, p50, p95 and p99 of ``samples`` (nearest rank; p50 the median), rounded."""
    ordered = sorted(samples)
    if not ordered:
        return {"n": 0}
    n = len(ordered)

    def rank(q: float) -> float:
        return round(ordered[min(n - 1, int(q * n))], digits)

    middle = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return {"n": n, "p50": round(middle, digits), "p95": rank(0.95), "p99": rank(0.99)}


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children of all its threads, recursively)."""
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                text = Path(f"/proc/{parent}/task/{task}/children").read_text()
            except OSError:
                continue
            for child in map(int, text.split()):
                found.append(child)
                stack.append(child)
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process, all its threads (0.0 once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def tree_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds of ``pid`` and of each live process below it."""
    return {p: cpu_seconds(p) for p in [pid, *descendants(pid)]}


def status_kib(pid: int, fields: Sequence[str] = ("VmRSS", "VmHWM")) -> dict[str, int]:
    """Fields of ``/proc/PID/status`` in KiB (VmRSS, VmHWM = peak RSS…); empty once gone."""
    values: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in fields:
                values[key] = int(rest.split()[0])
    except OSError:
        return {}
    return values


def command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


class TreeSampler(threading.Thread):
    """Samples a process tree every ``interval`` seconds while it runs: the peak RSS
    (VmHWM) and the last CPU seconds seen of each process, which survive its exit."""

    def __init__(self, root: int, interval: float = 0.5, include_root: bool = True) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.interval = interval
        self.include_root = include_root
        self.peak_kib: dict[int, int] = {}
        self.cpu: dict[int, float] = {}
        self.commands: dict[int, str] = {}
        self._stop_event = threading.Event()

    def sample(self) -> None:
        pids = descendants(self.root)
        if self.include_root:
            pids.insert(0, self.root)
        for pid in pids:
            hwm = status_kib(pid, ("VmHWM",)).get("VmHWM")
            if hwm is None:
                continue
            self.peak_kib[pid] = max(self.peak_kib.get(pid, 0), hwm)
            self.cpu[pid] = max(self.cpu.get(pid, 0.0), cpu_seconds(pid))
            if pid not in self.commands:
                self.commands[pid] = command_line(pid)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.sample()

    def finish(self) -> None:
        """Take a last sample and stop."""
        self.sample()
        self._stop_event.set()
        self.join()


def checkout_python(repo: Path) -> str:
    """A checkout's own virtualenv Python when it has one (its dependencies), else ours."""
    python = repo / ".venv" / "bin" / "python"
    return str(python) if python.exists() else sys.executable


def checkout_env(repo: Path, base: Mapping[str, str] | None = None, **env: str) -> dict[str, str]:
    """An environment that imports ``rifflux`` and ``workers`` from ``repo`` and this
    package from this checkout, with no RIFFLUX_* setting inherited but those given."""
    source = os.environ if base is None else base
    out = {k: v for k, v in source.items() if not k.startswith("RIFFLUX_")}
    out["PYTHONPATH"] = os.pathsep.join([str(repo.resolve()), str(REPO)])
    out.update(env)
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_listening(proc: subprocess.Popen[bytes], port: int, timeout: float) -> None:
    """Return once ``proc`` accepts on ``port``; exit if it dies or the time runs out."""
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"server did not listen on {port} within {timeout:g} s")


def build_index(corpus: Path, db: Path, backend: str = "hash") -> Path:
    """Index ``corpus`` in-process into ``db`` unless it exists; return ``db``."""
    if not db.exists():
        from rifflux.config import Settings
        from rifflux.index.indexer import Indexer
        from rifflux.logs import configure_logging

        configure_logging("WARNING")
        db.parent.mkdir(parents=True, exist_ok=True)
        settings = Settings(db_path=db, base_dir=corpus.parent, embedding_backend=backend)
        Indexer(settings).run([corpus])
    return db
