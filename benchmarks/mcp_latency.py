"""search_rifflux tool-call latency over stdio, per mode, through a real MCP session.

Spawns ``rifflux serve`` (stdio) on an index and times complete tool calls (request →
JSON result) from an ``mcp`` client. Without ``--db``, a hash index of ``--corpus``
(default the vendored sample) is built first; on the whole corpus:

    .venv/bin/rifflux index --in-process ../shared/corpora/awesome-copilot --db /tmp/ac/index.db
    .venv/bin/python -m benchmarks.mcp_latency --db /tmp/ac/index.db
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from benchmarks.harness import VENDORED_CORPUS, build_index, emit, emit_machine, percentiles
from benchmarks.index_and_search import QUERIES


async def measure(db: Path, backend: str, rounds: int) -> dict[str, object]:
    env = {**os.environ, "RIFFLUX_DB_PATH": str(db), "RIFFLUX_EMBEDDING_BACKEND": backend}
    env["RIFFLUX_LOG_LEVEL"] = "WARNING"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "rifflux.mcp", "--transport", "stdio"], env=env
    )
    results: dict[str, object] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for mode in ("lexical", "semantic", "hybrid"):
            args = {"query": QUERIES[0], "top_k": 10, "mode": mode}
            await session.call_tool("search_rifflux", args)  # warm-up
            timings = []
            for _ in range(rounds):
                for query in QUERIES:
                    t0 = time.perf_counter()
                    result = await session.call_tool(
                        "search_rifflux", {"query": query, "top_k": 10, "mode": mode}
                    )
                    timings.append((time.perf_counter() - t0) * 1000)
                    assert not result.is_error, result.content
            results[mode] = percentiles(timings)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="an index (default: a hash index of --corpus)")
    parser.add_argument("--corpus", type=Path, default=VENDORED_CORPUS)
    parser.add_argument("--backend", default="auto", help="must match the index's embedder")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rifflux-mcp-") as work:
        if args.db is None:
            args.backend = "hash"
            args.db = build_index(args.corpus, Path(work) / "index.db")
        emit_machine(db=str(args.db), backend=args.backend, transport="stdio")
        for mode, ms in asyncio.run(measure(args.db, args.backend, args.rounds)).items():
            emit("mcp_search", mode=mode, ms=ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
