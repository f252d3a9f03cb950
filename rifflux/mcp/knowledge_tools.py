"""The knowledge tools: ``search_decisions``, ``search_errors``, ``context_stats``
(CODITECT's names) and ``multi_get`` (qmd's), as plain functions and their registration.

Like ``tools.py``, each function takes the :class:`~rifflux.mcp.tools.ToolContext`, calls
the core (rifflux.search.knowledge, rifflux.search.multi_get, rifflux.status) and returns
the JSON object the tool answers with; bad input raises a one-line
:class:`~rifflux.errors.RiffluxError`. :func:`register` adds them to the server with the
server's own way of running a blocking call and of asking the client for its roots, so
this module needs nothing from ``server.py``.

Every file these tools return passes ``get_file``'s check
(:meth:`~rifflux.mcp.tools.ToolContext.served`: inside the call's roots by realpath at
read time, not on the deny list): a ``multi_get`` path named outright that fails it fails
the call with ``get_file``'s message; a glob's match, a decision or an error pair that
fails it is left out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from pydantic import BeforeValidator, Field, WithJsonSchema

from rifflux import status
from rifflux.errors import RiffluxError
from rifflux.mcp.arguments import READ_ONLY, MaxTokens
from rifflux.mcp.tools import ToolContext, check_served, search_within_limit
from rifflux.search import knowledge
from rifflux.search.budget import within_limit
from rifflux.search.multi_get import check_paths, expand, read_files
from rifflux.search.request import (
    MAX_LIST_ITEMS,
    MAX_QUERY_CHARS,
    MAX_TOP_K,
    as_integer,
    check_max_tokens,
)
from rifflux.store.connection import transaction
from rifflux.store.reader import IndexReader

RunInThread = Callable[..., Awaitable[Any]]
ClientRoots = Callable[[Context[Any, Any]], Awaitable[list[Path] | None]]


DEFAULT_LIMIT = 10
"""How many results the knowledge searches return when neither ``limit`` nor ``top_k`` is given."""


def result_count(limit: object, top_k: object) -> object:
    """``limit`` or ``top_k`` (one argument under two names: the contract's and
    ``search_rifflux``'s), 10 when neither is given; both given and different is a
    one-line error."""
    if top_k is None:
        return DEFAULT_LIMIT if limit is None else limit
    if limit is not None and limit != top_k:
        raise RiffluxError(
            f"limit and top_k name the same argument; give one of them (got limit "
            f"{limit!r} and top_k {top_k!r})"
        )
    return top_k


def search_decisions(
    ctx: ToolContext,
    query: object,
    limit: object = None,
    decision_type: object = None,
    status: object = None,
    max_tokens: object = None,
    top_k: object = None,
    client_roots: Sequence[Path] | None = None,
) -> dict[str, Any]:
    response = knowledge.search_decisions(
        ctx.search,
        query,
        limit=result_count(limit, top_k),
        decision_type=decision_type,
        status=status,
        max_tokens=max_tokens,
        served=ctx.served(client_roots, searching=True),
    )
    return response if max_tokens is not None else search_within_limit(ctx, response, "decision")


def search_errors(
    ctx: ToolContext,
    query: object,
    limit: object = None,
    max_tokens: object = None,
    top_k: object = None,
    client_roots: Sequence[Path] | None = None,
) -> dict[str, Any]:
    count = result_count(limit, top_k)
    response = knowledge.search_errors(
        ctx.search,
        query,
        limit=count,
        max_tokens=max_tokens,
        served=ctx.served(client_roots, searching=True),
    )
    return response if max_tokens is not None else search_within_limit(ctx, response, "solution")


def context_stats(ctx: ToolContext) -> dict[str, Any]:
    return status.context_stats(ctx.search)


def multi_get(
    ctx: ToolContext,
    paths: object,
    max_tokens: object = None,
    client_roots: Sequence[Path] | None = None,
) -> dict[str, Any]:
    """Indexed files by path or glob, in order, under one budget (rifflux.search.multi_get)."""
    entries = check_paths(paths)
    budget = check_max_tokens(max_tokens)
    served = ctx.served(client_roots)
    conn = ctx.search.connection()
    reader = IndexReader(conn)
    with transaction(conn, write=False):
        returned = []
        for wanted in expand(reader, entries):
            if not wanted.by_glob:
                check_served(ctx, wanted.path, served)
            elif served.refusal(wanted.path, ctx.search.absolute_path(wanted.path)) is not None:
                continue
            returned.append(wanted.path)
        answer = read_files(reader, returned, budget)
        if budget is not None:
            return answer
        return within_limit(
            answer,
            ctx.settings.max_response_tokens,
            lambda _whole, limit: read_files(reader, returned, limit),
        )


_COUNT_SCHEMA = WithJsonSchema({"type": ["integer", "null"], "minimum": 1, "maximum": MAX_TOP_K})
_LIMIT = Annotated[
    Any,
    BeforeValidator(as_integer),
    _COUNT_SCHEMA,
    Field(description="How many results (default 10)."),
]
_TOP_K = Annotated[
    Any,
    BeforeValidator(as_integer),
    _COUNT_SCHEMA,
    Field(description="Same as limit."),
]
_MAX_TOKENS = Annotated[
    MaxTokens,
    Field(description="Token budget of the whole answer (default: the server's limit)."),
]
_QUERY = Annotated[
    str,
    WithJsonSchema({"type": "string", "maxLength": MAX_QUERY_CHARS}),
    Field(
        description="What to look for: words, a question, an error line "
        f"(at most {MAX_QUERY_CHARS} characters)."
    ),
]


def register(server: MCPServer, ctx: ToolContext, run: RunInThread, roots: ClientRoots) -> None:
    """Add the four tools to ``server``: ``run`` runs a blocking call in a worker thread,
    ``roots`` asks the client for its roots (``server.py``'s ``_in_thread`` and
    ``client_roots``)."""

    @server.tool(name="search_decisions", annotations=READ_ONLY)
    async def search_decisions_tool(
        query: _QUERY,
        limit: _LIMIT = None,
        decision_type: Annotated[
            str | None,
            Field(description="Only decisions of this decision_type."),
        ] = None,
        status: Annotated[
            str | None,
            Field(description="Only decisions with this status (accepted, proposed...)."),
        ] = None,
        max_tokens: _MAX_TOKENS = None,
        top_k: _TOP_K = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Search only the decision records (ADRs): for why something was chosen or what
        was decided, with each decision's status and text."""
        client = await roots(context) if context is not None else None
        return await run(
            search_decisions, ctx, query, limit, decision_type, status, max_tokens, top_k, client
        )

    @server.tool(name="search_errors", annotations=READ_ONLY)
    async def search_errors_tool(
        query: _QUERY,
        limit: _LIMIT = None,
        max_tokens: _MAX_TOKENS = None,
        top_k: _TOP_K = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Search only the error-fix pairs of troubleshooting pages: give an error
        message or code to find its known fix."""
        client = await roots(context) if context is not None else None
        return await run(search_errors, ctx, query, limit, max_tokens, top_k, client)

    @server.tool(name="context_stats", annotations=READ_ONLY)
    async def context_stats_tool() -> dict[str, Any]:
        """What the index holds (decision records by status, error pairs, tags,
        embedding coverage): use it to choose between the searches."""
        return await run(context_stats, ctx)

    @server.tool(name="multi_get", annotations=READ_ONLY)
    async def multi_get_tool(
        paths: Annotated[
            Any,
            WithJsonSchema(
                {"type": "array", "items": {"type": "string"}, "maxItems": MAX_LIST_ITEMS}
            ),
            Field(
                description="Indexed file paths as search results show them, or globs "
                "such as docs/adr/*.md; answered in this order."
            ),
        ],
        max_tokens: Annotated[
            MaxTokens,
            Field(
                description="Token budget of the whole answer (default: the server's "
                "limit); files in order, the rest in not_included."
            ),
        ] = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Read several indexed files at once, by path or glob (docs/adr/*.md), instead
        of repeated get_file calls: {files, not_included, count}."""
        client = await roots(context) if context is not None else None
        return await run(multi_get, ctx, paths, max_tokens, client)
