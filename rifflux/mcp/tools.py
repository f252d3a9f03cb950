"""The five MCP tools as plain functions: call the core with the arguments, shape the answer.

Each function takes a :class:`ToolContext` and returns the JSON object the tool
answers with. Bad input raises :class:`~rifflux.errors.RiffluxError` or ``ValueError``
with a one-line message; ``server.py`` registers these functions with the protocol and
turns those errors into tool errors. An answer to a call without ``max_tokens`` keeps
to ``RIFFLUX_MAX_RESPONSE_TOKENS`` (``budget.within_limit``): a larger one is fitted as
that ``max_tokens`` would fit it, and says so with its ``budget``. Every function may
block (SQLite, embedding, waiting for a job), so the server runs them in worker threads.

The server indexes and serves only inside its allowed roots (``rifflux.index.allowed``,
docs/security.md), and nothing on the deny list (``rifflux.index.denied``):
``reindex`` refuses a path outside the roots, a secret path and a file whose name the
globs exclude, and its job's scan follows no symlink out of the job's own roots;
``get_file`` and ``get_chunk`` re-check, at read time and by realpath, that the file
still lies inside the roots and is not a secret path. ``db_path`` opens another index
read-only, only when ``RIFFLUX_ALLOW_DB_PATH`` allows it and only inside the roots. A
server in ``/``, a home directory or a parent of one, without ``RIFFLUX_ALLOWED_ROOTS``,
has no allowed root: those calls fail with one line naming it (searching the server's
own index and ``index_status`` still work).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from rifflux import status
from rifflux.config import Settings
from rifflux.errors import (
    IndexMissingError,
    NoAllowedRootsError,
    PathNotAllowedError,
    RiffluxError,
    SecretPathError,
    shorten,
)
from rifflux.index.allowed import (
    configured_roots,
    describe,
    effective_roots,
    is_within,
    known_homes,
    no_default_root,
    real,
    unsafe_default_root,
)
from rifflux.index.denied import refused_secret, secret_reason
from rifflux.index.indexer import IndexReport
from rifflux.index.scan import glob_mismatch, require_roots
from rifflux.reindex import Reindexer
from rifflux.search.budget import budget_response, within_limit
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService
from rifflux.store.jobs import JobRecord
from rifflux.watch.auto import AutoReindexer

log = structlog.get_logger(__name__)

REINDEX_WAIT_SECONDS = 3600.0
"""How long a ``reindex`` call with ``background=false`` waits before it gives up (the
job itself keeps running and shows in ``index_status``)."""
MAX_ERRORS_IN_MESSAGE = 5
"""How many of a failed job's file errors a tool error message lists."""
MAX_SKIPPED_IN_RESULT = 20
"""How many skipped files (with their reasons) a ``reindex`` result lists."""


