"""The five MCP tools as plain functions: call the core with the arguments, shape the answer.

Each function takes a :class:`ToolContext` and returns the JSON object the tool
answers with. Bad input raises :class:`~rifflux.errors.RiffluxError` or ``ValueError``
with a one-line message; ``tool_list.py`` declares these functions to clients and
``server.py`` turns those errors into tool errors. An answer to a call without
``max_tokens`` keeps to ``RIFFLUX_MAX_RESPONSE_TOKENS`` (``budget.within_limit``): a
larger one is fitted as that ``max_tokens`` would fit it, and says so with its
``budget``. Every function may block (SQLite, embedding, waiting for a job), so the
server runs them in worker threads.

The server indexes and serves only inside its allowed roots (``rifflux.index.allowed``,
docs/security.md), and nothing on the deny list (``rifflux.index.denied``):
``reindex`` refuses a path outside the roots, a secret path and a file whose name the
globs exclude, and its job's scan follows no symlink out of the job's own roots;
every path a tool returns (search results, ``get_chunk`` and its neighbours,
``get_file``, ``multi_get``, the knowledge searches) passes one check at read time, by
realpath: inside the call's roots and not a secret path
(:class:`~rifflux.search.served.ServedPaths`, built by :meth:`ToolContext.served`); a
file named outright is refused, a search or a glob leaves it out. ``db_path`` opens
another index read-only, only when ``RIFFLUX_ALLOW_DB_PATH`` allows it and only inside
the roots. A server in ``/``, a home directory or a parent of one, without
``RIFFLUX_ALLOWED_ROOTS``, has no allowed root: calls that read or index files fail
with one line naming it; searching the server's own index (results pass the deny list),
``index_status`` and ``context_stats`` still work.

Paths in tool arguments mean what results show: a relative ``path``, ``paths`` or
``db_path`` is read against the directory the index's paths are relative to
(:attr:`ToolContext.base`), never the process's working directory, which an MCP host
chooses (often ``/``). A server given ``RIFFLUX_BASE_DIR`` works in that directory:
``reindex`` with no path indexes it, and relative settings are read from it.
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
from rifflux.index.report import IndexReport
from rifflux.index.scan import glob_mismatch
from rifflux.reindex import Reindexer
from rifflux.search.budget import budget_response, within_limit
from rifflux.search.request import SearchRequest
from rifflux.search.served import ServedPaths
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
    """What the tools work on: settings, the index's SearchService and, as ``queue``,
    the :class:`~rifflux.reindex.Reindexer` through which every job of this server is
    submitted and followed (its worker policy, its wait, its one lock)."""

    settings: Settings
    search: SearchService
    # The front-side job API (a Reindexer): not the queue transport, which it holds.
    queue: Reindexer
    # The directory the server works in: RIFFLUX_BASE_DIR when set, else the process's
    # working directory. ``reindex`` with no path indexes it; the default allowed root.
    cwd: Path
    # Set by close(): a thread still waiting for a job gives up instead of keeping the
    # process alive (the server abandons such threads when their call is cancelled).
    closing: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _other_services: dict[Path, SearchService] = field(default_factory=dict, init=False, repr=False)
    _services_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    # Set when RIFFLUX_AUTO_REINDEX_ON_SEARCH is on: searches trigger background jobs.
    auto_reindex: AutoReindexer | None = field(default=None, init=False, repr=False)
    # Set by the HTTP transport: the live session counts index_status shows.
    http_sessions: Callable[[], dict[str, Any]] | None = field(default=None, init=False, repr=False)

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

    @property
    def base(self) -> Path:
        """The directory result paths are relative to, against which relative paths in
        tool arguments are read: RIFFLUX_BASE_DIR, else the index's recorded base
        directory, else :attr:`cwd` (no index yet)."""
        if self.settings.base_dir is not None:
            return self.settings.base_dir
        try:
            recorded = self.search.base_dir()
        except RiffluxError:  # No index yet, or one that cannot be read: nothing to match.
            recorded = None
        return Path(recorded) if recorded else self.cwd

    def served(
        self, client_roots: Sequence[Path] | None, *, searching: bool = False
    ) -> ServedPaths:
        """The one check of what this call may return (:meth:`roots_for`, the deny list).

        A search of the server's own index on a server with no allowed root (and no
        client roots) still answers: its results pass the deny list alone, since the
        index's contents were chosen when it was built (docs/security.md).
        """
        allow_secrets = self.settings.allow_secret_paths
        try:
            roots = self.roots_for(client_roots)
        except NoAllowedRootsError:
            if not searching:
                raise
            return ServedPaths((Path("/"),), allow_secrets=allow_secrets)
        return ServedPaths(tuple(roots), allow_secrets=allow_secrets)

    @classmethod
    def from_settings(cls, settings: Settings, *, cwd: Path | None = None) -> ToolContext:
        """The context of a server started in ``cwd`` (default: this process's working
        directory); given RIFFLUX_BASE_DIR, the server works in that directory instead."""
        cwd = Path(cwd or os.getcwd())
        if settings.base_dir is not None:
            base = Path(os.path.abspath(cwd / settings.base_dir.expanduser()))
            settings = settings.with_overrides(base_dir=base)
            cwd = base
        cwd = cwd.resolve()
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
            check_allowed(roots, ctx.allowed_roots, remedy=WIDEN_ROOTS)
            ctx.auto_reindex = AutoReindexer(
                ctx.queue,
                roots,
                settings.auto_reindex_min_interval_seconds,
                after_check=ctx.keep_jobs_moving,
            )
        return ctx

    def service_for(self, db_path: str | None) -> SearchService:
        """The server's own SearchService, or a cached one for another index database
        (sharing the server's query cache, so its bounds are the process's).

        Another index is opened read-only and, as every search, never publishes its vector
        cache: a ``db_path`` search writes nothing, there or beside it.
        """
        if db_path is None or not db_path.strip():
            return self.search
        if not self.settings.allow_db_path:
            raise RiffluxError(
                "db_path is disabled on this server (RIFFLUX_ALLOW_DB_PATH=0); search without it"
            )
        base = self.base
        path = resolve_against(base, db_path)
        if path == self.settings.db_path:
            return self.search
        allowed = self.allowed_roots
        if not is_within(path, allowed):
            remedy = tool_remedy(base, [db_path])
            raise PathNotAllowedError(
                "db_path " + outside_roots([db_path], [path], allowed, remedy)
            )
        with self._services_lock:
            service = self._other_services.get(path)
            if service is not None:
                return service
            service = SearchService(
                self.settings.with_overrides(db_path=path),
                query_cache=self.search.query_cache,
            )
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
        """Submit one job for ``roots`` (the :class:`Reindexer` refuses a missing root
        before anything is made), then start workers unless some are alive.

        No lock of this process is held while the submit waits for the index's write
        lock (``SUBMIT_LOCK_SECONDS``): other calls, ``index_status`` included, answer
        meanwhile."""
        job_id = self.queue.submit(roots, force=force, prune_missing=prune_missing)
        self.queue.ensure_workers()
        return job_id

    def keep_jobs_moving(self) -> None:
        """Start workers when a job is unfinished and none is alive (see
        :meth:`Reindexer.keep_jobs_moving`); never raises: callers are reads."""
        try:
            self.queue.keep_jobs_moving()
        except Exception:
            log.warning("mcp.keep_jobs_moving_failed", exc_info=True)

    def queue_status(self) -> dict[str, Any]:
        return self.queue.status()

    def close(self) -> None:
        """Close every SearchService and the queue (which stops a local worker pool)."""
        self.closing.set()
        self.search.close()
        with self._services_lock:
            for service in self._other_services.values():
                service.close()
            self._other_services.clear()
        self.queue.close()


def resolve_against(cwd: Path, path: str | Path) -> Path:
    """``path`` made absolute against ``cwd`` (``~`` expanded, links resolved, as job roots are)."""
    return (cwd / Path(path).expanduser()).resolve()


def search_rifflux(
    ctx: ToolContext,
    query: object,
    db_path: str | None = None,
    client_roots: Sequence[Path] | None = None,
    **options: object,
) -> dict[str, Any]:
    """``{query, mode, count, embedding_model, results}``; a blank query finds nothing.
    Results hold only files the call may return (:meth:`ToolContext.served`).

    ``query`` and ``options`` are :class:`SearchRequest` fields, checked there.
    """
    request = SearchRequest.from_arguments({"query": query, **options})
    own_index = db_path is None or not db_path.strip()
    served = ctx.served(client_roots, searching=own_index)
    if ctx.auto_reindex is not None and (db_path is None or not db_path.strip()):
        ctx.auto_reindex.maybe_trigger()
        try:
            response = ctx.search.search_response(request, served)
        except IndexMissingError as exc:
            raise IndexMissingError(
                f"{exc}; an automatic reindex is creating it, search again shortly"
            ) from exc
    else:
        response = ctx.service_for(db_path).search_response(request, served)
    if request.max_tokens is not None:
        return response
    return search_within_limit(ctx, response)


def search_within_limit(
    ctx: ToolContext, response: dict[str, Any], text_key: str = "content"
) -> dict[str, Any]:
    """A search's answer (its results' ``text_key`` texts) kept to
    RIFFLUX_MAX_RESPONSE_TOKENS, for a call that gave no ``max_tokens``."""
    return within_limit(
        response,
        ctx.settings.max_response_tokens,
        lambda whole, limit: budget_response(whole, whole["query"], limit, text_key=text_key),
    )


def resolve_roots(
    ctx: ToolContext,
    path: str | None,
    paths: Sequence[str] | None,
    *,
    allowed: Sequence[Path] | None = None,
    against: Path | None = None,
    remedy: str | None = None,
) -> list[Path]:
    """``paths`` if any, else ``path``, else the server's working directory.

    Relative paths are read against ``against`` (default: :attr:`ToolContext.base`, the
    directory result paths are relative to). All must lie inside ``allowed`` (default:
    the server's allowed roots) and be off the deny list (unless
    RIFFLUX_ALLOW_SECRET_PATHS). ``remedy`` ends the refusal of a path outside the
    roots (default: :func:`tool_remedy`). That they exist is checked where a job is
    submitted (:meth:`Reindexer.submit`) or a watcher started.
    """
    given = [p for p in paths or () if p.strip()]
    if not given and path is not None and path.strip():
        given = [path]
    base = ctx.base if against is None else against
    if not given:
        given = [str(ctx.cwd)]
        remedy = remedy or default_remedy(base)
    roots = [resolve_against(base, p) for p in given]
    check_allowed(
        roots,
        ctx.allowed_roots if allowed is None else allowed,
        given=given,
        remedy=remedy or tool_remedy(base, given),
    )
    for text, root in zip(given, roots, strict=True):
        lexical = os.path.abspath(base / Path(text).expanduser())
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
    return resolve_roots(ctx, None, given, against=ctx.cwd, remedy=WIDEN_ROOTS)


def refuse_without_roots(ctx: ToolContext, roots: Sequence[Path], option: str) -> None:
    """Paths the operator named at start are explicit choices, but they obey the allowed
    roots like any other: on a server with no default root this raises the one line
    that says to set RIFFLUX_ALLOWED_ROOTS to them."""
    refusal = ctx.no_default_root(suggest=",".join(str(r) for r in roots))
    if refusal is not None:
        raise NoAllowedRootsError(f"{option} {' '.join(str(r) for r in roots)}: {refusal}")


WIDEN_ROOTS = "set RIFFLUX_ALLOWED_ROOTS to include it"
"""The remedy for a path the operator named (``--watch``, ``--reindex-on-start``...):
the operator sets the roots. A path in a tool call gets :func:`tool_remedy`: the agent
cannot change the roots, and widening them is rarely what was wrong."""


def tool_remedy(base: Path, given: Sequence[str]) -> str:
    """How a tool call names a path inside the roots: where a relative one is read from."""
    if all(os.path.isabs(os.path.expanduser(text)) for text in given):
        return f"pass a path inside them (relative paths are read from {base})"
    return f"paths are relative to {base}"


def default_remedy(base: Path) -> str:
    """Why a call that named no path was refused, and the two ways out: the default is
    the server's working directory, which a host that sets none leaves at ``/``."""
    return (
        "with no path reindex indexes the server's working directory; pass a path "
        f"(relative paths are read from {base}), or start the server with "
        "RIFFLUX_BASE_DIR, the directory it then works in"
    )


