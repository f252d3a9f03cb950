"""Full MCP ``reindex`` against the original Rifflux, alternated in one run: the ratio.

The original (``../shared/peers``, installed with ``install-original.sh`` into
``--original`` when missing) and ours (``--repo``, default this checkout, run with its
``.venv`` Python, or this one's) each index the same corpus (default awesome-copilot)
with the hash embedder, in turns A B A B … for ``--rounds`` rounds. Every turn is a
fresh server over stdio in a fresh directory with an empty index, driven by a real
``mcp`` client, and starts its own workers as it does by default (ours: a local pool on
demand; the original: in its own process). Timed: the server's start (spawn to
initialised session) and the ``reindex`` call (``{"path": corpus}``, waiting),
separately. Prints each turn, the medians and the ratio original ÷ ours of the median
``reindex`` calls.

    nice -n 10 .venv/bin/python -m benchmarks.original_ratio --rounds 3

Only a ratio measured in the same run counts (``../shared/peers/README.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from benchmarks.harness import (
    DEFAULT_CORPUS,
    REPO,
    SHARED,
    checkout_env,
    checkout_python,
    emit,
    machine,
)

INSTALLER = SHARED / "peers" / "install-original.sh"


def original_python(dest: Path) -> Path:
    """The original's Python, installed into ``dest`` first when missing."""
    python = dest / "venv" / "bin" / "python"
    if not python.exists():
        subprocess.run(["bash", str(INSTALLER), str(dest)], check=True)
    return python


def server(which: str, args: argparse.Namespace, work: Path) -> StdioServerParameters:
    settings = {
        "RIFFLUX_DB_PATH": str(work / "index.db"),
        "RIFFLUX_EMBEDDING_BACKEND": "hash",
        "RIFFLUX_LOG_LEVEL": "WARNING",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")} | settings
    if which == "ours":
        # checkout_env drops every inherited RIFFLUX_* variable: the settings go again.
        ours = settings | dict(args.ours_env)
        env = checkout_env(args.repo, env, RIFFLUX_ALLOWED_ROOTS=str(args.corpus), **ours)
        command = checkout_python(args.repo)
        argv = ["-m", "rifflux.mcp", "--transport", "stdio"]
        cwd = args.repo
    else:
        command, argv = str(args.original_python), ["-m", "rifflux.mcp.server"]
        cwd = work
    return StdioServerParameters(command=command, args=argv, env=env, cwd=str(cwd))


async def one_turn(which: str, args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"rifflux-ratio-{which}-"))
    try:
        with (work / "server.log").open("w") as errlog:
            t0 = time.perf_counter()
            async with (
                stdio_client(server(which, args, work), errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                started_s = time.perf_counter() - t0
                t1 = time.perf_counter()
                result = await session.call_tool("reindex", {"path": str(args.corpus)})
                reindex_s = time.perf_counter() - t1
                if result.is_error:
                    raise RuntimeError(f"{which}: reindex failed: {result.content}")
                answer = result.structured_content or {}
        return {
            "impl": which,
            "server_start_s": round(started_s, 3),
            "reindex_s": round(reindex_s, 3),
            "indexed": answer.get("indexed_files", answer.get("indexed")),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repo", type=Path, default=REPO, help="our checkout to run")
    parser.add_argument(
        "--original", type=Path, default=REPO / ".bench" / "original", help="its install dir"
    )
    parser.add_argument(
        "--ours-env",
        action="append",
        default=[],
        type=lambda text: tuple(text.split("=", 1)),
        metavar="RIFFLUX_NAME=VALUE",
        help="a setting for our server only (e.g. RIFFLUX_GREP_INDEX=0); repeatable",
    )
    args = parser.parse_args()
    args.corpus = args.corpus.resolve()
    args.repo = args.repo.resolve()
    args.original_python = original_python(args.original.resolve())
    turns = []
    for round_no in range(args.rounds):
        for which in ("original", "ours") if round_no % 2 else ("ours", "original"):
            turn = asyncio.run(one_turn(which, args))
            turn["round"] = round_no + 1
            turn["load_avg_1m"] = round(os.getloadavg()[0], 2)
            print(json.dumps(turn), file=sys.stderr, flush=True)
            turns.append(turn)
    medians = {
        which: round(statistics.median(t["reindex_s"] for t in turns if t["impl"] == which), 3)
        for which in ("ours", "original")
    }
    pairs = [
        round(o["reindex_s"] / u["reindex_s"], 2)
        for o, u in zip(
            (t for t in turns if t["impl"] == "original"),
            (t for t in turns if t["impl"] == "ours"),
            strict=True,
        )
    ]
    report = {
        "machine": machine(),
        "corpus": str(args.corpus),
        "ours": str(args.repo),
        "commit": subprocess.run(
            ["git", "-C", str(args.repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip(),
        "embedder": "hash",
        "turns": turns,
        "median_reindex_s": medians,
        "ratio_per_round": pairs,
        "ratio_original_over_ours": round(medians["original"] / medians["ours"], 2),
    }
    emit("original_ratio", **report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