@dataclass
class ToolContext:
    """What the tools work on: settings, the index's SearchService and its entry point
    for reindex jobs (a :class:`Reindexer`)."""

    settings: Settings
    search: SearchService
    queue: Reindexer
    # Relative paths in tool arguments resolve against this directory.
    cwd: Path
    # Set by close(): a thread still waiting for a job gives up instead of keeping the
    # process alive (the server abandons such threads when their call is cancelled).
    closing: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _other_services: dict[Path, SearchService] = field(default_factory=dict, init=False, repr=False)
    _services_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    # ensure_workers + submit and the queue's broker connection are not thread-safe.
    queue_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    # Set when RIFFLUX_AUTO_REINDEX_ON_SEARCH is on: searches trigger background jobs.
    auto_reindex: AutoReindexer | None = field(default=None, init=False, repr=False)
    # Set by the HTTP transport: the live session counts index_status shows.
    http_sessions: Callable[[], dict[str, Any]] | None = field(default=None, init=False, repr=False)
    # Set in an HTTP worker process (rifflux.mcp.http_workers): it never starts a worker
    # pool itself, it asks its supervisor, which does unless workers are alive.
    request_workers: Callable[[], None] | None = field(default=None, init=False, repr=False)

    @property
    def allowed_roots(self) -> list[Path]:
        """RIFFLUX_ALLOWED_ROOTS as realpaths, or the working directory; raises
        NoAllowedRootsError when the working directory may not be the default."""
        roots = configured_roots(self.settings, self.cwd)
        if not roots:
            raise NoAllowedRootsError(self.no_default_root() or "no allowed roots")
        return roots

    def no_default_root(self, suggest: str = "/path/to/notes") -> str | None:
        """The one-line refusal of a server with no allowed root, else None."""
        if self.settings.allowed_roots:
            return None
        why = unsafe_default_root(self.cwd, *known_homes())
        return None if why is None else no_default_root(self.cwd, why, suggest)

    def roots_for(self, client_roots: Sequence[Path] | None) -> list[Path]:
        """The allowed roots of one call, narrowed or extended by the client's roots.

        Without RIFFLUX_ALLOWED_ROOTS the client's roots replace the default, also on a
        server that has no default root (the host declared them, not the model).
        """
        restricted = bool(self.settings.allowed_roots)
        if client_roots is not None and not restricted:
            return [real(c) for c in client_roots]
        return effective_roots(self.allowed_roots, client_roots, restricted=restricted)

    @classmethod
    def from_settings(cls, settings: Settings, *, cwd: Path | None = None) -> ToolContext:
        cwd = Path(cwd or os.getcwd()).resolve()
        settings = settings.with_overrides(db_path=resolve_against(cwd, settings.db_path))
        ctx = cls(
            settings=settings,
            search=SearchService(settings),
            queue=Reindexer(settings),
            cwd=cwd,
        )
        if settings.auto_reindex_on_search:
            roots = [resolve_against(cwd, p) for p in settings.auto_reindex_paths] or [cwd]
            refuse_without_roots(ctx, roots, "RIFFLUX_AUTO_REINDEX_ON_SEARCH")
            check_allowed(roots, ctx.allowed_roots)
            ctx.auto_reindex = AutoReindexer(
                ctx.queue, roots, settings.auto_reindex_min_interval_seconds
            )
        return ctx

    def service_for(self, db_path: str | None) -> SearchService:
        """The server's own SearchService, or a cached one for another index database.

        Another index is opened read-only and, as every search, never publishes its vector
        cache: a ``db_path`` search writes nothing, there or beside it.
        """
        if db_path is None or not db_path.strip():
            return self.search
        if not self.settings.allow_db_path:
            raise RiffluxError(
                "db_path is disabled on this server (RIFFLUX_ALLOW_DB_PATH=0); search without it"
            )
        path = resolve_against(self.cwd, db_path)
        if path == self.settings.db_path:
            return self.search
        allowed = self.allowed_roots
        if not is_within(path, allowed):
            raise PathNotAllowedError(
                f"db_path {path} is outside the allowed roots ({describe(allowed)}); "
                "set RIFFLUX_ALLOWED_ROOTS to allow it"
            )
        with self._services_lock:
            service = self._other_services.get(path)
            if service is not None:
                return service
            service = SearchService(self.settings.with_overrides(db_path=path))
            try:
                service.connection()  # A missing, foreign or damaged file fails here.
            except BaseException:
                service.close()
                raise
            self._other_services[path] = service
            return service

    def start_reindex(
        self, roots: Sequence[Path], *, force: bool = False, prune_missing: bool = True
    ) -> str:
        """Start workers unless some are alive, then submit one job for ``roots``."""
        with self.queue_lock:
            if self.request_workers is not None:
                self.request_workers()
            else:
                self.queue.ensure_workers()
            return self.queue.submit(roots, force=force, prune_missing=prune_missing)

    def queue_status(self) -> dict[str, Any]:
        with self.queue_lock:
            return self.queue.status()

    def close(self) -> None:
        """Close every SearchService and the queue (which stops a local worker pool)."""
        self.closing.set()
        self.search.close()
        with self._services_lock:
            for service in self._other_services.values():
                service.close()
            self._other_services.clear()
        with self.queue_lock:
            self.queue.close()


def resolve_against(cwd: Path, path: str | Path) -> Path:
    """``path`` made absolute against ``cwd`` (``~`` expanded, links resolved, as job roots are)."""
    return (cwd / Path(path).expanduser()).resolve()


def search_rifflux(
    ctx: ToolContext, query: object, db_path: str | None = None, **options: object
) -> dict[str, Any]:
    """``{query, mode, count, embedding_model, results}``; a blank query finds nothing.

    ``query`` and ``options`` are :class:`SearchRequest` fields, checked there.
    """
    request = SearchRequest.from_arguments({"query": query, **options})
    if ctx.auto_reindex is not None and (db_path is None or not db_path.strip()):
        ctx.auto_reindex.maybe_trigger()
        try:
            response = ctx.search.search_response(request)
        except IndexMissingError as exc:
            raise IndexMissingError(
                f"{exc}; an automatic reindex is creating it, search again shortly"
            ) from exc
    else:
        response = ctx.service_for(db_path).search_response(request)
    if request.max_tokens is not None:
        return response
    return within_limit(
        response,
        ctx.settings.max_response_tokens,
        lambda whole, limit: budget_response(whole, request.query, limit),
    )