def check_allowed(
    paths: Sequence[Path],
    allowed: Sequence[Path],
    *,
    given: Sequence[str] | None = None,
    remedy: str = WIDEN_ROOTS,
) -> None:
    """Raise a one-line error naming every path whose realpath is outside ``allowed``:
    as ``given`` (the caller's text) and what it resolves to, then ``remedy``."""
    texts = [str(p) for p in paths] if given is None else list(given)
    outside = [(t, p) for t, p in zip(texts, paths, strict=True) if not is_within(p, allowed)]
    if outside:
        raise PathNotAllowedError(
            outside_roots([t for t, _ in outside], [p for _, p in outside], allowed, remedy)
        )


def outside_roots(
    given: Sequence[str], resolved: Sequence[Path], allowed: Sequence[Path], remedy: str
) -> str:
    """``'agents' (resolves to /agents) is outside the allowed roots (/notes); <remedy>``:
    each path as the caller wrote it, and where it led when that is somewhere else."""
    shown = []
    for text, path in zip(given, resolved, strict=True):
        if text == str(path):
            shown.append(shorten(text))
        else:
            shown.append(f"{shorten(repr(text))} (resolves to {shorten(str(path))})")
    verb = "is" if len(shown) == 1 else "are"
    return f"{', '.join(shown)} {verb} outside the allowed roots ({describe(allowed)}); {remedy}"


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
        job_id, timeout=REINDEX_WAIT_SECONDS, on_progress=stop_if_closing, start_workers=True
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
    over HTTP also ``http_sessions`` ``{live, peak, max}``. An unfinished job with no
    live worker gets a local pool first (:meth:`ToolContext.keep_jobs_moving`)."""
    ctx.keep_jobs_moving()
    result = status.index_status(ctx.search, ctx.queue_status)
    if ctx.http_sessions is not None:
        result["http_sessions"] = ctx.http_sessions()
    return result


def check_served(ctx: ToolContext, stored_path: str, served: ServedPaths) -> None:
    """Raise the one-line refusal of an indexed file the call may not return (outside
    its roots, by realpath now, or on the deny list): :meth:`ServedPaths.refusal`."""
    refusal = served.refusal(stored_path, ctx.search.absolute_path(stored_path))
    if refusal is not None:
        raise refusal


def get_chunk(
    ctx: ToolContext,
    chunk_id: str,
    client_roots: Sequence[Path] | None = None,
    neighbors: object = 0,
) -> dict[str, Any]:
    """``{chunk}``, and with ``neighbors`` ≥ 1 the chunks ``before`` and ``after`` it."""
    served = ctx.served(client_roots)
    found = ctx.search.chunk_with_neighbors(chunk_id, neighbors)
    chunks = [found["chunk"], *found.get("before", ()), *found.get("after", ())]
    for path in dict.fromkeys(chunk["path"] for chunk in chunks):
        check_served(ctx, path, served)
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
    served = ctx.served(client_roots)
    found = ctx.search.get_file(path, heading=heading, max_tokens=max_tokens)
    check_served(ctx, found["path"], served)
    if max_tokens is not None:
        return {"file": found}
    return within_limit(
        {"file": found},
        ctx.settings.max_response_tokens,
        lambda _whole, limit: {
            "file": ctx.search.get_file(path, heading=heading, max_tokens=limit)
        },
    )
