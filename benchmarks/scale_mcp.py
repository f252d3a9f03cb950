"""The scale run through the real MCP server (``benchmarks.scale_run --mcp``): one command per size.

Processes as ``make run`` starts them (the Procfile): ``rifflux worker`` (one supervised
pool, ``--worker-processes``, default the CPU count) beside the MCP server, here over
stdio with a real ``mcp`` client session. Everything is measured through MCP tool calls:

1. full index: ``reindex`` of the generated corpus on an empty index, waiting (the
   server waits an hour at most); ``--full-background``: ``background: true``, then
   ``index_status`` every 0.5 s until the job ends;
2. idle search latency: ``search_rifflux`` p50/p95/p99 per mode (lexical, semantic,
   hybrid; query cache off) over realistic queries lifted from the index
   (``benchmarks.scale_queries``: 2–6 words, rare, common and phrases);
3. the same while a reindex of ``--edits`` changed files runs: that many files get a new
   paragraph, ``reindex`` with ``background: true``, then the queries in turn (modes in
   rotation) until ``index_status`` says the job is done;
4. one-edit freshness with the watcher on: a second server, ``rifflux serve --watch``
   over the corpus (the worker still up), writes a new file with a word no other file has
   (``watch_first_edit.one_edit``) and polls MCP searches until it is keyword-searchable
   and until a semantic search with its text has it first, from the write;
5. peak RSS (``VmHWM``) of every process of the run (front servers, the worker pool's
   arbiter and children), sampled from ``/proc`` every 0.5 s;
6. database bytes: the main file and its WAL as the run left them, then the main file
   after a ``wal_checkpoint(TRUNCATE)``; per chunk, and against the corpus text bytes.

``--repo PATH`` runs another checkout's code (``PYTHONPATH``, working directory) with its
``.venv`` Python (this one's if it has none): the "before" of a change. The embedder is
the hash embedder unless ``--backend onnx``. Prints the JSON report and markdown table
rows; writes the JSON to ``--out`` (default ``WORKDIR/scale-mcp-FILES.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from benchmarks.harness import checkout_python, emit, machine, percentiles
from benchmarks.scale_corpus import Vocabulary, sentence
from benchmarks.scale_queries import make_queries
from benchmarks.watch_first_edit import one_edit

MODES = ("lexical", "semantic", "hybrid")
SAMPLE_SECONDS = 0.5
STATUS_EVERY_SECONDS = 2.0


def subprocess_env(args: argparse.Namespace, db: Path) -> dict[str, str]:
    """This environment without any ``RIFFLUX_*``, plus the run's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")}
    env.update(
        PYTHONPATH=str(args.repo),
        RIFFLUX_DB_PATH=str(db),
        RIFFLUX_EMBEDDING_BACKEND=args.backend,
        RIFFLUX_ALLOWED_ROOTS=str(args.workdir.resolve()),
        RIFFLUX_BASE_DIR=str(args.workdir.resolve()),
        RIFFLUX_QUERY_CACHE_SIZE="0",
        RIFFLUX_LOG_LEVEL="WARNING",
        PYTHONFAULTHANDLER="1",  # a crash's traceback lands in server.log / worker.log
    )
    if args.vector_index:
        env["RIFFLUX_VECTOR_INDEX"] = args.vector_index
    return env


def process_role(pid: str) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if b"-m" in argv:
        module = argv[argv.index(b"-m") + 1].decode()
        return {"rifflux.mcp": "front", "rifflux.cli": "front"}.get(module, module)
    if b"worker" in argv:
        return "rifflux worker"
    return Path(argv[0].decode()).name


class RssSampler(threading.Thread):
    """Peak RSS (``VmHWM``, KiB) of every process whose environment names the index, and
    the largest anonymous part of its RSS (``RssAnon``) seen by a sample: the rest is
    file-backed pages (the mapped vector cache and graphs, shared page cache)."""

    def __init__(self, db: Path) -> None:
        super().__init__(daemon=True)
        self.marker = f"RIFFLUX_DB_PATH={db}".encode()
        self.peaks: dict[str, int] = {}
        self.anon_peaks: dict[str, int] = {}
        self.stop = threading.Event()

    def sample(self) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if self.marker not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    continue
                name = f"{process_role(entry)} {entry}"
                for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        kib = int(line.split()[1])
                        self.peaks[name] = max(self.peaks.get(name, 0), kib)
                    elif line.startswith("RssAnon:"):
                        kib = int(line.split()[1])
                        self.anon_peaks[name] = max(self.anon_peaks.get(name, 0), kib)
            except (OSError, ValueError):
                continue

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_SECONDS):
            self.sample()


