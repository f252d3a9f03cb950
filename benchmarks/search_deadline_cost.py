"""What the search deadline and the linear glob matcher cost (issue 20), before vs after.

    .venv/bin/python benchmarks/search_deadline_cost.py --before ../main [--rounds 5]

Builds one hash-embedded index of awesome-copilot (this checkout's in-process Indexer;
the schema is the same on both sides), then alternates rounds, before then after: each
round runs the latency pass in a fresh process of that checkout (its own ``.venv``):
every query of ``benchmarks/awesome_copilot_queries.jsonl`` once per configuration
(lexical, semantic, hybrid, and hybrid with a ``path_glob``), query cache off, after one
warm-up pass. It prints the machine, then per configuration the median over rounds of
each side's p50 and p95 (ms). Interleaving keeps both sides under the same load.

Then a microbenchmark of glob matching over the corpus's paths: the regex translation of
before (copied below, verbatim) against :func:`rifflux.search.globs.compile_glob`, best
of 7 passes over every path, per glob.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "corpora" / "awesome-copilot"
QUERIES = REPO / "benchmarks" / "awesome_copilot_queries.jsonl"
CONFIGS: dict[str, dict[str, Any]] = {
    "lexical": {"mode": "lexical"},
    "semantic (hash)": {"mode": "semantic"},
    "hybrid (hash)": {"mode": "hybrid"},
    "hybrid, path_glob **/*.md": {"mode": "hybrid", "path_glob": "**/*.md"},
    "hybrid, path_glob skills/**": {"mode": "hybrid", "path_glob": "skills/**"},
}
GLOBS = ["**/*.md", "docs/**", "agents/*.agent.md", "skills/**/*.md", "**/README.md", "*/*.md"]


def old_glob_regex(pattern: str) -> re.Pattern[str]:
    """rifflux/search/filters.py: glob_regex before issue 20, verbatim."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                i += 2
                if i < n and pattern[i] == "/":
                    out.append("(?:.*/)?")
                    i += 1
                else:
                    out.append(".*")
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = _class_end(pattern, i)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                escaped = body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
                out.append(f"[{'^' if negate else ''}{escaped}]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _class_end(pattern: str, start: int) -> int:
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    return pattern.find("]", j)


def measure(db: Path) -> dict[str, list[float]]:
    """One latency pass in this process (whichever checkout is on sys.path)."""
    from rifflux.config import Settings
    from rifflux.search.request import SearchRequest
    from rifflux.search.service import SearchService

    queries = [json.loads(line)["query"] for line in QUERIES.read_text().splitlines() if line]
    settings = Settings.from_env().with_overrides(db_path=db, query_cache_size=0)
    service = SearchService(settings)
    samples: dict[str, list[float]] = {}
    for name, options in CONFIGS.items():
        requests = [SearchRequest.from_arguments({"query": q, **options}) for q in queries]
        for request in requests:  # warm-up
            service.search_response(request)
        times = []
        for request in requests:
            start = time.perf_counter()
            service.search_response(request)
            times.append((time.perf_counter() - start) * 1000)
        samples[name] = times
    service.close()
    return samples


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


def run_side(checkout: Path, db: Path) -> dict[str, list[float]]:
    python = checkout / ".venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")}
    env.update(RIFFLUX_EMBEDDING_BACKEND="hash", PYTHONPATH=str(checkout))
    out = subprocess.run(
        [str(python), str(Path(__file__).resolve()), "--measure", str(db)],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.splitlines()[-1]))


def build_index(corpus: Path, workdir: Path) -> Path:
    from rifflux.config import Settings
    from rifflux.index.indexer import Indexer

    db = workdir / "index.db"
    settings = Settings(db_path=db, base_dir=corpus, embedding_backend="hash")
    Indexer(settings).run([corpus])
    return db


def glob_micro(corpus: Path) -> list[tuple[str, int, float, float]]:
    from rifflux.search.globs import compile_glob

    paths = sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*") if p.is_file())
    rows = []
    for glob in GLOBS:
        old, new = old_glob_regex(glob), compile_glob(glob)
        hits = [bool(old.fullmatch(p)) for p in paths]
        assert hits == [new.matches(p) for p in paths], glob
        best: dict[str, float] = {}
        for name, match in (("old", old.fullmatch), ("new", new.matches)):
            passes = []
            for _ in range(7):
                start = time.perf_counter()
                for path in paths:
                    match(path)
                passes.append(time.perf_counter() - start)
            best[name] = min(passes) * 1e6 / len(paths)
        rows.append((glob, sum(hits), best["old"], best["new"]))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="checkout of the code before (with .venv)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    if not args.corpus.is_dir():
        parser.error(f"no corpus at {args.corpus}; pass --corpus")
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
    print(f"corpus: {args.corpus}")
    if args.before:
        with tempfile.TemporaryDirectory(prefix="rifflux-deadline-") as tmp:
            db = build_index(args.corpus, Path(tmp))
            sides = {"before": args.before.resolve(), "after": REPO}
            rounds: dict[str, list[dict[str, list[float]]]] = {s: [] for s in sides}
            for round_no in range(args.rounds):
                for side, checkout in sides.items():
                    rounds[side].append(run_side(checkout, db))
                print(f"round {round_no + 1}/{args.rounds} done, load {os.getloadavg()[0]:.2f}")
            print(f"\n{'configuration':32} {'before p50/p95':>18} {'after p50/p95':>18}")
            for name in CONFIGS:
                cells = []
                for side in sides:
                    p50s, p95s = zip(*(percentiles(r[name]) for r in rounds[side]), strict=True)
                    cells.append(f"{statistics.median(p50s):.2f} / {statistics.median(p95s):.2f}")
                print(f"{name:32} {cells[0]:>18} {cells[1]:>18}")
    print(f"\n{'glob':22} {'hits':>5} {'old µs/path':>12} {'new µs/path':>12}")
    for glob, hits, old, new in glob_micro(args.corpus):
        print(f"{glob:22} {hits:>5} {old:>12.3f} {new:>12.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
