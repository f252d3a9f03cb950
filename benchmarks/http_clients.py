"""Many MCP clients at once over streamable HTTP: searches/s and server CPU per search.

Starts ``rifflux serve --transport http`` on an index (``--db``; without it, a hash
index of ``--corpus``, default the vendored sample, built first), then one load process
(this one) runs ``--clients`` concurrent MCP client sessions, each calling
``search_rifflux`` back to back with the queries of ``benchmarks.index_and_search``
in mixed modes (lexical, semantic, hybrid in turn), query cache off. After a warm-up it
counts the searches answered in ``--seconds`` and the CPU time the server's processes
(the server and every descendant: HTTP workers, never a worker pool here) spent in
that window, read from ``/proc``. On the whole corpus:

    RIFFLUX_EMBEDDING_BACKEND=hash .venv/bin/rifflux index --in-process \\
        ../shared/corpora/awesome-copilot --db /tmp/ac/index.db
    nice -n 10 .venv/bin/python -m benchmarks.http_clients --db /tmp/ac/index.db \\
        --http-workers 1 2
    # before: another checkout's server (no --http-workers flag there)
    nice -n 10 .venv/bin/python -m benchmarks.http_clients --db /tmp/ac/index.db \\
        --server-python ../main/.venv/bin/python --http-workers 0
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from benchmarks.harness import (
    VENDORED_CORPUS,
    build_index,
    emit,
    emit_machine,
    free_port,
    percentiles,
    tree_cpu_seconds,
    wait_until_listening,
)
from benchmarks.index_and_search import QUERIES

MODES = ("lexical", "semantic", "hybrid")


class Load:
    """``clients`` sessions searching back to back; counts calls inside the window."""

    def __init__(self, url: str, clients: int) -> None:
        self.url = url
        self.clients = clients
        self.measuring = False
        self.stop = False
        self.latencies_ms: list[float] = []
        self.errors = 0

    async def client(self, number: int) -> None:
        async with (
            httpx2.AsyncClient(timeout=60) as http,
            streamable_http_client(self.url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            call = number
            while not self.stop:
                query = QUERIES[call % len(QUERIES)]
                mode = MODES[call % len(MODES)]
                call += 1
                t0 = time.perf_counter()
                result = await session.call_tool(
                    "search_rifflux", {"query": query, "mode": mode, "top_k": 10}
                )
                elapsed = (time.perf_counter() - t0) * 1000
                if self.measuring:
                    self.latencies_ms.append(elapsed)
                    self.errors += int(bool(result.is_error))

    async def run(self, server_pid: int, warmup: float, seconds: float) -> dict[str, object]:
        tasks = [asyncio.create_task(self.client(n)) for n in range(self.clients)]
        await asyncio.sleep(warmup)
        before = tree_cpu_seconds(server_pid)
        self.measuring = True
        t0 = time.perf_counter()
        await asyncio.sleep(seconds)
        self.measuring = False
        window = time.perf_counter() - t0
        after = tree_cpu_seconds(server_pid)
        self.stop = True
        await asyncio.gather(*tasks, return_exceptions=True)
        cpu = sum(after[pid] - before.get(pid, 0.0) for pid in after)
        count = len(self.latencies_ms)
        return {
            "searches": count,
            "searches_per_s": round(count / window, 1),
            "server_cpu_ms_per_search": round(cpu * 1000 / max(count, 1), 2),
            "server_cores_used": round(cpu / window, 2),
            "server_processes": len(after),
            "ms": percentiles(self.latencies_ms, digits=1),
            "errors": self.errors,
        }


def measure(args: argparse.Namespace, workers: int) -> dict[str, object]:
    port = free_port()
    env = {
        **os.environ,
        "RIFFLUX_DB_PATH": str(args.db.resolve()),
        "RIFFLUX_EMBEDDING_BACKEND": args.backend,
        "RIFFLUX_QUERY_CACHE_SIZE": "0",
        "RIFFLUX_LOG_LEVEL": "WARNING",
    }
    command = [str(args.server_python), "-m", "rifflux.cli", "serve"]
    command += ["--transport", "http", "--port", str(port)]
    if workers > 0:
        command += ["--http-workers", str(workers)]
    proc = subprocess.Popen(command, env=env, cwd=args.cwd, stdin=subprocess.DEVNULL)
    try:
        wait_until_listening(proc, port, timeout=120)
        time.sleep(args.boot_seconds)  # Every HTTP worker up, not only the first.
        load = Load(f"http://127.0.0.1:{port}/mcp", args.clients)
        report = asyncio.run(load.run(proc.pid, args.warmup, args.seconds))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"http_workers": workers or "flag not passed", **report}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", type=Path, help="an index database (default: a hash index of --corpus)"
    )
    parser.add_argument("--corpus", type=Path, default=VENDORED_CORPUS)
    parser.add_argument("--cwd", type=Path, default=Path.cwd(), help="the server's directory")
    parser.add_argument("--backend", default="hash", help="the index's embedding backend")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window")
    # Each HTTP worker warms its own SQLite page cache: a short warm-up charges N=2 for it.
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--boot-seconds", type=float, default=5.0)
    parser.add_argument(
        "--http-workers",
        type=int,
        nargs="+",
        default=[1, 2],
        help="one run per value; 0 runs the server without the flag (an older checkout)",
    )
    parser.add_argument(
        "--server-python",
        type=Path,
        default=Path(sys.executable),
        help="the interpreter whose rifflux serves (default: this one)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rifflux-http-") as work:
        if args.db is None:
            args.db = build_index(args.corpus, Path(work) / "index.db", args.backend)
        emit_machine(
            server_python=str(args.server_python),
            db=str(args.db),
            clients=args.clients,
            seconds=args.seconds,
        )
        for workers in args.http_workers:
            emit("http_clients", **measure(args, workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
