"""The ``rifflux`` command: a thin layer that parses arguments, calls the core, prints.

Bad input exits non-zero with one line on stderr, never a traceback: a damaged or
foreign database, an unreachable broker, an OS error, and even an unexpected crash
(its traceback only with ``RIFFLUX_LOG_LEVEL=DEBUG``). A closed stdout (``| head``)
ends the command quietly with status 141, as a Unix tool killed by SIGPIPE.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import sqlite3
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rifflux.config import Settings, command_settings, ignored_variables
from rifflux.errors import RiffluxError, os_failure
from rifflux.eval.cli import add_eval_parser
from rifflux.logs import configure_logging
from rifflux.mcp.cli import add_mcp_config_parser, add_serve_parser
from rifflux.progress import PhaseProgress
from rifflux.search import retrieval
from rifflux.search.request import SearchRequest, add_request_arguments, as_integer
from rifflux.search.service import SearchService, damage_reported
from rifflux.status import check_index, index_status

if TYPE_CHECKING:
    from rifflux.index.report import IndexReport

EXIT_USAGE = 2
EXIT_ERROR = 1
# 128 + SIGPIPE: what a shell reports for a tool whose reader went away.
EXIT_BROKEN_PIPE = 141


def _common_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", type=Path, help="index database (default: $RIFFLUX_DB_PATH)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rifflux", description="Local-first hybrid search over markdown and text files."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    index = sub.add_parser("index", help="index files and directories")
    index.add_argument("paths", nargs="*", type=Path, help="roots to index (default: .)")
    _common_db(index)
    index.add_argument("--force", action="store_true", help="re-chunk and re-embed everything")
    index.add_argument("--no-prune", action="store_true", help="keep files that vanished")
    index.add_argument("--rebuild", action="store_true", help="delete the index and build anew")
    index.add_argument("--json", action="store_true", help="print the report as JSON")
    index.add_argument(
        "--no-wait",
        action="store_true",
        help="submit to the workers already running, print the job id and return",
    )
    index.add_argument(
        "--workers", type=int, help="local worker processes to start if none is alive"
    )
    index.add_argument(
        "--in-process", action="store_true", help="index in this process, without the queue"
    )
    index.add_argument(
        "--repair",
        action="store_true",
        help="check the database, then republish the vector cache from it (no indexing)",
    )
    index.set_defaults(handler=cmd_index)

    worker = sub.add_parser(
        "worker", help="run a supervised pool of queue worker processes (dramatiq)"
    )
    worker.add_argument("--processes", type=int, help="worker processes (default: CPU count)")
    worker.add_argument("--threads", type=int, help="threads per process (default: 1; 2 on a GPU)")
    worker.add_argument("--queues", nargs="*", help="only these queues (e.g. rifflux_embed)")
    worker.add_argument(
        "--device",
        help="embed on cpu (default: $RIFFLUX_EMBEDDING_DEVICE) or on cuda / cuda:N: an "
        "embed-only worker with the torch embedder on that GPU (pip install 'rifflux[gpu]')",
    )
    _common_db(worker)
    worker.set_defaults(handler=cmd_worker)

    search = sub.add_parser("search", help="search the index")
    add_request_arguments(search)
    _common_db(search)
    search.add_argument("--json", action="store_true", help="print the MCP tool's JSON object")
    search.set_defaults(handler=cmd_search)

    chunk = sub.add_parser("get-chunk", help="print one chunk by id")
    chunk.add_argument("chunk_id")
    chunk.add_argument(
        "--neighbors",
        type=as_integer,
        default=0,
        metavar="N",
        help="also print up to N (0-5) chunks of the same file before and after it",
    )
    _common_db(chunk)
    chunk.set_defaults(handler=cmd_get_chunk)

    get_file = sub.add_parser("get-file", help="print an indexed file's chunks")
    get_file.add_argument("path")
    get_file.add_argument(
        "--heading",
        help="only this section and its subsections: a heading path such as "
        "'Guide > Install' (case-insensitive; a unique suffix is enough)",
    )
    get_file.add_argument(
        "--max-tokens",
        type=as_integer,
        metavar="N",
        help="token budget (50-100000): chunks in order while they fit, the next one cut",
    )
    _common_db(get_file)
    get_file.set_defaults(handler=cmd_get_file)

    status = sub.add_parser("status", help="index counts, jobs and workers")
    _common_db(status)
    status.add_argument("--json", action="store_true")
    status.add_argument(
        "--check",
        action="store_true",
        help="also run PRAGMA quick_check and verify the vector cache; exit 1 on damage",
    )
    status.set_defaults(handler=cmd_status)

    watch = sub.add_parser("watch", help="watch paths and keep them indexed (runs until stopped)")
    watch.add_argument(
        "paths", nargs="*", type=Path, help="roots (default: $RIFFLUX_FILE_WATCHER_PATHS or .)"
    )
    _common_db(watch)
    watch.set_defaults(handler=cmd_watch)

    cancel = sub.add_parser("cancel", help="cancel a queued or running reindex job")
    cancel.add_argument("job_id")
    _common_db(cancel)
    cancel.set_defaults(handler=cmd_cancel)

    shown = sub.add_parser("settings", help="list every setting: value, default and meaning")
    shown.add_argument("--json", action="store_true", help="print a JSON list")
    shown.add_argument(
        "--all", action="store_true", help="also the internal tuning tests and benchmarks set"
    )
    shown.set_defaults(handler=cmd_settings)

    add_serve_parser(sub)
    add_mcp_config_parser(sub)
    add_eval_parser(sub)
    add_grep_parser(sub)
    return parser


def add_grep_parser(sub: Any) -> None:
    """``rifflux grep``: the ``grep_rifflux`` tool's arguments as flags."""
    from rifflux.search.grep import DEFAULT_MAX_MATCHES

    grep = sub.add_parser(
        "grep", help="find the lines holding an exact string or regex, from the index"
    )
    grep.add_argument("pattern", help="the text to find (a regex with --regex)")
    grep.add_argument("--regex", action="store_true", help="read PATTERN as an RE2 regex")
    grep.add_argument("--case-sensitive", action="store_true", help="match case exactly")
    grep.add_argument(
        "--path-glob",
        action="append",
        metavar="G",
        help="only files whose indexed path matches this glob (repeatable)",
    )
    grep.add_argument(
        "--context-lines", type=as_integer, default=0, metavar="N", help="context lines (0-10)"
    )
    grep.add_argument(
        "--max-matches",
        type=as_integer,
        default=DEFAULT_MAX_MATCHES,
        metavar="N",
        help=f"the most matching lines to print (default: {DEFAULT_MAX_MATCHES})",
    )
    grep.add_argument(
        "--max-tokens",
        type=as_integer,
        metavar="N",
        help="token budget of the whole answer (the object --json prints)",
    )
    _common_db(grep)
    grep.add_argument("--json", action="store_true", help="print the MCP tool's JSON object")
    grep.set_defaults(handler=cmd_grep)


