"""Hybrid latency with the query embedded beside the lexical half (issue 22), before vs after.

    .venv/bin/python benchmarks/hybrid_parallel.py --before CHECKOUT --backend onnx \\
        --workdir /tmp/hybrid-onnx [--corpus DIR] [--rounds 3]

Indexes ``--corpus`` (default the vendored ``tests/corpus/awesome-copilot``) once with
this checkout's in-process Indexer into ``--workdir`` (kept: a later run reuses it), then
alternates rounds, before then after: each round runs in a fresh process of that checkout
(its own ``.venv``) every query of ``benchmarks/awesome_copilot_queries.jsonl`` in
``lexical``, ``semantic`` and ``hybrid`` mode, query cache off, the GIL switch interval
of the MCP server, after one warm-up pass,
and checks that both sides return the same results. Prints the median over rounds of
each side's p50 and p95 (ms).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO / "tests" / "corpus" / "awesome-copilot"
QUERIES = REPO / "benchmarks" / "awesome_copilot_queries.jsonl"
MODES = ("lexical", "semantic", "hybrid")
SWITCH_INTERVAL_S = 0.0005
"""The MCP server's GIL switch interval (rifflux/mcp/server.py), so threads hand over
the GIL as they do there."""


def measure(db: Path) -> dict[str, Any]:
    """One latency pass in this process (whichever checkout is on sys.path)."""
    from rifflux.config import Settings
    from rifflux.search.request import SearchRequest
    from rifflux.search.service import SearchService

    sys.setswitchinterval(SWITCH_INTERVAL_S)
    queries = [json.loads(line)["query"] for line in QUERIES.read_text().splitlines() if line]
    settings = Settings.from_env().with_overrides(db_path=db, query_cache_size=0)
    service = SearchService(settings)
    samples: dict[str, list[float]] = {}
    answers: dict[str, list[Any]] = {}
    for mode in MODES:
        requests = [SearchRequest.from_arguments({"query": q, "mode": mode}) for q in queries]
        answers[mode] = [service.search_response(r)["results"] for r in requests]  # warm-up
        times = []
        for request in requests:
            start = time.perf_counter()
            service.search_response(request)
            times.append((time.perf_counter() - start) * 1000)
        samples[mode] = times
    service.close()
    return {"samples": samples, "answers": answers}


def side_env(checkout: Path, backend: str, onnx_threads: int = 0) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")}
    env.update(RIFFLUX_EMBEDDING_BACKEND=backend, PYTHONPATH=str(checkout))
    if onnx_threads:
        env["RIFFLUX_ONNX_THREADS"] = str(onnx_threads)
    return env


def run_side(checkout: Path, db: Path, backend: str, onnx_threads: int) -> dict[str, Any]:
    python = str(checkout / ".venv" / "bin" / "python")
    out = subprocess.run(
        [python, str(Path(__file__).resolve()), "--measure", str(db)],
        env=side_env(checkout, backend, onnx_threads),
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


def build(db: Path, corpus: Path, backend: str) -> None:
    if db.exists():
        return
    code = "import sys; from rifflux.config import Settings; from rifflux.index.indexer "
    code += "import Indexer; Indexer(Settings.from_env()).run([sys.argv[1]])"
    env = side_env(REPO, backend)
    env.update(RIFFLUX_DB_PATH=str(db), RIFFLUX_BASE_DIR=str(corpus))
    subprocess.run([sys.executable, "-c", code, str(corpus)], env=env, cwd=REPO, check=True)


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="checkout of the code before (with .venv)")
    parser.add_argument("--backend", default="hash", choices=["hash", "onnx"])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rifflux-hybrid-parallel"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--onnx-threads", type=int, default=0, help="RIFFLUX_ONNX_THREADS of the search"
    )
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure)))
        return 0
    db = args.workdir / args.backend / "index.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    build(db, args.corpus.resolve(), args.backend)
    sides = {"before": args.before, "after": REPO} if args.before else {"after": REPO}
    stats: dict[str, dict[str, list[tuple[float, float]]]] = {s: {} for s in sides}
    answers: dict[str, Any] = {}
    for _ in range(args.rounds):
        for side, checkout in sides.items():
            result = run_side(checkout, db, args.backend, args.onnx_threads)
            answers[side] = result["answers"]
            for mode, samples in result["samples"].items():
                stats[side].setdefault(mode, []).append(percentiles(samples))
    threads = args.onnx_threads or "default"
    print(f"backend {args.backend}, onnx threads {threads}, {db}, load {os.getloadavg()}")
    for side, modes in stats.items():
        for mode, pairs in modes.items():
            p50 = statistics.median(p for p, _ in pairs)
            p95 = statistics.median(p for _, p in pairs)
            print(f"{side:7s} {mode:9s} p50 {p50:7.2f} ms  p95 {p95:7.2f} ms")
    if "before" in answers:
        print("results identical:", answers["before"] == answers["after"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
