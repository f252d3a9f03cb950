"""A full reindex through a real MCP client: wall time, and when every file is searchable.

Spawns ``rifflux serve`` (stdio) in a fresh directory with an empty index and calls
``reindex`` on a corpus, as an agent would. Two measurements:

- ``wait`` (default): ``reindex`` without ``background``; the call's wall time is the
  whole job (plan, chunk and write, embed, finalize) with the server's local worker
  pool started on demand, as the issue measured it;
- ``--background``: ``reindex`` with ``background: true``, then the time until a
  chunk of every indexed file is in the keyword index (polled every 0.1 s through a
  read-only connection), confirmed afterwards by MCP lexical searches for a rare word
  of sampled files; and the time until the job completes with every vector in.

``--timeline`` runs the server and its workers at log level INFO and reports when each
phase started and ended (seconds after the ``reindex`` call), from their log lines.

    .venv/bin/python -m benchmarks.mcp_reindex --backend hash
    .venv/bin/python -m benchmarks.mcp_reindex --backend hash --timeline
    .venv/bin/python -m benchmarks.mcp_reindex --backend onnx --background
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from benchmarks.harness import DEFAULT_CORPUS, emit, emit_machine

WORD = re.compile(r"[A-Za-z]{9,}")


def _ro(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True)


def files_searchable(db: Path) -> int:
    """Files with at least one chunk in the keyword index (0 before the index exists)."""
    if not db.exists():
        return 0
    try:
        conn = _ro(db)
        try:
            row = conn.execute(
                "SELECT COUNT(DISTINCT c.file_id) FROM chunks c "
                "WHERE c.id IN (SELECT rowid FROM chunks_fts)"
            ).fetchone()
            return int(row[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def expected_files(corpus: Path) -> int:
    return sum(1 for p in corpus.rglob("*.md") if p.is_file() and p.stat().st_size > 0)


def rare_words(db: Path, sample: int) -> list[tuple[str, str]]:
    """(path, word) for sampled files: the word of its first chunk that the fewest
    chunks of the index contain (files whose rarest word is in more than 20 chunks are
    left out)."""
    conn = _ro(db)
    try:
        rows = conn.execute(
            "SELECT f.path, c.content FROM files f JOIN chunks c ON c.file_id = f.id "
            "WHERE c.chunk_index = 0 ORDER BY f.path"
        ).fetchall()
        picked = random.Random(7).sample(rows, min(sample, len(rows)))
        out = []
        for path, content in picked:
            words = sorted(set(WORD.findall(content)))[:40]
            if words:
                df = {
                    w: conn.execute(
                        "SELECT COUNT(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (f'"{w}"',)
                    ).fetchone()[0]
                    for w in words
                }
                rarest = min(words, key=lambda w: (df[w], w))
                if df[rarest] <= 20:  # so the file must be among the top 50 hits
                    out.append((path, rarest))
        return out
    finally:
        conn.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="rifflux-mcp-reindex-"))
    db = work / "index.db"
    corpus = args.corpus.resolve()
    env = {
        **os.environ,
        "RIFFLUX_DB_PATH": str(db),
        "RIFFLUX_EMBEDDING_BACKEND": args.backend,
        "RIFFLUX_LOG_LEVEL": "INFO" if args.timeline else "WARNING",
        "RIFFLUX_ALLOWED_ROOTS": str(corpus),
    }
    if args.workers:
        env["RIFFLUX_WORKERS"] = str(args.workers)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "rifflux.mcp", "--transport", "stdio"], env=env
    )
    report: dict[str, Any] = {"expected_files": expected_files(corpus)}
    server_log: IO[str] = (work / "server.log").open("w") if args.timeline else sys.stderr
    try:
        spawned = time.perf_counter()
        async with (
            stdio_client(params, errlog=server_log) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            report["server_start_s"] = round(time.perf_counter() - spawned, 3)
            call = {"path": str(corpus), "background": args.background}
            # The server's start-up (imports, MCP handshake) is not part of the reindex.
            server_cpu_before = processes_cpu(db).get("server", 0.0) if args.timeline else 0.0
            started_at = time.time()
            t0 = time.perf_counter()
            result = await session.call_tool("reindex", call)
            report["reindex_call_s"] = round(time.perf_counter() - t0, 3)
            assert not result.is_error, result.content
            if args.timeline:
                report["cpu_s"] = processes_cpu(db)
                report["cpu_s"]["server during the call"] = round(
                    report["cpu_s"].get("server", 0.0) - server_cpu_before, 2
                )
            if args.background:
                await _follow(session, db, report, t0, args.stop_after_lexical)
            status = await session.call_tool("index_status", {})
            data = status.structured_content or {}
            job = data.get("recent_jobs", [{}])[0]
            report["job"] = {
                k: job.get(k) for k in ("state", "files_done", "chunks_embedded", "phase")
            }
            report["chunks"] = data.get("chunks")
            report["embeddings"] = data.get("embeddings")
        if args.timeline:
            server_log.close()
            events = log_events(work / "server.log") + log_events(work / "workers.log")
            report["timeline_s"] = timeline(events, started_at)
    finally:
        if server_log is not sys.stderr:
            server_log.close()
        shutil.rmtree(work, ignore_errors=True)
    return report


def processes_cpu(db: Path) -> dict[str, float]:
    """CPU seconds (user + system) so far of the server and the worker processes it
    started, found by the index path in their environment (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    marker = f"RIFFLUX_DB_PATH={db}".encode()
    out: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        module = argv[argv.index(b"-m") + 1].decode() if b"-m" in argv else argv[0].decode()
        roles = {"rifflux.mcp": "server", "rifflux.cli": "server", "workers.pool": "pool arbiter"}
        role = roles.get(module, module)
        name = f"{role} {entry.name}" if role == "workers.child" else role
        out[name] = round((int(fields[11]) + int(fields[12])) / tick, 2)
    out["total"] = round(sum(out.values()), 2)
    return out


def log_events(path: Path) -> list[dict[str, Any]]:
    """The JSON log lines of a file that have an event and a timestamp."""
    events = []
    if not path.exists():
        return events
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "event" in entry and "timestamp" in entry:
            stamp = datetime.datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
            entry["t"] = stamp.timestamp()
            events.append(entry)
    return events


# (label, event, first or last occurrence) of the timeline, in the job's order.
TIMELINE = (
    ("local pool spawned", "workers.local_pool_started", "first"),
    ("job submitted", "job.submitted", "first"),
    ("pool arbiter running", "pool.starting", "first"),
    ("first worker consuming", "worker.consuming", "first"),
    ("last worker consuming", "worker.consuming", "last"),
    ("plan done", "job.planned", "first"),
    ("first batch chunked", "job.batch_chunked", "first"),
    ("last batch chunked", "job.batch_chunked", "last"),
    ("first batch embedded", "job.batch_embedded", "first"),
    ("last batch embedded", "job.batch_embedded", "last"),
    ("first vectors written", "job.batch_vectors_written", "first"),
    ("last vectors written", "job.batch_vectors_written", "last"),
    ("first vector cache publish", "vectors.published", "first"),
    ("last vector cache publish", "vectors.published", "last"),
    ("FTS5 optimized", "fts.optimized", "first"),
    ("job finished (finalize done)", "job.finished", "first"),
)


def timeline(events: list[dict[str, Any]], started_at: float) -> dict[str, float | None]:
    """Seconds after the ``reindex`` call at which each phase of :data:`TIMELINE` began or
    ended (None if its log line is missing)."""
    out: dict[str, float | None] = {}
    for label, event, which in TIMELINE:
        times = sorted(e["t"] for e in events if e["event"] == event)
        at = (times[0] if which == "first" else times[-1]) if times else None
        out[label] = None if at is None else round(at - started_at, 3)
    publishes = [e for e in events if e["event"] == "vectors.published"]
    out["vector cache publishes"] = len(publishes)
    out["publish s, all (sum of duration_ms)"] = round(
        sum(float(e.get("duration_ms") or 0) for e in publishes) / 1000, 3
    )
    optimized = [e for e in events if e["event"] == "fts.optimized"]
    out["FTS5 optimize s"] = sum(float(e.get("duration_s") or 0) for e in optimized) or None
    return out


async def _follow(
    session: ClientSession, db: Path, report: dict[str, Any], t0: float, stop_after_lexical: bool
) -> None:
    expected = report["expected_files"]
    lexical_at = None
    while True:
        now = time.perf_counter() - t0
        if lexical_at is None and files_searchable(db) >= expected:
            lexical_at = now
            report["all_files_lexical_s"] = round(now, 3)
            found = 0
            probes = rare_words(db, 40)
            for path, word in probes:
                res = await session.call_tool(
                    "search_rifflux", {"query": word, "mode": "lexical", "top_k": 50}
                )
                hits = (res.structured_content or {}).get("results", [])
                found += any(h["path"] == path for h in hits)
            report["lexical_probe"] = f"{found}/{len(probes)} sampled files found by word"
            if stop_after_lexical:
                return
        status = await session.call_tool("index_status", {})
        jobs = (status.structured_content or {}).get("recent_jobs", [])
        if jobs and jobs[0]["state"] in ("completed", "failed", "cancelled"):
            report["job_done_s"] = round(time.perf_counter() - t0, 3)
            return
        await asyncio.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--backend", default="hash", choices=("hash", "onnx"))
    parser.add_argument("--workers", type=int, default=0, help="default: RIFFLUX_WORKERS")
    parser.add_argument("--background", action="store_true")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--timeline", action="store_true", help="report when each phase began and ended"
    )
    parser.add_argument(
        "--stop-after-lexical",
        action="store_true",
        help="with --background: stop once every file is keyword-searchable",
    )
    args = parser.parse_args()
    emit_machine(corpus=str(args.corpus), backend=args.backend, background=args.background)
    for n in range(args.rounds):
        emit("mcp_reindex", round=n + 1, **asyncio.run(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
