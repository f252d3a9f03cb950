"""The MCP server: the tools declared in ``tool_list.py`` over stdio or streamable HTTP.

Every failure reaches the client as a tool error (``is_error``) with one line of text,
and the server keeps serving: an argument the tool's input schema does not declare is
refused with the list of valid ones (``limt`` is not silently ignored); arguments that
do not fit the input schema name the field; search values are checked by
:class:`~rifflux.search.request.SearchRequest`, whose messages are the CLI's; a
:class:`~rifflux.errors.RiffluxError` or ``ValueError`` keeps its message; a damaged or
foreign database, a read-only index folder, an unreachable broker and an OS error read
as the CLI's one-line messages (an OS error echoes at most ~200 characters of a path);
anything else is ``internal error: <type>: <message>`` and its traceback goes to the log
(stderr; a stdio server's stdout carries protocol messages only).

Allowed roots (docs/security.md): every tool that reads or returns indexed files
(``reindex``, the searches, ``get_file``, ``get_chunk``, ``multi_get``) asks the client
for its roots (the protocol's roots capability, when the client declares it) on every
call, and works only inside the roots that leaves (``tools.ToolContext.roots_for``).
Watched and reindex-on-start paths must lie inside the server's allowed roots. A server
started in ``/``, a home directory or a parent of one without ``RIFFLUX_ALLOWED_ROOTS``
has no default root: it logs one warning at start (``mcp.no_allowed_roots``).

A successful answer's text content is its structured content as compact JSON; the
tools keep it to ``RIFFLUX_MAX_RESPONSE_TOKENS`` (or the call's ``max_tokens``), and one
still larger is a one-line error (:func:`compact_result`). The tool list is written for
an agent's context: dedented descriptions that say when to use each tool, input schemas
without derived titles or null defaults, no output schemas (docs/mcp.md).

The HTTP transport (bind check, bearer token, session cap, request deadlines) is
``http.py``.
"""

from __future__ import annotations

import functools
import inspect
import os
import shlex
import signal
import socket
import sqlite3
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path
from types import FrameType
from typing import Any, Literal, TypeVar

import anyio
import structlog
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, InputRequiredResult, TextContent
from mcp_types import Tool as MCPTool
from pydantic import ValidationError

from rifflux import __version__
from rifflux.config import Settings
from rifflux.errors import RiffluxError, os_failure
from rifflux.logs import configure_logging
from rifflux.mcp.host_config import launcher
from rifflux.mcp.http import MCP_PATH, check_bind, serve_http
from rifflux.mcp.http_workers import (
    HttpWorkers,
    ask_supervisor_for_workers,
    bind_socket,
    stop_when_orphaned,
)
from rifflux.mcp.tool_list import register_tools
from rifflux.mcp.tools import ToolContext, startup_roots
from rifflux.queue.brokers import broker_unavailable, is_broker_error
from rifflux.search.budget import compact_json, estimate_tokens
from rifflux.search.request import (
    as_integer,
)
from rifflux.store.connection import database_failure
from rifflux.watch.watcher import FileWatcher

log = structlog.get_logger(__name__)

SERVER_NAME = "rifflux"
GIL_SWITCH_INTERVAL_S = 0.0005
"""The server's GIL switch interval (Python's default is 5 ms): see run_server."""
MAX_INPUT_REPR = 80
"""How much of a rejected argument value a validation error message quotes."""

INSTRUCTIONS = (
    "Rifflux searches a local index of markdown and text files. Use search_rifflux to "
    "find chunks, grep_rifflux for exact strings and regexes, get_chunk/get_file/multi_get "
    "to read them in full, search_decisions "
    "and search_errors for decision records and error fixes, index_status/context_stats "
    "to see what is indexed, and reindex after files change."
)

Transport = Literal["stdio", "http"]
T = TypeVar("T")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= MAX_INPUT_REPR else text[: MAX_INPUT_REPR - 1] + "…"


MAX_UNKNOWN_LISTED = 5
"""How many unknown argument names an error message lists."""


def unknown_arguments(
    tool: str, arguments: dict[str, Any], schema: dict[str, Any] | None
) -> str | None:
    """One line naming the arguments ``tool``'s input schema does not declare and listing
    the valid ones; None when every argument is known (or the tool is unknown: the SDK
    says so). Read from the registered schema, so every tool, present or future, gets it."""
    if schema is None:
        return None
    valid = list(schema.get("properties", {}))
    unknown = [key for key in arguments if key not in valid]
    if not unknown:
        return None
    listed = ", ".join(_short_repr(key) for key in unknown[:MAX_UNKNOWN_LISTED])
    if len(unknown) > MAX_UNKNOWN_LISTED:
        listed += f" and {len(unknown) - MAX_UNKNOWN_LISTED} more"
    accepts = f"valid arguments: {', '.join(valid)}" if valid else "it takes no arguments"
    noun = "argument" if len(unknown) == 1 else "arguments"
    return _one_line(f"unknown {noun} for {tool}: {listed}; {accepts}")


