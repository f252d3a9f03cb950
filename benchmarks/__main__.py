"""Run a suite of benchmarks: ``python -m benchmarks SUITE [--corpus DIR]`` from the
repository root; ``python -m benchmarks --list`` names the suites and their steps.

A suite is a list of benchmark modules with small arguments: by default it indexes the
vendored sample (``tests/corpus/awesome-copilot``) with the hash embedder and generates
small corpora, so each suite runs in a minute or a few on two cores. ``--corpus`` points
the corpus-reading steps at another tree (the whole awesome-copilot in ../shared). The
full-size runs, with their figures, are the commands of BENCHMARKS.md.

Every line a suite prints is one JSON object with a ``measure`` key, and a ``benchmark``
key naming the module that measured it; a step's other output (a progress line, a table)
comes as a ``log`` measure. A failed step is a ``failed`` line; the suite goes on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import REPO, VENDORED_CORPUS, emit, emit_machine

# Steps: (module, arguments). "{corpus}" is the suite's corpus, "{work}" a fresh
# directory per step.
SUITES: dict[str, list[tuple[str, list[str]]]] = {
    "indexing": [
        ("queue_profile", ["--backend", "hash", "--corpus", "{corpus}"]),
        ("chunk_speed", ["--corpus", "{corpus}", "--rounds", "1"]),
        ("mcp_reindex", ["--backend", "hash", "--corpus", "{corpus}"]),
        ("edit_job_cost", ["--files", "2000", "--edits", "2", "--workdir", "{work}"]),
        ("publish_delta", ["--files", "300", "--edits", "2", "--workdir", "{work}"]),
        ("watch_first_edit", ["--corpus", "{corpus}", "--rounds", "2"]),
    ],
    "search": [
        ("index_and_search", ["--backend", "hash", "--corpus", "{corpus}", "--rounds", "2"]),
        ("mcp_latency", ["--corpus", "{corpus}", "--rounds", "1"]),
        ("served_check_cost", ["--corpus", "{corpus}", "--rounds", "1"]),
        ("vector_search", ["--sizes", "20000", "--queries", "50"]),
        ("token_estimate", ["--corpus", "{corpus}", "--files", "50"]),
    ],
    "scale": [
        ("lexical_scale", ["--workdir", "{work}", "--files", "300", "--queries", "60"]),
        ("db_size", ["--workdir", "{work}", "--files", "300"]),
        ("scale_run", ["--mcp", "--files", "300", "--workdir", "{work}", "--edits", "20"]),
    ],
    "quality": [
        (
            "awesome_copilot_quality",
            ["--corpus", "{corpus}", "--backend", "hash", "--cache-dir", "{work}"],
        ),
    ],
    "workers": [
        ("broker_idle_cpu", ["--seconds", "3"]),
        ("worker_boot", ["--rounds", "1", "--idle-seconds", "1"]),
        ("worker_topology", ["--corpus", "{corpus}", "--files", "40", "--backend", "hash"]),
        ("query_cache_memory", ["--searches", "200"]),
    ],
    "http": [
        (
            "http_clients",
            ["--corpus", "{corpus}", "--clients", "4", "--seconds", "3", "--warmup", "2"],
        ),
    ],
}


def run_step(module: str, args: list[str]) -> bool:
    """Run one step, relaying its JSON lines tagged with the module; True if it passed."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict) and "measure" in record:
            print(json.dumps({"benchmark": module, **record}, default=str), flush=True)
        elif line.strip():
            emit("log", benchmark=module, text=line)
    code = proc.wait()
    if code:
        emit("failed", benchmark=module, exit_code=code, args=args)
    else:
        emit("step", benchmark=module, seconds=round(time.perf_counter() - started, 1))
    return code == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("suite", nargs="?", choices=[*SUITES, "all"])
    parser.add_argument("--corpus", type=Path, default=VENDORED_CORPUS)
    parser.add_argument("--list", action="store_true", help="list the suites and stop")
    args = parser.parse_args(argv)
    if args.list or args.suite is None:
        for name, steps in SUITES.items():
            print(name)
            for module, step_args in steps:
                print(f"    python -m benchmarks.{module} {' '.join(step_args)}")
        return 0
    names = list(SUITES) if args.suite == "all" else [args.suite]
    emit_machine(suites=names, corpus=str(args.corpus))
    failed = 0
    for name in names:
        for module, step_args in SUITES[name]:
            with tempfile.TemporaryDirectory(prefix=f"rifflux-bench-{module}-") as work:
                filled = [
                    a.replace("{corpus}", str(args.corpus.resolve())).replace("{work}", work)
                    for a in step_args
                ]
                failed += not run_step(module, filled)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