def cmd_grep(args: argparse.Namespace) -> int:
    """Exit 0 with matches, 1 without, 2 on a bad pattern or flag (as grep), printed as
    ``path:line:column:text`` (context lines ``path-line-text``), control characters
    escaped (:func:`printable`)."""
    from rifflux.errors import InvalidQueryError
    from rifflux.search.grep import GrepRequest, grep

    service = SearchService(_settings(args))
    try:
        request = GrepRequest.from_arguments(
            args.pattern,
            regex=args.regex,
            case_sensitive=args.case_sensitive,
            path_glob=args.path_glob,
            context_lines=args.context_lines,
            max_matches=args.max_matches,
            max_tokens=args.max_tokens,
        )
        conn = service.connection()
        deadline = service.deadline()
        with deadline.guarding(conn):
            response = grep(conn, request, deadline)
    except InvalidQueryError as exc:
        return _fail(str(exc), EXIT_USAGE)
    finally:
        service.close()
    if args.json:
        _print_json(response)
    else:
        if "warning" in response:
            _say(f"rifflux: warning: {response['warning']}", file=sys.stderr)
        for match in response["matches"]:
            path, line = match["path"], match["line"]
            for offset, text in enumerate(match["before"], start=line - len(match["before"])):
                _say(f"{path}-{offset}-{text}")
            _say(f"{path}:{line}:{match['column']}:{match['text']}")
            for offset, text in enumerate(match["after"], start=line + 1):
                _say(f"{path}-{offset}-{text}")
        if response["truncated"]:
            print("rifflux: more matches not shown (raise --max-matches)", file=sys.stderr)
    return 0 if response["count"] else 1


