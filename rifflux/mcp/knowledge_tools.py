"""The knowledge tools (issue 23): ``search_decisions``, ``search_errors``, ``context_stats``
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
from rifflux.mcp.arguments import READ_ONLY, MaxTokens
from rifflux.mcp.tools import ToolContext, check_served
from rifflux.search import knowledge
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


def search_decisions(
    ctx: ToolContext,
    query: object,
    limit: object = 10,
    decision_type: object = None,
    status: object = None,
    max_tokens: object = None,
    client_roots: Sequence[Path] | None = None,
) -> dict[str, Any]:
    return knowledge.search_decisions(
        ctx.search,
        query,
        limit=limit,
        decision_type=decision_type,
        status=status,
        max_tokens=max_tokens,
        served=ctx.served(client_roots, searching=True),
    )


def search_errors(
    ctx: ToolContext,
    query: object,
    limit: object = 10,
    max_tokens: object = None,
    client_roots: Sequence[Path] | None = None,
) -> dict[str, Any]:
    return knowledge.search_errors(
        ctx.search,
        query,
        limit=limit,
        max_tokens=max_tokens,
        served=ctx.served(client_roots, searching=True),
    )


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
        return read_files(reader, returned, budget)


_LIMIT = Annotated[
    Any,
    BeforeValidator(as_integer),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": MAX_TOP_K}),
    Field(description="How many results to return."),
]
_MAX_TOKENS = Annotated[
    MaxTokens,
    Field(
        description="Token budget for the results' texts together, as search_rifflux's: "
        "results keep their order, later texts are cut around the query's terms or dropped; "
        "each result then has tokens and truncated, the response a budget."
    ),
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
        limit: _LIMIT = 10,
        decision_type: Annotated[
            str | None,
            Field(description="Only decisions of this type (front matter decision_type)."),
        ] = None,
        status: Annotated[
            str | None,
            Field(
                description="Only decisions with this status: proposed, accepted, "
                "rejected, deprecated or superseded."
            ),
        ] = None,
        max_tokens: _MAX_TOKENS = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Search the decision records (ADRs): architectural and technical decisions with
        their rationale, ranked by hybrid search over the records only.

        Returns {query, count, embedding_model, results}; each result has title, path,
        status, date, decision_type, decision (the Decision section), score_breakdown
        and chunk_id.
        """
        client = await roots(context) if context is not None else None
        return await run(
            search_decisions, ctx, query, limit, decision_type, status, max_tokens, client
        )

    @server.tool(name="search_errors", annotations=READ_ONLY)
    async def search_errors_tool(
        query: _QUERY,
        limit: _LIMIT = 10,
        max_tokens: _MAX_TOKENS = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Search the error-solution pairs of troubleshooting pages: paste an error line,
        get the sections that name it and their fix.

        Returns {query, count, embedding_model, results}; each result has signature,
        solution, path, heading_path, score_breakdown and chunk_id.
        """
        client = await roots(context) if context is not None else None
        return await run(search_errors, ctx, query, limit, max_tokens, client)

    @server.tool(name="context_stats", annotations=READ_ONLY)
    async def context_stats_tool() -> dict[str, Any]:
        """Index statistics: {files, chunks, embeddings, embedding_coverage,
        embedding_model, generation, db_path, knowledge: {decisions: {total, by_status},
        error_pairs, error_files, notes, tags: [{tag, files}], tags_total,
        chunks_by_kind}}."""
        return await run(context_stats, ctx)

    @server.tool(name="multi_get", annotations=READ_ONLY)
    async def multi_get_tool(
        paths: Annotated[
            Any,
            WithJsonSchema(
                {"type": "array", "items": {"type": "string"}, "maxItems": MAX_LIST_ITEMS}
            ),
            Field(
                description="Indexed file paths exactly as search results show them, or "
                "globs such as docs/adr/*.md; files come back in this order, a glob's "
                "matches sorted."
            ),
        ],
        max_tokens: Annotated[
            MaxTokens,
            Field(
                description="One token budget for all files: whole files while they fit, "
                "the next cut to its beginning, the rest listed in not_included."
            ),
        ] = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Several indexed files at once: {files: [{path, content, tokens, truncated}],
        not_included, count}. Only files inside the server's allowed roots and off its deny
        list are served; the files themselves are not read (content is the indexed text)."""
        client = await roots(context) if context is not None else None
        return await run(multi_get, ctx, paths, max_tokens, client)
