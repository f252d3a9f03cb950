"""The first edit after ``rifflux serve --watch`` starts, against the edits after it.

Copies a corpus (default the vendored ``tests/corpus/awesome-copilot``) into a fresh
directory, indexes it in-process (hash embedder), then starts ``rifflux serve --watch``
over stdio with no other workers, with the default settings (the startup grace
included), as a user would. Right after the session is initialised (or
``--first-after`` seconds later) it writes a new file with a word no other file has, and
measures from the write until

- ``keyword``: an MCP ``lexical`` search for the word finds the file;
- ``semantic``: an MCP ``semantic`` search with the file's text has it first.

Then ``--rounds`` more edits, one at a time with ``--pause`` seconds between them (the
steady state). Prints one JSON object: each latency, the medians and the first edit's
lead over the steady state.

``--beside-worker`` is the Procfile's case: ``rifflux worker`` (one process) starts at
the same instant as the server (or ``--worker-after`` seconds later); the report then
says whether the server started a local pool, whether it gave way
(``reindex.local_pool_yields``) and how long it lived.

    .venv/bin/python -m benchmarks.watch_first_edit
    .venv/bin/python -m benchmarks.watch_first_edit --repo /work/main   # the code before
    .venv/bin/python -m benchmarks.watch_first_edit --beside-worker [--worker-after 2]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from benchmarks.harness import REPO, VENDORED_CORPUS, checkout_env, emit

POLL_SECONDS = 0.05


def server_env(repo: Path, db: Path, root: Path, backend: str = "hash") -> dict[str, str]:
    return checkout_env(
        repo,
        RIFFLUX_DB_PATH=str(db),
        RIFFLUX_EMBEDDING_BACKEND=backend,
        RIFFLUX_BASE_DIR=str(root),
        RIFFLUX_LOG_LEVEL="INFO",
    )


def start_worker(env: dict[str, str], root: Path) -> subprocess.Popen[bytes]:
    """``rifflux worker`` with one process, as the Procfile starts it."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from rifflux.cli import main; main()",
            "worker",
            "--processes",
            "1",
        ],
        env=env,
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def index_corpus(repo: Path, env: dict[str, str], root: Path) -> None:
    """The corpus indexed before the server starts, so its catch-up job has nothing to do."""
    code = "import sys; from rifflux.config import Settings; from rifflux.index.indexer import "
    code += "Indexer; Indexer(Settings.from_env()).run([sys.argv[1]])"
    subprocess.run(
        [sys.executable, "-c", code, str(root)],
        env=env,
        cwd=repo,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def edit_text(word: str) -> str:
    return (
        f"# Note {word}\n\nThe release checklist for {word} names the owner of each step, "
        "the rollback plan and the dashboards to watch after the deploy.\n"
    )


async def _found(session: ClientSession, mode: str, query: str, path: str, top: int) -> bool:
    result = await session.call_tool("search_rifflux", {"query": query, "mode": mode, "top_k": top})
    if result.is_error or result.structured_content is None:
        return False
    return any(r["path"].endswith(path) for r in result.structured_content["results"][:top])


async def one_edit(session: ClientSession, root: Path, timeout: float) -> dict[str, float | None]:
    """Write one new file; seconds until it is keyword- and semantically searchable."""
    word = "zq" + uuid.uuid4().hex[:10]
    rel = f"edits/{word}.md"
    text = edit_text(word)
    target = root / rel
    target.parent.mkdir(exist_ok=True)
    written = time.monotonic()
    target.write_text(text, encoding="utf-8")
    keyword: float | None = None
    semantic: float | None = None
    while time.monotonic() - written < timeout and semantic is None:
        if keyword is None and await _found(session, "lexical", word, rel, 5):
            keyword = time.monotonic() - written
        if keyword is not None and await _found(session, "semantic", text, rel, 1):
            semantic = time.monotonic() - written
        await asyncio.sleep(POLL_SECONDS)
    return {"keyword_s": keyword, "semantic_s": semantic}


async def live_workers(session: ClientSession) -> int:
    result = await session.call_tool("index_status", {})
    status = result.structured_content or {}
    return int(status.get("live_workers", {}).get("count", 0))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="rifflux-watch-bench-"))
    beside: subprocess.Popen[bytes] | None = None
    try:
        root = work / "corpus"
        shutil.copytree(args.corpus, root)
        db = work / "index" / "index.db"
        env = server_env(args.repo, db, root, args.backend)
        index_corpus(args.repo, env, root)
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "rifflux.mcp", "--transport", "stdio", "--watch", str(root)],
            env=env,
            cwd=str(root),
        )
        with open(work / "server.log", "w", encoding="utf-8") as errlog:
            started = time.monotonic()
            if args.beside_worker and args.worker_after == 0:
                beside = start_worker(env, root)
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                ready = time.monotonic() - started
                if args.beside_worker and args.worker_after > 0:
                    await asyncio.sleep(max(0.0, args.worker_after - ready))
                    beside = start_worker(env, root)
                await asyncio.sleep(args.first_after)
                workers_before = await live_workers(session)
                first = await one_edit(session, root, args.timeout)
                steady = []
                for _ in range(args.rounds):
                    await asyncio.sleep(args.pause)
                    steady.append(await one_edit(session, root, args.timeout))
        out = report(args, ready, workers_before, first, steady)
        out["server_pool"] = pool_events((work / "server.log").read_text(encoding="utf-8"))
        return out
    finally:
        if beside is not None:
            beside.terminate()
            beside.wait(60)
        shutil.rmtree(work, ignore_errors=True)