def _settings(args: argparse.Namespace) -> Settings:
    return command_settings(args).with_overrides(db_path=getattr(args, "db", None))


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def printable(text: str) -> str:
    """``text`` with every control character but tab (C0, DEL, C1) shown escaped: ``\\n``,
    ``\\r``, ``\\x1b``. File names and file text reach human output through this, so a
    corpus cannot retitle or clear the terminal, write its clipboard (OSC 52) or split a
    line; ``--json`` output stays exact (JSON escapes C0 itself)."""
    return _CONTROL.sub(lambda m: _NAMED.get(m.group(), f"\\x{ord(m.group()):02x}"), text)


def _say(text: str, file: TextIO | None = None) -> None:
    """Print one line of human output, :func:`printable`."""
    print(printable(text), file=file)


def cmd_index(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if args.repair:
        if args.paths or args.rebuild or args.force:
            raise RiffluxError("--repair takes no paths, --rebuild or --force")
        return _repair(settings, args)
    if args.rebuild:
        remove_index(settings.db_path)
    roots = args.paths or [Path(".")]
    if args.in_process:
        return _index_in_process(settings, roots, args)
    from rifflux.reindex import Reindexer

    reindexer = Reindexer(settings)
    try:
        if args.no_wait:
            job_id = reindexer.submit_to_live_workers(
                roots, force=args.force, prune_missing=not args.no_prune
            )
            print(json.dumps({"job_id": job_id}) if args.json else job_id)
            return 0
        on_progress, line = job_progress(sys.stderr)
        record = reindexer.run(
            roots,
            force=args.force,
            prune_missing=not args.no_prune,
            processes=args.workers,
            on_progress=on_progress,
        )
        line.close()
    finally:
        reindexer.close()
    if args.json:
        _print_json(record.to_dict())
    else:
        from rifflux.embed.factory import embedder_label_for
        from rifflux.index.report import IndexReport

        _print_report(IndexReport.from_job(record, embedder_label_for(settings)))
    return 0 if record.state == "completed" else EXIT_ERROR


def _index_in_process(settings: Settings, roots: list[Path], args: argparse.Namespace) -> int:
    from rifflux.index.indexer import Indexer

    report = Indexer(settings).run(roots, force=args.force, prune_missing=not args.no_prune)
    if args.json:
        _print_json(report.to_dict())
    else:
        _print_report(report)
    return 0


def _print_report(report: IndexReport) -> None:
    """The one rendering of an index run, in-process or queued."""
    for line in report.lines():
        _say(line)


def _repair(settings: Settings, args: argparse.Namespace) -> int:
    """Republish the vector cache from the database's embedding BLOBs, in this process.

    The database is quick_checked first: a cache rebuilt from a damaged database would
    carry its damage, so that case fails and points at ``--rebuild``.
    """
    from rifflux.store.integrity import quick_check
    from rifflux.vectors.publish import publish

    if not settings.db_path.is_file():
        raise RiffluxError(f"no index at {settings.db_path}; create it with `rifflux index DIR`")
    problems = quick_check(settings.db_path)
    if problems:
        raise RiffluxError(
            f"index database is damaged ({problems[0]}); rebuild with `rifflux index --rebuild DIR`"
        )
    result = publish(
        settings.db_path, source="repair", full=True, vector_index=settings.vector_index
    )
    assert result is not None
    manifest = result.manifest
    report = {
        "generation": manifest.generation,
        "rows": manifest.rows,
        "segments": len(manifest.segments),
        "database": "ok",
    }
    if args.json:
        _print_json(report)
    else:
        _say(
            f"vector cache republished at generation {manifest.generation}: "
            f"{manifest.rows} rows in {len(manifest.segments)} segment(s); database ok"
        )
    return 0


def job_progress(
    stream: Any, clock: Callable[[], float] | None = None
) -> tuple[Callable[[Any], None], PhaseProgress]:
    """A progress callback for Reindexer.wait: one bar per phase of the job (scanning
    and chunking and writing in files, with the chunks written beside them; embedding in
    chunks, the unit of its work, so its rate and ETA move with every batch)."""
    bars = PhaseProgress(stream, clock)

    def update(record: Any) -> None:
        if not record.planned:
            bars.update(record.phase, {"scanning": (0, None, "")})
            return
        lexical, embedding = record.phases()["lexical"], record.phases()["embedding"]
        bars.update(
            record.phase,
            {
                "scanning": (record.files_total, record.files_total, ""),
                "lexical": (
                    lexical["files_done"],
                    lexical["files_total"],
                    f"{lexical['chunks_done']} chunks",
                ),
                "embedding": (
                    embedding["chunks_done"],
                    embedding["chunks_total"],
                    f"{embedding['files_done']}/{embedding['files_total']} files",
                ),
            },
        )

    return update, bars


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a supervised pool in this process: a dead child is replaced, the pool stays."""
    from workers.launcher import worker_environment
    from workers.pool import PoolSpec, run_pool

    settings = _settings(args)
    if args.device is not None:
        settings = replace(settings, embedding_device=_device(args.device))
    if settings.embedding_device != "cpu":
        _check_device(settings)
    configure_logging(settings.log_level, style="json")
    spec = PoolSpec.for_device(
        settings, processes=args.processes, threads=args.threads, queues=args.queues or ()
    )
    return run_pool(settings, spec, env=worker_environment(settings, spec.processes))


def _device(raw: str) -> str:
    from rifflux.embed.torch_minilm import valid_device

    device = raw.strip().lower()
    if not valid_device(device):
        raise ValueError(f"--device must be cpu, cuda or cuda:N, not {raw!r}")
    return device


def _check_device(settings: Settings) -> None:
    """One line naming what a worker on a CUDA device lacks (torch, a CUDA runtime, a
    device), or that its backend is not torch (or auto), before any process starts."""
    from rifflux.embed.factory import embedder_label_for
    from rifflux.embed.torch_minilm import torch_unavailable_reason

    embedder_label_for(settings)  # refuses a backend other than torch or auto
    reason = torch_unavailable_reason(settings.embedding_device)
    if reason is not None:
        raise RiffluxError(f"cannot embed on {settings.embedding_device}: {reason}")


SQLITE_HEADER = b"SQLite format 3\x00"


def remove_index(db_path: Path) -> None:
    """Delete the index database and its published vector cache; never another file.

    ``--rebuild --db /etc/passwd`` (a damaged-database message suggests ``--rebuild``)
    must not delete it: a file that is no SQLite database, or another application's
    database, is refused. A damaged index (its header intact) is deleted.
    """
    from rifflux.errors import NotAnIndexError
    from rifflux.store.connection import open_index_readonly

    if db_path.is_file() and db_path.stat().st_size:
        with db_path.open("rb") as file:
            if file.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
                raise RiffluxError(f"{db_path} is not an SQLite database; not deleting it")
        try:
            open_index_readonly(db_path).close()
        except NotAnIndexError as exc:
            raise RiffluxError(f"{exc}; not deleting it") from None
        except RiffluxError:
            pass  # damaged, or another schema version: what --rebuild is for
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    shutil.rmtree(f"{db_path}.vectors", ignore_errors=True)


def _snippet(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def format_results(response: dict[str, Any], short_ids: dict[str, str] | None = None) -> str:
    """A search response as text; each result shows its chunk id, shortened to
    ``short_ids[chunk_id]`` (a unique prefix ``get-chunk`` accepts) when given."""
    lines = [f"{response['count']} results for {response['query']!r} ({response['mode']})"]
    for rank, result in enumerate(response["results"], start=1):
        score = ", ".join(
            f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
            for k, v in result["score_breakdown"].items()
        )
        chunk_id = (short_ids or {}).get(result["chunk_id"], result["chunk_id"])
        lines.append(f"{rank:>3}. {result['path']}#{result['chunk_index']}  {chunk_id}  [{score}]")
        if result["heading_path"]:
            lines.append(f"     {result['heading_path']}")
        lines.append(f"     {_snippet(result['content'])}")
    if "budget" in response:
        budget = response["budget"]
        lines.append(
            f"budget: {budget['used_tokens']} of {budget['max_tokens']} tokens, "
            f"{budget['dropped']} results dropped"
        )
    return "\n".join(printable(line) for line in lines)


def cmd_search(args: argparse.Namespace) -> int:
    service = SearchService(_settings(args))
    try:
        response = service.search_response(SearchRequest.from_arguments(vars(args)))
        short_ids = None
        if not args.json:
            ids = [r["chunk_id"] for r in response["results"]]
            with damage_reported(service.db_path):
                short_ids = retrieval.short_chunk_ids(service.connection(), ids)
    finally:
        service.close()
    if args.json:
        _print_json(response)
    else:
        if "warning" in response:
            _say(f"rifflux: warning: {response['warning']}", file=sys.stderr)
        print(format_results(response, short_ids))
    return 0


def cmd_get_chunk(args: argparse.Namespace) -> int:
    service = SearchService(_settings(args))
    try:
        with damage_reported(service.db_path):
            chunk_id = retrieval.resolve_chunk_id(service.connection(), args.chunk_id)
        _print_json(service.chunk_with_neighbors(chunk_id, args.neighbors))
    finally:
        service.close()
    return 0


def cmd_get_file(args: argparse.Namespace) -> int:
    service = SearchService(_settings(args))
    try:
        found = service.get_file(args.path, heading=args.heading, max_tokens=args.max_tokens)
        _print_json({"file": found})
    finally:
        service.close()
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from rifflux.reindex import Reindexer

    settings = _settings(args)
    if args.check:
        return _status_check(settings, args)
    service = SearchService(settings)
    reindexer = Reindexer(settings)
    try:
        status = index_status(service, reindexer.status)
    finally:
        service.close()
        reindexer.close()
    if args.json:
        _print_json(status)
        return 0
    _print_status(status)
    return 0


def _status_check(settings: Settings, args: argparse.Namespace) -> int:
    """``status --check``: the checks first, then as much status as a damaged index allows.

    Problems go to stderr, one line each, and make the exit status 1.
    """
    import contextlib
    import sqlite3

    from rifflux.reindex import Reindexer

    service = SearchService(settings)
    reindexer = None
    status: dict[str, Any] | None = None
    try:
        check = check_index(service)
        if settings.db_path.is_file():
            reindexer = Reindexer(settings)
            with contextlib.suppress(sqlite3.DatabaseError, RiffluxError):
                status = index_status(service, reindexer.status)  # The check says why not.
    finally:
        service.close()
        if reindexer is not None:
            reindexer.close()
    problems = [f"index database: {p}" for p in check["database"]["problems"]]
    problems += [f"vector cache: {p}" for p in check["vector_cache"]["problems"]]
    if args.json:
        _print_json({**(status or {"db_path": str(settings.db_path)}), "check": check})
    else:
        if status is not None:
            _print_status(status)
        db_line = "ok" if check["database"]["ok"] else "DAMAGED"
        if not settings.db_path.is_file():
            db_line = "MISSING"
        cache = check["vector_cache"]
        cache_line = f"ok ({cache['state']})" if cache["ok"] else "CORRUPT"
        if cache["state"] is None:
            cache_line = "not checked"
        _say(f"{'check database':>16}: {db_line} (PRAGMA quick_check)")
        _say(f"{'check vectors':>16}: {cache_line}")
    for problem in problems:
        _say(f"rifflux: check failed: {problem}", file=sys.stderr)
    return 0 if check["ok"] else EXIT_ERROR


def _print_status(status: dict[str, Any]) -> None:
    """``rifflux.status.index_status``'s object as text, one key a line; fractions as
    percentages, and a job's files as indexed, unchanged and skipped (not indexed)."""
    for key in ("db_path", "files", "chunks", "embeddings"):
        _say(f"{key:>16}: {status[key]}")
    _say(f"{'embedded':>16}: {_percent(status['embedding_coverage'])} of chunks")
    for root in status["roots"]:
        _say(
            f"{'':>18}{root['root']}: {root['files']} files, {root['chunks']} chunks, "
            f"{_percent(root['embedding_coverage'])} embedded"
        )
    for key in ("generation", "embedding_model"):
        _say(f"{key:>16}: {status[key]}")
    _say(f"{'backend':>16}: {status['embedding_backend']}")
    _say(f"{'vector cache':>16}: {_cache_line(status['vector_cache'])}")
    _say(f"{'broker':>16}: {status['broker']}")
    _say(f"{'live workers':>16}: {status['live_workers']['count']}")
    for worker in status["live_workers"]["workers"]:
        _say(
            f"{'':>18}{worker['worker_id']} queues={','.join(worker['queues'])} "
            f"device={worker.get('device', 'cpu')}"
        )
    if status["queue_depths"] is not None:
        _say(f"{'queue depths':>16}: {status['queue_depths']}")
    _say(f"{'recent jobs':>16}: {len(status['recent_jobs'])}")
    for job in status["recent_jobs"]:
        unchanged = job.get("files_unchanged", 0)
        handled = job["files_done"] + job["files_skipped"] + job["files_failed"]
        _say(
            f"{'':>18}{job['job_id']} {job['state']:<9} "
            f"{_percent(_fraction(handled, job['files_total']))} of {job['files_total']} "
            f"files: {job['files_done']} indexed, {unchanged} unchanged, "
            f"{job['files_skipped'] - unchanged} skipped, {job['files_failed']} failed; "
            f"{job['chunks_embedded']} chunks embedded"
        )
        if job["state"] == "running":
            lexical, embedding = job["phases"]["lexical"], job["phases"]["embedding"]
            _say(
                f"{'':>20}phase {job['phase']}: keyword-searchable "
                f"{_percent(_fraction(lexical['files_done'], lexical['files_total']))} "
                f"({lexical['files_done']}/{lexical['files_total']} files), embedded "
                f"{_percent(_fraction(embedding['chunks_done'], embedding['chunks_total']))} "
                f"({embedding['chunks_done']}/{embedding['chunks_total']} chunks)"
            )
        if job["stalled"]:
            _say(f"{'':>20}stalled: {job['stalled_reason']}")
        if job["state"] == "failed":
            # A job-level reason (a plan that failed, a write fault), not a file's error.
            for reason in (e["error"] for e in job["errors"] if not e.get("path")):
                _say(f"{'':>20}failed: {reason}")
    watcher = status["watcher"]
    _say(f"{'watcher':>16}: {'running' if watcher.get('running') else 'not running'}")
    _say(f"{'knowledge':>16}: {_knowledge_line(status['knowledge'])}")


def _fraction(done: int, total: int) -> float:
    """``done`` of ``total`` (1.0 when there is nothing to do), at most 1.0."""
    return min(done / total, 1.0) if total > 0 else 1.0


def _percent(fraction: float) -> str:
    """A fraction as a percentage rounded down to 0.1, so that anything short of all
    never reads 100%: 0.9999 is "99.9%", 1.0 "100%"."""
    return f"{math.floor(fraction * 1000 + 1e-9) / 10:g}%"


def _knowledge_line(block: dict[str, Any]) -> str:
    decisions = block["decisions"]
    by_status = ", ".join(f"{n} {s}" for s, n in decisions["by_status"].items())
    line = f"{decisions['total']} decisions" + (f" ({by_status})" if by_status else "")
    line += f", {block['error_pairs']} error pairs, {block['notes']} notes"
    tags = ", ".join(f"{t['tag']} {t['files']}" for t in block["tags"][:5])
    return line + (f"; tags: {tags}" if tags else "")


def _cache_line(cache: dict[str, Any]) -> str:
    line = cache["state"]
    if cache.get("generation") is not None:
        line += f", generation {cache['generation']}"
    if cache.get("in_memory"):
        line += f", {cache['rows']} rows served from memory until a writer publishes"
    elif cache.get("generation") is not None:
        line += (
            f", {cache['rows']} rows in {cache['segments']} segment(s), "
            f"{cache['tombstones']} tombstones"
        )
    if "reason" in cache:
        line += f" ({cache['reason']})"
    searched = cache.get("segment_search") or []
    if searched:
        exact = sorted({str(s["reason"]) for s in searched if s["search"] == "exact"})
        line += f"; {cache['approximate_segments']} searched by HNSW graph"
        if exact:
            line += f", exact: {'; '.join(exact)}"
    return line


def cmd_settings(args: argparse.Namespace) -> int:
    """Each setting's variable, current value, default and help (``rifflux.config.SETTINGS``)."""
    from rifflux.config import describe

    rows = describe(command_settings(args), include_internal=args.all)
    if args.json:
        _print_json(rows)
        return 0
    for row in rows:
        _say(f"{row['name']}={row['value']}  (default: {_plain(row['default'])})")
        _say(f"    {_plain(row['help'])}")
    return 0


def _plain(markdown: str) -> str:
    """A README cell as terminal text: no backticks or bold marks."""
    return markdown.replace("`", "").replace("**", "")


def cmd_cancel(args: argparse.Namespace) -> int:
    """Batches not yet written are dropped; batches already written stay in the index."""
    from rifflux.reindex import Reindexer

    reindexer = Reindexer(_settings(args))
    try:
        reindexer.cancel(args.job_id)
    finally:
        reindexer.close()
    _say(f"cancelled {args.job_id}")
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    import signal

    from rifflux.reindex import Reindexer
    from rifflux.watch.watcher import FileWatcher

    settings = _settings(args)
    configure_logging(settings.log_level, style="json")
    roots = args.paths or [Path(p) for p in settings.file_watcher_paths] or [Path(".")]
    reindexer = Reindexer(settings)
    try:
        watcher = FileWatcher(settings, roots, reindexer).start()
    except BaseException:
        reindexer.close()
        raise
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            if watcher.state.gave_up:
                _say(
                    f"rifflux: error: watcher gave up: {watcher.state.last_error}", file=sys.stderr
                )
                return EXIT_ERROR
    finally:
        watcher.stop()
        reindexer.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    debug = False
    try:
        # The environment is read here, once; every command works with this object.
        settings = args.settings = Settings.from_env()
        # The CLI talks to people: only warnings unless a level was asked for.
        explicit = "RIFFLUX_LOG_LEVEL" in os.environ
        debug = explicit and settings.log_level == "DEBUG"
        configure_logging(settings.log_level if explicit else "WARNING", style="console")
        for name in ignored_variables(os.environ):
            _say(f"rifflux: warning: {name} is no longer read (a fixed tuning value)", sys.stderr)
        if not debug:
            # pika logs each failed connection attempt with a traceback; the failure
            # itself reaches the user as one line (_describe_failure).
            logging.getLogger("pika").setLevel(logging.CRITICAL)
        return handler(args)
    except RiffluxError as exc:
        return _fail(str(exc), EXIT_ERROR)
    except ValueError as exc:
        return _fail(os_failure(exc) or str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _broken_pipe()
    except Exception as exc:
        return _fail(_describe_failure(exc, args, debug), EXIT_ERROR)


def _fail(message: str, code: int) -> int:
    _say(f"rifflux: error: {' '.join(message.split())}", file=sys.stderr)
    return code


def _broken_pipe() -> int:
    """The reader of stdout went away: exit quietly (Python docs, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def _describe_failure(exc: Exception, args: argparse.Namespace, debug: bool) -> str:
    """One line for an error no command handled: database, broker, OS, or a crash."""
    from rifflux.queue.brokers import broker_unavailable, is_broker_error
    from rifflux.store.connection import database_failure

    settings = _settings(args)
    known = database_failure(settings.db_path, exc) if isinstance(exc, sqlite3.Error) else None
    if known is not None:
        return str(known)
    if isinstance(exc, sqlite3.Error):
        return f"database error on {settings.db_path}: {exc}"
    if is_broker_error(exc):
        return str(broker_unavailable(settings.resolved_broker_url, exc))
    about_a_path = os_failure(exc)
    if about_a_path is not None:
        return about_a_path
    if debug:
        traceback.print_exc()
    return (
        f"internal error: {type(exc).__name__}: {exc} "
        "(run with RIFFLUX_LOG_LEVEL=DEBUG for the traceback)"
    )


if __name__ == "__main__":
    sys.exit(main())