def validation_message(tool: str, exc: ValidationError) -> str:
    """One line naming each rejected argument, what was wrong and what was given."""
    parts = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"]) or "arguments"
        part = f"{field}: {error['msg']}"
        if error["type"] != "missing":
            part += f" (got {_short_repr(error['input'])})"
        parts.append(part)
    return _one_line(f"invalid arguments for {tool}: {'; '.join(parts)}")


def tool_error_message(
    tool: str,
    exc: ToolError,
    *,
    broker_url: str = "RIFFLUX_BROKER_URL",
    db_path: Path | None = None,
) -> str:
    """The one line a client sees for a failed call; logs the traceback of a crash."""
    cause = exc.__cause__
    if isinstance(exc, UnexpectedToolError) and cause is not None:
        about_a_path = os_failure(cause)
        if about_a_path is not None:
            log.info("mcp.tool_error", tool=tool, error=about_a_path)
            return about_a_path
        if isinstance(cause, RiffluxError | ValueError) and not isinstance(cause, ValidationError):
            message = _one_line(str(cause))
            log.info("mcp.tool_error", tool=tool, error=message)
            return message
        known = _known_failure(cause, broker_url, db_path)
        if known is not None:
            log.warning("mcp.tool_error", tool=tool, error=known)
            return known
        log.error("mcp.tool_crashed", tool=tool, exc_info=cause)
        return _one_line(f"internal error: {type(cause).__name__}: {cause}")
    if isinstance(cause, ValidationError):
        message = validation_message(tool, cause)
    else:
        message = _one_line(str(exc))
    log.info("mcp.tool_error", tool=tool, error=message)
    return message


def _known_failure(exc: BaseException, broker_url: str, db_path: Path | None) -> str | None:
    """The one line for a damaged or foreign database, an index folder SQLite cannot
    write, an unreachable broker or an OS error."""
    known = database_failure(db_path, exc) if isinstance(exc, sqlite3.Error) else None
    if known is not None:
        return _one_line(str(known))
    if is_broker_error(exc):
        return _one_line(str(broker_unavailable(broker_url, exc)))
    # The filesystem said no (a name too long, a permission): a fact, not a crash; one
    # line that names it and echoes at most ~200 characters of the path.
    return os_failure(exc)


def tool_description(docstring: str) -> str:
    """A tool's docstring as its description: dedented, each paragraph on one line."""
    paragraphs = inspect.cleandoc(docstring).split("\n\n")
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in paragraphs)


def compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """An input schema as short as it can be while it says the same: without the titles
    pydantic derives from names (``"title": "Top K"`` for ``top_k``), without null
    defaults (an argument not in ``required`` is optional anyway), and with an ``anyOf``
    of plain types as one ``type`` list (``["string", "null"]``). Every client reads
    the tool list, so every token here costs each of them."""
    properties = {}
    for name, prop in schema.get("properties", {}).items():
        short = {
            k: v for k, v in prop.items() if k != "title" and not (k == "default" and v is None)
        }
        options = short.get("anyOf")
        if isinstance(options, list) and all(set(option) == {"type"} for option in options):
            del short["anyOf"]
            short["type"] = [option["type"] for option in options]
        properties[name] = short
    return {**{k: v for k, v in schema.items() if k != "title"}, "properties": properties}


def compact_result(tool: str, result: CallToolResult, limit: int) -> CallToolResult:
    """A successful call's text content as compact JSON. The tools fit their answers to
    ``limit`` (RIFFLUX_MAX_RESPONSE_TOKENS, or the call's larger ``max_tokens``) in these
    units; an answer still above it (a tool with nothing to cut, such as get_chunk's
    neighbours) is a one-line error."""
    text = compact_json(result.structured_content)
    size = estimate_tokens(text)
    if 0 < limit < size:
        message = (
            f"the answer of {tool} is ~{size} tokens, over this server's limit of {limit} "
            "(RIFFLUX_MAX_RESPONSE_TOKENS); ask for less (fewer neighbors or results, a "
            "heading, max_tokens)"
        )
        log.info("mcp.tool_error", tool=tool, error=message)
        return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
    return result.model_copy(update={"content": [TextContent(type="text", text=text)]})