def pool_events(log_text: str) -> dict[str, Any]:
    """Whether the server started its local pool, and whether and when it gave way, from
    its log (JSON lines at level INFO)."""
    at: dict[str, float] = {}
    for line in log_text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        name = event.get("event") if isinstance(event, dict) else None
        if name in ("workers.local_pool_started", "reindex.local_pool_yields") and name not in at:
            at[name] = datetime.datetime.fromisoformat(event["timestamp"]).timestamp()
    started = at.get("workers.local_pool_started")
    gave_way = at.get("reindex.local_pool_yields")
    return {
        "started": started is not None,
        "gave_way": gave_way is not None,
        "lived_s": None if started is None or gave_way is None else round(gave_way - started, 3),
    }


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def report(
    args: argparse.Namespace,
    ready: float,
    workers_before: int,
    first: dict[str, float | None],
    steady: list[dict[str, float | None]],
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "repo": str(args.repo),
        "corpus": str(args.corpus),
        "first_after_s": args.first_after,
        "session_ready_s": round(ready, 3),
        "live_workers_before_first_edit": workers_before,
        "first": {k: None if v is None else round(v, 3) for k, v in first.items()},
        "steady": [{k: None if v is None else round(v, 3) for k, v in s.items()} for s in steady],
    }
    for key in ("keyword_s", "semantic_s"):
        median = _median([s[key] for s in steady])
        out[f"steady_median_{key}"] = median
        value = first[key]
        out[f"first_minus_steady_{key}"] = (
            None if value is None or median is None else round(value - median, 3)
        )
    out["load_average"] = os.getloadavg()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="the Rifflux checkout to run")
    parser.add_argument("--corpus", type=Path, default=VENDORED_CORPUS)
    parser.add_argument(
        "--backend",
        choices=["hash", "onnx"],
        default="hash",
        help="the embedder (onnx: index a small --corpus, ~10 chunks/s)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="steady-state edits")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between edits")
    parser.add_argument(
        "--first-after", type=float, default=0.0, help="seconds after startup to the first edit"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="per edit")
    parser.add_argument(
        "--beside-worker", action="store_true", help="start `rifflux worker` with the server"
    )
    parser.add_argument(
        "--worker-after",
        type=float,
        default=0.0,
        help="with --beside-worker: start it this many seconds after the server",
    )
    args = parser.parse_args()
    emit("watch_first_edit", **asyncio.run(run(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