def server_params(args: argparse.Namespace, env: dict[str, str], *extra: str) -> Any:
    return StdioServerParameters(
        command=checkout_python(args.repo),
        args=["-m", "rifflux.mcp", "--transport", "stdio", *extra],
        env=env,
        cwd=str(args.repo),
    )


async def open_session(
    stack: AsyncExitStack, params: Any, errlog: Any
) -> tuple[ClientSession, float]:
    started = time.perf_counter()
    read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session, time.perf_counter() - started


async def call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content}")
    return result.structured_content or {}


async def wait_for_workers(log: Path, timeout: float = 180.0) -> float:
    """Seconds until the worker's log says a worker consumes (``index_status`` cannot say:
    it answers "no index" until the first job has made the index)."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if log.exists() and '"worker.consuming"' in log.read_text(errors="replace"):
            return time.perf_counter() - started
        await asyncio.sleep(0.2)
    raise RuntimeError(f"no worker consuming after {timeout:.0f} s: see {log}")


async def timed_search(session: ClientSession, query: str, mode: str) -> float:
    t0 = time.perf_counter()
    await call(session, "search_rifflux", {"query": query, "mode": mode, "top_k": 10})
    return (time.perf_counter() - t0) * 1000


async def idle_latency(
    session: ClientSession, queries: list[tuple[str, str]], rounds: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in MODES:
        await timed_search(session, queries[0][1], mode)  # warm-up (cache load, model)
        times: list[float] = []
        by_label: dict[str, list[float]] = {}
        for _ in range(rounds):
            for label, query in queries:
                elapsed = await timed_search(session, query, mode)
                times.append(elapsed)
                by_label.setdefault(label, []).append(elapsed)
        out[mode] = percentiles(times)
        out[mode]["by_label_p50"] = {k: percentiles(v)["p50"] for k, v in sorted(by_label.items())}
    return out


def edit_files(corpus: Path, count: int, seed: int) -> list[Path]:
    """Append a new paragraph to ``count`` files spread over the corpus."""
    files = sorted(corpus.rglob("*.md"))
    rng = random.Random(seed)
    picked = rng.sample(files, min(count, len(files)))
    vocab = Vocabulary.from_corpus(corpus / "part-0000")
    for n, path in enumerate(picked):
        paragraph = " ".join(sentence(vocab, rng) for _ in range(3))
        with path.open("a", encoding="utf-8") as out:
            out.write(f"\n\n## Scale edit {seed}-{n}\n\n{paragraph}\n")
    return picked


async def job_state(session: ClientSession, job_id: str) -> str:
    result = await session.call_tool("index_status", {})
    if result.is_error:  # "no index" until the job has made it
        return "unknown"
    status = result.structured_content or {}
    for job in status.get("recent_jobs", []):
        if job.get("job_id") == job_id or job.get("id") == job_id:
            return str(job.get("state"))
    jobs = status.get("recent_jobs", [])
    return str(jobs[0].get("state")) if jobs else "unknown"


async def full_index(session: ClientSession, corpus: Path) -> tuple[float, str]:
    """Seconds from a background ``reindex`` to its job's end, and the end state."""
    t0 = time.perf_counter()
    submitted = await call(session, "reindex", {"path": str(corpus), "background": True})
    while True:
        await asyncio.sleep(0.5)
        state = await job_state(session, submitted["job_id"])
        if state in ("completed", "failed", "cancelled"):
            return round(time.perf_counter() - t0, 1), state


async def latency_during_reindex(
    session: ClientSession, corpus: Path, queries: list[tuple[str, str]], edits: int
) -> dict[str, Any]:
    edit_files(corpus, edits, seed=edits)
    t0 = time.perf_counter()
    submitted = await call(session, "reindex", {"path": str(corpus), "background": True})
    job_id = submitted["job_id"]
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    n = 0
    state = "queued"
    checked = time.perf_counter()
    while True:
        label_query = queries[n % len(queries)][1]
        mode = MODES[n % len(MODES)]
        times[mode].append(await timed_search(session, label_query, mode))
        n += 1
        # index_status counts the whole index: asked every STATUS_EVERY_SECONDS, not
        # after every few searches, so that the searches are most of the load.
        if time.perf_counter() - checked >= STATUS_EVERY_SECONDS:
            checked = time.perf_counter()
            state = await job_state(session, job_id)
            if state in ("completed", "failed", "cancelled"):
                break
        if time.perf_counter() - t0 > 3600:
            break
    out: dict[str, Any] = {mode: percentiles(times[mode]) for mode in MODES}
    out["edited_files"] = edits
    out["job_state"] = state
    out["job_s"] = round(time.perf_counter() - t0, 2)
    return out