class RiffluxServer(MCPServer):
    """An MCPServer with the Rifflux tools, whose errors are one-line tool errors."""

    def __init__(self, context: ToolContext) -> None:
        super().__init__(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS)
        self.context = context
        register_tools(self, context)
        for info in self._tool_manager.list_tools():
            info.description = tool_description(info.description)
            info.parameters = compact_schema(info.parameters)

    async def list_tools(self) -> list[MCPTool]:
        """The tools without their output schemas: each says only "an object" (every
        tool answers one), which costs a client tokens and tells it nothing; the
        answers still carry structured content."""
        return [
            tool.model_copy(update={"output_schema": None}) for tool in await super().list_tools()
        ]

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        context: Context[Any, Any] | None = None,
    ) -> CallToolResult | InputRequiredResult:
        unknown = unknown_arguments(name, arguments, self._tool_input_schema(name))
        if unknown is not None:
            log.info("mcp.tool_error", tool=name, error=unknown)
            return CallToolResult(content=[TextContent(type="text", text=unknown)], is_error=True)
        try:
            result = await super().call_tool(name, arguments, context)
        except ToolError as exc:
            settings = self.context.settings
            text = tool_error_message(
                name, exc, broker_url=settings.resolved_broker_url, db_path=settings.db_path
            )
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        if isinstance(result, CallToolResult) and result.structured_content is not None:
            limit = self.context.settings.max_response_tokens
            asked = as_integer(arguments.get("max_tokens"))
            if limit and isinstance(asked, int) and not isinstance(asked, bool):
                limit = max(limit, asked)
            return compact_result(name, result, limit)
        return result


def build_server(settings: Settings, *, context: ToolContext | None = None) -> RiffluxServer:
    """The server over ``settings``' index; the caller closes ``server.context``."""
    return RiffluxServer(context or ToolContext.from_settings(settings))


# -- running ---------------------------------------------------------------------------


def ensure_workers_in_background(ctx: ToolContext) -> None:
    """Start a local worker pool later, only if no worker shows up within
    ``RIFFLUX_STARTUP_WORKER_GRACE_SECONDS`` (the Procfile's workers boot beside us)."""
    ctx.queue.ensure_workers_in_background(ctx.settings.startup_worker_grace_seconds)


def start_background_reindex(ctx: ToolContext, paths: Sequence[str | Path]) -> str:
    """Submit one reindex job for ``paths`` now; start workers later only if none appears."""
    roots = startup_roots(ctx, paths, "--reindex-on-start")
    job_id = ctx.queue.submit(roots)
    ensure_workers_in_background(ctx)
    log.info("mcp.reindex_on_start", job_id=job_id, roots=[str(r) for r in roots])
    return job_id


def start_watcher(ctx: ToolContext, roots: Sequence[Path]) -> FileWatcher:
    """Watch ``roots``, submitting through the context's entry point. Unless workers are
    alive, a local pool boots now, so the first edit is as fast as the next; it gives
    way to workers started beside the server that appear within
    ``RIFFLUX_STARTUP_WORKER_GRACE_SECONDS`` (``Reindexer.boot_pool``)."""
    watcher = FileWatcher(ctx.settings, roots, ctx.queue).start()
    ctx.queue.boot_pool_in_background(ctx.settings.startup_worker_grace_seconds)
    return watcher


TRY_QUERY = "how are files indexed"
"""The search the startup line suggests (it finds something in this repository's docs,
which ``make run`` indexes)."""


def serving_line(host: str, port: int) -> str:
    """The one plain line an HTTP server prints for a person once it accepts: where MCP
    is, and a command to try in another terminal (this installation's ``rifflux``, as
    ``mcp-config`` names it; relative when it lies under the working directory)."""
    shown = f"[{host}]" if ":" in host else host
    command = launcher()
    if os.path.isabs(command[0]):
        relative = os.path.relpath(command[0])
        if not relative.startswith(".."):
            command[0] = relative
    rifflux = shlex.join(command)
    return (
        f"rifflux: MCP server at http://{shown}:{port}{MCP_PATH}; try: {rifflux} search "
        f"{shlex.quote(TRY_QUERY)} (connect a host: {rifflux} mcp-config --host vscode)"
    )


def _announce(host: str, port: int) -> None:
    print(serving_line(host, port), file=sys.stderr, flush=True)


def _serve_stdio(server: RiffluxServer, in_main_thread: bool) -> None:
    """Serve over stdio until the client closes stdin, or until SIGINT (Ctrl-C on a
    terminal) or SIGTERM reaches the main thread.

    The SDK reads stdin in a worker thread that no cancellation reaches: served from the
    main thread, an interrupt would wait there for the next line. So the server runs in a
    daemon thread (its worker threads are daemons too) while the main thread waits for
    it, and an interrupt unwinds through ``run_server``'s cleanup at once.
    """
    if not in_main_thread:
        anyio.run(server.run_stdio_async)
        return
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            anyio.run(server.run_stdio_async)
        except BaseException as exc:  # Re-raised in the main thread.
            failures.append(exc)

    thread = threading.Thread(target=serve, name="rifflux-stdio", daemon=True)
    thread.start()
    thread.join()  # Interrupted by KeyboardInterrupt, or a signal handler's SystemExit.
    if failures:
        raise failures[0]


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # SystemExit unwinds through run_server's finally, which stops a local worker pool.
    sys.exit(128 + signum)