def resolve_roots(
    ctx: ToolContext,
    path: str | None,
    paths: Sequence[str] | None,
    *,
    allowed: Sequence[Path] | None = None,
) -> list[Path]:
    """``paths`` if any, else ``path``, else the server's working directory.

    All must exist, lie inside ``allowed`` (default: the server's allowed roots) and
    be off the deny list (unless RIFFLUX_ALLOW_SECRET_PATHS).
    """
    given = [p for p in paths or () if p.strip()]
    if not given and path is not None and path.strip():
        given = [path]
    if not given:
        given = [str(ctx.cwd)]
    roots = [resolve_against(ctx.cwd, p) for p in given]
    check_allowed(roots, ctx.allowed_roots if allowed is None else allowed)
    require_roots(roots)
    for text, root in zip(given, roots, strict=True):
        lexical = os.path.abspath(ctx.cwd / Path(text).expanduser())
        rule = refused_secret(
            [lexical, root], is_dir=root.is_dir(), allow=ctx.settings.allow_secret_paths
        )
        if rule is not None:
            raise SecretPathError(f"{root} is not indexed: {secret_reason(rule)}")
    return roots


def startup_roots(ctx: ToolContext, paths: Sequence[str | Path], option: str) -> list[Path]:
    """:func:`resolve_roots` for paths the operator named at start (``option``:
    ``--watch``, ``--reindex-on-start``, ``RIFFLUX_FILE_WATCHER_PATHS``)."""
    given = [str(p) for p in paths] or [str(ctx.cwd)]
    refuse_without_roots(ctx, [resolve_against(ctx.cwd, p) for p in given], option)
    return resolve_roots(ctx, None, given)


def refuse_without_roots(ctx: ToolContext, roots: Sequence[Path], option: str) -> None:
    """Paths the operator named at start are explicit choices, but they obey the allowed
    roots like any other: on a server with no default root this raises the one line
    that says to set RIFFLUX_ALLOWED_ROOTS to them."""
    refusal = ctx.no_default_root(suggest=",".join(str(r) for r in roots))
    if refusal is not None:
        raise NoAllowedRootsError(f"{option} {' '.join(str(r) for r in roots)}: {refusal}")


def check_allowed(paths: Sequence[Path], allowed: Sequence[Path]) -> None:
    """Raise a one-line error naming every path whose realpath is outside ``allowed``."""
    outside = [shorten(str(p)) for p in paths if not is_within(p, allowed)]
    if outside:
        raise PathNotAllowedError(
            f"{', '.join(outside)} is outside the allowed roots ({describe(allowed)}); "
            "set RIFFLUX_ALLOWED_ROOTS to allow it"
        )


def check_indexable_files(ctx: ToolContext, roots: Sequence[Path]) -> None:
    """A single-file root must be indexable by name, or the call is refused."""
    include, exclude = ctx.settings.include_globs, ctx.settings.exclude_globs
    refused = [str(r) for r in roots if r.is_file() and glob_mismatch(r, include, exclude)]
    if refused:
        raise RiffluxError(
            f"{', '.join(refused)} is not indexed: its name does not match "
            f"RIFFLUX_INDEX_INCLUDE_GLOBS ({', '.join(include)}) or matches "
            "RIFFLUX_INDEX_EXCLUDE_GLOBS"
        )


def job_failure(job: JobRecord) -> str:
    """A one-line account of why a job did not complete."""
    problems = [f"{e.get('path', '?')}: {e.get('error', '?')}" for e in job.errors]
    listed = "; ".join(problems[:MAX_ERRORS_IN_MESSAGE])
    if len(problems) > MAX_ERRORS_IN_MESSAGE:
        listed += f"; and {len(problems) - MAX_ERRORS_IN_MESSAGE} more"
    return f"reindex job {job.id} {job.state}" + (f": {listed}" if listed else "")