async def freshness(
    args: argparse.Namespace, env: dict[str, str], corpus: Path, errlog: Any
) -> dict[str, Any]:
    async with AsyncExitStack() as stack:
        params = server_params(args, env, "--watch", str(corpus))
        session, ready = await open_session(stack, params, errlog)
        await asyncio.sleep(args.settle)
        edits = []
        for n in range(args.fresh_rounds + 1):
            if n:
                await asyncio.sleep(args.pause)
            edits.append(await one_edit(session, corpus, args.fresh_timeout))
    steady = edits[1:] or edits

    def median(key: str) -> float | None:
        known = sorted(e[key] for e in steady if e[key] is not None)
        return round(known[len(known) // 2], 3) if known else None

    return {
        "session_ready_s": round(ready, 2),
        "first": {k: None if v is None else round(v, 3) for k, v in edits[0].items()},
        "steady_median_keyword_s": median("keyword_s"),
        "steady_median_semantic_s": median("semantic_s"),
        "steady": [{k: None if v is None else round(v, 3) for k, v in e.items()} for e in steady],
    }


def database_bytes(db: Path, chunks: int, text_bytes: int) -> dict[str, Any]:
    wal = Path(f"{db}-wal")
    main_before = db.stat().st_size
    wal_before = wal.stat().st_size if wal.exists() else 0
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    main_after = db.stat().st_size
    return {
        "main_bytes_as_left": main_before,
        "wal_bytes_as_left": wal_before,
        "main_bytes_checkpointed": main_after,
        "bytes_per_chunk": round(main_after / max(chunks, 1)),
        "bytes_per_chunk_with_wal": round((main_before + wal_before) / max(chunks, 1)),
        "corpus_text_bytes": text_bytes,
        "db_over_text": round(main_after / max(text_bytes, 1), 2),
        "queue_db_bytes": sum(p.stat().st_size for p in db.parent.glob("queue.db*") if p.is_file()),
        "vector_cache_bytes": sum(
            p.stat().st_size for p in Path(f"{db}.vectors").rglob("*") if p.is_file()
        )
        if Path(f"{db}.vectors").exists()
        else 0,
    }


def start_worker(args: argparse.Namespace, env: dict[str, str], log: Path) -> subprocess.Popen:
    """``rifflux worker`` as the Procfile starts it, its output to ``log``."""
    command = [checkout_python(args.repo), "-c", "from rifflux.cli import main; main()", "worker"]
    if args.worker_processes:
        command += ["--processes", str(args.worker_processes)]
    with log.open("w") as out:
        return subprocess.Popen(
            command, env=env, cwd=args.repo, stdout=out, stderr=subprocess.STDOUT
        )


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


async def run(args: argparse.Namespace, corpus: Path, index_dir: Path) -> dict[str, Any]:
    db = index_dir / "index.db"
    index_dir.mkdir(parents=True, exist_ok=True)
    env = subprocess_env(args, db)
    report: dict[str, Any] = {
        "repo": str(args.repo),
        "python": checkout_python(args.repo),
        "commit": subprocess.run(
            ["git", "-C", str(args.repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip(),
        "transport": "stdio",
        "backend": args.backend,
        "workers": f"rifflux worker --processes {args.worker_processes or os.cpu_count()}",
    }
    sampler = RssSampler(db)
    sampler.start()
    worker_log = index_dir / "worker.log"
    worker = start_worker(args, {**env, "RIFFLUX_LOG_LEVEL": "INFO"}, worker_log)
    try:
        with (index_dir / "server.log").open("w") as errlog:
            async with AsyncExitStack() as stack:
                session, ready = await open_session(stack, server_params(args, env), errlog)
                report["server_ready_s"] = round(ready, 2)
                report["worker_ready_s"] = round(await wait_for_workers(worker_log), 2)
                if args.full_background:
                    report["full_index_s"], report["full_index_state"] = await full_index(
                        session, corpus
                    )
                else:
                    t0 = time.perf_counter()
                    await call(session, "reindex", {"path": str(corpus)})
                    report["full_index_s"] = round(time.perf_counter() - t0, 1)
                status = await call(session, "index_status", {})
                report["chunks"] = status.get("chunks")
                report["embeddings"] = status.get("embeddings")
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
                try:
                    queries = make_queries(conn, args.queries, args.seed)
                finally:
                    conn.close()
                report["queries"] = {
                    "count": len(queries),
                    "labels": {
                        label: sum(1 for q in queries if q[0] == label)
                        for label in sorted({q[0] for q in queries})
                    },
                    "examples": [q for _, q in queries[:5]],
                }
                report["idle_ms"] = await idle_latency(session, queries, args.rounds)
                report["during_reindex_ms"] = await latency_during_reindex(
                    session, corpus, queries, args.edits
                )
            report["freshness"] = await freshness(args, env, corpus, errlog)
    finally:
        stop(worker)
        sampler.sample()
        sampler.stop.set()
        sampler.join()
    report["peak_rss_mib"] = {
        name: round(kib / 1024) for name, kib in sorted(sampler.peaks.items())
    }
    report["peak_anon_mib"] = {
        name: round(kib / 1024) for name, kib in sorted(sampler.anon_peaks.items())
    }
    text_bytes = sum(p.stat().st_size for p in corpus.rglob("*.md"))
    report["database"] = database_bytes(db, int(report.get("chunks") or 0), text_bytes)
    return report


def anonymous(report: dict[str, Any]) -> str:
    """The sampled anonymous peaks as the RSS row shows them (absent in older reports)."""
    peaks = report.get("peak_anon_mib") or {}
    front = max((v for k, v in peaks.items() if k.startswith("front")), default=0)
    workers = sorted(v for k, v in peaks.items() if not k.startswith("front"))
    return f"{front} / {', '.join(map(str, workers))} MiB" if peaks else "not sampled"


def markdown_rows(report: dict[str, Any]) -> str:
    """One row per measure, a column for this run (``files``, ``commit``)."""
    idle, busy = report["idle_ms"], report["during_reindex_ms"]
    fresh, database = report["freshness"], report["database"]
    peaks = report["peak_rss_mib"]
    front = max((v for k, v in peaks.items() if k.startswith("front")), default=0)
    workers = [v for k, v in peaks.items() if not k.startswith("front")]
    rows = [
        ("files / chunks", f"{report['files']:,} / {report['chunks']:,}"),
        ("full index via MCP `reindex`", f"{report['full_index_s']} s"),
    ]
    for mode in MODES:
        rows.append(
            (
                f"{mode} p50 / p95 / p99, idle",
                f"{idle[mode]['p50']} / {idle[mode]['p95']} / {idle[mode]['p99']} ms",
            )
        )
    for mode in MODES:
        m = busy[mode]
        rows.append(
            (
                f"{mode} p50 / p95 / p99, during a reindex of {busy['edited_files']:,} files",
                f"{m.get('p50')} / {m.get('p95')} / {m.get('p99')} ms (n={m['n']})",
            )
        )
    rows += [
        ("that reindex (background job)", f"{busy['job_s']} s"),
        (
            "one edit: keyword / semantic searchable (watcher, steady median)",
            f"{fresh['steady_median_keyword_s']} / {fresh['steady_median_semantic_s']} s",
        ),
        (
            "first edit after `serve --watch` starts: keyword / semantic",
            f"{fresh['first']['keyword_s']} / {fresh['first']['semantic_s']} s",
        ),
        ("peak RSS front / workers", f"{front} / {', '.join(map(str, sorted(workers)))} MiB"),
        ("peak anonymous RSS front / workers (sampled)", anonymous(report)),
        (
            "database bytes per chunk (checkpointed / with WAL)",
            f"{database['bytes_per_chunk']:,} / {database['bytes_per_chunk_with_wal']:,}",
        ),
        (
            "database ÷ corpus text",
            f"{database['main_bytes_checkpointed'] / 2**20:,.0f} MiB ÷ "
            f"{database['corpus_text_bytes'] / 2**20:,.0f} MiB = {database['db_over_text']}×",
        ),
    ]
    header = f"| measure | {report['files']:,} files, {report['commit']} |\n|---|---|\n"
    return header + "\n".join(f"| {name} | {value} |" for name, value in rows)


def main_mcp(args: argparse.Namespace, corpus: Path, index_dir: Path) -> dict[str, Any]:
    report: dict[str, Any] = {
        "machine": machine(),
        "files": args.files,
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    report.update(asyncio.run(run(args, corpus, index_dir)))
    report["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out = args.out or args.workdir / f"scale-mcp-{args.files}.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    emit("scale_mcp", **report)
    print(markdown_rows(report), file=sys.stderr)  # the rows of a results table
    return report
