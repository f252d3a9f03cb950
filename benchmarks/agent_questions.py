"""Agent-style questions through MCP on awesome-copilot: latency idle and while a
reindex embeds beside the searches.

Agents ask in sentences, not keywords. The questions are the natural-language queries
of ``awesome_copilot_queries.jsonl`` (styles ``question`` and ``paraphrase``, both
splits: 48 queries of 10.5 words on average). One ``rifflux serve`` over stdio, query
cache off, on an index built beforehand with the same embedder, e.g.:

    RIFFLUX_EMBEDDING_BACKEND=onnx RIFFLUX_DB_PATH=W/index.db \\
        .venv/bin/rifflux index W/corpus --in-process
    nice -n 5 .venv/bin/python -m benchmarks.agent_questions --db W/index.db \\
        --corpus W/corpus --backend onnx

1. **idle**: ``--rounds`` passes over the questions per mode (lexical, semantic,
   hybrid), after one warm-up call per mode.
2. **busy**: ``--edits`` files of the corpus get a new paragraph (text taken from other
   files of the corpus, so the embedder has real work), then a ``reindex`` of the corpus
   in the background (the server starts its local worker pool, as a desktop host's
   server does); the questions are asked in turn, modes interleaved, until the job ends.
   The corpus is changed in place: pass a copy.

Prints one JSON report: p50 / p95 / p99 per mode and phase, the busy ÷ idle ratio of p95,
the job's duration and chunks embedded, the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters

from benchmarks.harness import REPO, checkout_python, emit, machine, percentiles
from benchmarks.scale_mcp import MODES, call, job_state, open_session, timed_search

QUERIES = Path(__file__).resolve().parent / "awesome_copilot_queries.jsonl"
STYLES = ("question", "paraphrase")
STATUS_EVERY_SECONDS = 2.0


def questions(path: Path) -> list[str]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["query"] for r in rows if r.get("style") in STYLES]


def edit_corpus(corpus: Path, count: int, seed: int) -> int:
    """Append to ``count`` files a paragraph made of lines from other files."""
    files = sorted(corpus.rglob("*.md"))
    rng = random.Random(seed)
    lines = [
        line
        for path in rng.sample(files, min(200, len(files)))
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if len(line.split()) >= 8 and not line.startswith(("#", "`", "|", "-"))
    ]
    picked = rng.sample(files, min(count, len(files)))
    for n, path in enumerate(picked):
        paragraph = " ".join(rng.sample(lines, min(6, len(lines))))
        with path.open("a", encoding="utf-8") as out:
            out.write(f"\n\n## Agent edit {seed}-{n}\n\n{paragraph}\n")
    return len(picked)


async def idle(session: Any, asked: list[str], rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in MODES:
        await timed_search(session, asked[0], mode)  # warm-up: cache map, model load
        times = [await timed_search(session, q, mode) for _ in range(rounds) for q in asked]
        out[mode] = percentiles(times)
    return out


async def busy(session: Any, corpus: Path, asked: list[str], edits: int) -> dict[str, Any]:
    edited = edit_corpus(corpus, edits, seed=int(time.time()))
    started = time.perf_counter()
    job = await call(session, "reindex", {"path": str(corpus), "background": True})
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    n, state, checked = 0, "queued", time.perf_counter()
    while state not in ("completed", "failed", "cancelled"):
        mode = MODES[n % len(MODES)]
        times[mode].append(await timed_search(session, asked[(n // 3) % len(asked)], mode))
        n += 1
        if time.perf_counter() - checked >= STATUS_EVERY_SECONDS:
            checked = time.perf_counter()
            state = await job_state(session, job["job_id"])
        if time.perf_counter() - started > 3600:
            break
    status = await call(session, "index_status", {})
    recent = status.get("recent_jobs", [{}])[0]
    out: dict[str, Any] = {mode: percentiles(times[mode]) for mode in MODES}
    out.update(
        edited_files=edited,
        job_state=state,
        job_s=round(time.perf_counter() - started, 1),
        chunks_embedded=recent.get("chunks_embedded"),
    )
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")}
    env.update(
        RIFFLUX_DB_PATH=str(args.db),
        RIFFLUX_EMBEDDING_BACKEND=args.backend,
        RIFFLUX_ALLOWED_ROOTS=str(args.corpus.resolve()),
        RIFFLUX_QUERY_CACHE_SIZE="0",
        RIFFLUX_LOG_LEVEL="WARNING",
    )
    if args.worker_nice is not None:
        env["RIFFLUX_WORKER_NICE"] = str(args.worker_nice)
    params = StdioServerParameters(
        command=checkout_python(args.repo),
        args=["-m", "rifflux.mcp", "--transport", "stdio"],
        env=env,
        cwd=str(args.repo),
    )
    asked = questions(args.queries)
    report: dict[str, Any] = {
        "machine": machine(),
        "repo": str(args.repo),
        "worker_nice": args.worker_nice,
        "questions": len(asked),
        "mean_words": round(sum(len(q.split()) for q in asked) / len(asked), 1),
        "load_start": os.getloadavg(),
    }
    async with AsyncExitStack() as stack:
        with (args.db.parent / "agent-server.log").open("w") as errlog:
            session, _ = await open_session(stack, params, errlog)
            report["idle"] = await idle(session, asked, args.rounds)
            report["load_after_idle"] = os.getloadavg()
            if args.edits:
                report["busy"] = await busy(session, args.corpus, asked, args.edits)
                report["busy_p95_over_idle"] = {
                    mode: round(report["busy"][mode]["p95"] / report["idle"][mode]["p95"], 2)
                    for mode in MODES
                    if report["busy"][mode].get("n")
                }
    report["load_end"] = os.getloadavg()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="an index of --corpus")
    parser.add_argument("--corpus", type=Path, required=True, help="changed in place")
    parser.add_argument("--backend", default="onnx", choices=("hash", "onnx"))
    parser.add_argument("--queries", type=Path, default=QUERIES)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--edits", type=int, default=300, help="0: idle only")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to serve")
    parser.add_argument("--worker-nice", type=int, help="RIFFLUX_WORKER_NICE of the pool")
    args = parser.parse_args()
    emit("agent_questions", **asyncio.run(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