def reindex(
    ctx: ToolContext,
    path: str | None = None,
    paths: Sequence[str] | None = None,
    force: bool = False,
    prune_missing: bool = True,
    background: bool = False,
    client_roots: Sequence[Path] | None = None,
) -> dict[str, Any]:
    """Submit one job for the roots; wait for it unless ``background``."""
    allowed = ctx.roots_for(client_roots)
    roots = resolve_roots(ctx, path, paths, allowed=allowed)
    check_indexable_files(ctx, roots)
    job_id = ctx.start_reindex(roots, force=force, prune_missing=prune_missing)
    if background:
        submitted = ctx.queue.job(job_id)
        return {"job_id": job_id, "status": submitted.state if submitted else "queued"}

    def stop_if_closing(_progress: JobRecord) -> None:
        if ctx.closing.is_set():
            raise RiffluxError(f"the server is shutting down; job {job_id} keeps its state")

    job = ctx.queue.wait(
        job_id,
        timeout=REINDEX_WAIT_SECONDS,
        on_progress=stop_if_closing,
        start_workers=ctx.request_workers is None,
    )
    if job.state != "completed":
        raise RiffluxError(job_failure(job))
    model = ctx.search.stored_model() or ctx.search.embedder_label
    return reindex_result(IndexReport.from_job(job, model), roots, ctx.settings)


def reindex_result(
    report: IndexReport, roots: Sequence[Path], settings: Settings
) -> dict[str, Any]:
    """The ``reindex`` tool's answer: the job's report, in the tool's keys."""
    return {
        "indexed_files": report.files_indexed,
        "skipped_files": report.files_skipped,
        "deleted_files": report.files_deleted,
        "skipped": report.skipped_dicts()[:MAX_SKIPPED_IN_RESULT],
        "indexed_paths": [str(root) for root in roots],
        "embedding_model": report.embedding_model,
        "embedding_backend": settings.embedding_backend,
        "job_id": report.job_id,
    }


def index_status(ctx: ToolContext) -> dict[str, Any]:
    """:func:`rifflux.status.index_status`, the object ``rifflux status --json`` prints;
    over HTTP also ``http_sessions`` ``{live, peak, max}``."""
    result = status.index_status(ctx.search, ctx.queue_status)
    if ctx.http_sessions is not None:
        result["http_sessions"] = ctx.http_sessions()
    return result


def check_served(ctx: ToolContext, stored_path: str, allowed: Sequence[Path]) -> None:
    """Refuse an indexed file whose realpath is, now, outside the allowed roots, or
    which (by its stored path or its realpath) is on the deny list.

    Checked at read time: a file swapped for a symlink after it was indexed, or an
    index built by the CLI from elsewhere or before the deny list, serves nothing
    outside the roots and no secret.
    """
    path = ctx.search.absolute_path(stored_path)
    if not is_within(path, allowed):
        raise PathNotAllowedError(
            f"{stored_path!r} is indexed but lies outside the allowed roots "
            f"({describe(allowed)}); set RIFFLUX_ALLOWED_ROOTS to serve it"
        )
    rule = refused_secret([path, real(path)], allow=ctx.settings.allow_secret_paths)
    if rule is not None:
        raise SecretPathError(f"{stored_path!r} is not served: {secret_reason(rule, 'serve')}")


def get_chunk(
    ctx: ToolContext,
    chunk_id: str,
    client_roots: Sequence[Path] | None = None,
    neighbors: object = 0,
) -> dict[str, Any]:
    """``{chunk}``, and with ``neighbors`` ≥ 1 the chunks ``before`` and ``after`` it."""
    allowed = ctx.roots_for(client_roots)
    found = ctx.search.chunk_with_neighbors(chunk_id, neighbors)
    check_served(ctx, found["chunk"]["path"], allowed)
    return found


def get_file(
    ctx: ToolContext,
    path: str,
    client_roots: Sequence[Path] | None = None,
    heading: str | None = None,
    max_tokens: object = None,
) -> dict[str, Any]:
    """An indexed file by its stored path, from the index (the file itself is not read);
    ``heading`` narrows it to one section, ``max_tokens`` fits the answer to a budget,
    else RIFFLUX_MAX_RESPONSE_TOKENS does when it is larger."""
    allowed = ctx.roots_for(client_roots)
    found = ctx.search.get_file(path, heading=heading, max_tokens=max_tokens)
    check_served(ctx, found["path"], allowed)
    if max_tokens is not None:
        return {"file": found}
    return within_limit(
        {"file": found},
        ctx.settings.max_response_tokens,
        lambda _whole, limit: {
            "file": ctx.search.get_file(path, heading=heading, max_tokens=limit)
        },
    )