@dataclass(frozen=True)
class HttpWorkerSpec:
    """What an HTTP worker process needs to serve (pickled into the spawned process)."""

    settings: Settings
    cwd: Path
    host: str
    port: int

    def __call__(self, index: int, sock: socket.socket, ready: Event, parent: int) -> None:
        """Serve stateless HTTP on ``sock`` until SIGTERM (:mod:`rifflux.mcp.http_workers`)."""
        settings = self.settings
        configure_logging(settings.log_level, style="json")
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        stop_when_orphaned(parent)
        context = ToolContext.from_settings(settings, cwd=self.cwd)
        context.queue.request_workers = functools.partial(ask_supervisor_for_workers, parent)
        try:
            server = build_server(settings, context=context)
            serve = functools.partial(
                serve_http, sock=sock, stateless=True, on_ready=ready.set, worker=index
            )
            anyio.run(serve, server, context, self.host, self.port)
        finally:
            context.close()


def _serve_http_workers(context: ToolContext, host: str, port: int, count: int) -> None:
    """Bind ``host:port`` once and serve it from ``count`` HTTP worker processes until
    stopped; this process keeps the watcher and the pool."""
    sock = bind_socket(host, port)
    spec = HttpWorkerSpec(context.settings, context.cwd, host, port)
    _announce(host, port)  # Connections queue on the bound socket until a worker accepts.

    log.info("mcp.http_workers_starting", workers=count, pid=os.getpid())
    try:
        HttpWorkers(spec, sock, count, context.queue.ensure_workers).run()
    finally:
        sock.close()


def run_server(
    settings: Settings,
    *,
    transport: Transport = "stdio",
    host: str | None = None,
    port: int | None = None,
    reindex_on_start: Sequence[str | Path] = (),
    watch: Sequence[str | Path] = (),
) -> None:
    """Serve until the client disconnects (stdio) or the process is stopped (HTTP).

    ``watch`` (or ``RIFFLUX_FILE_WATCHER=1`` with ``RIFFLUX_FILE_WATCHER_PATHS``) runs a
    file watcher in this process that keeps those roots indexed. Over HTTP with
    ``settings.http_workers`` > 1 this process supervises that many HTTP worker
    processes (``http_workers.py``) and keeps the watcher and the pool to itself.
    """
    host = host or settings.http_host
    if transport == "http":
        check_bind(host, settings.http_token)  # Before anything starts.
    # A search that spends its deadline in Python code (a filter over many paths) holds
    # the GIL between switches; every other call hands the GIL back at each SQLite or
    # socket step and waits up to one switch interval to get it again, so a short
    # interval keeps other sessions answering while such a call runs.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    context = ToolContext.from_settings(settings)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if in_main_thread else None
    watcher: FileWatcher | None = None
    try:
        server = build_server(settings, context=context)
        if reindex_on_start:
            start_background_reindex(context, reindex_on_start)
        elif context.queue.has_unfinished_jobs():
            # A job left by a server that was killed resumes: its messages are still
            # queued, and a worker pool (ours if nobody else's shows up) finishes it.
            log.info("mcp.resuming_unfinished_jobs")
            ensure_workers_in_background(context)
        # Watched paths, like reindex paths, must lie inside the allowed roots.
        watch_roots = startup_roots(context, watch, "--watch") if watch else []
        if not watch_roots and settings.file_watcher:
            paths = settings.file_watcher_paths
            watch_roots = startup_roots(context, paths, "RIFFLUX_FILE_WATCHER_PATHS")
        if watch_roots:
            watcher = start_watcher(context, watch_roots)
        refusal = context.no_default_root()
        if refusal is not None:
            # Once, after the startup paths passed (a refused one already said as much).
            log.warning("mcp.no_allowed_roots", reason=refusal)
        log.info("mcp.server_starting", transport=transport, db_path=str(context.settings.db_path))
        port = port or settings.http_port
        if transport == "stdio":
            _serve_stdio(server, in_main_thread)
        elif settings.http_workers > 1:
            _serve_http_workers(context, host, port, settings.http_workers)
        else:
            on_ready = functools.partial(_announce, host, port)
            anyio.run(functools.partial(serve_http, on_ready=on_ready), server, context, host, port)
    finally:
        if watcher is not None:
            watcher.stop()
        context.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
