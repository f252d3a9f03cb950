"""The ``grep_rifflux`` tool: exact and regex search over the indexed files' text
(rifflux.search.grep), as a plain function and its registration.

A file the call may not return (:meth:`ToolContext.served`, the one check of every
tool: outside the call's roots by realpath now, or on the deny list) is left out of the
matches. The search runs under the server's search deadline; an answer given no
``max_tokens`` keeps to ``RIFFLUX_MAX_RESPONSE_TOKENS``, its matches cut and ``truncated``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from pydantic import BeforeValidator, Field, WithJsonSchema

from rifflux.mcp.arguments import READ_ONLY, MaxTokens
from rifflux.mcp.tools import ToolContext
from rifflux.search import retrieval
from rifflux.search.budget import within_limit
from rifflux.search.grep import (
    DEFAULT_MAX_MATCHES,
    MAX_CONTEXT_LINES,
    MAX_MAX_MATCHES,
    GrepRequest,
    fit_matches,
    grep,
)
from rifflux.search.request import MAX_LIST_ITEMS, as_integer

RunInThread = Callable[..., Awaitable[Any]]
ClientRoots = Callable[[Context[Any, Any]], Awaitable[list[Path] | None]]


def grep_rifflux(
    ctx: ToolContext,
    pattern: object,
    client_roots: Sequence[Path] | None = None,
    **options: object,
) -> dict[str, Any]:
    """``{pattern, regex, count, truncated, scanned, matches}`` (rifflux.search.grep);
    ``pattern`` and ``options`` are :meth:`GrepRequest.from_arguments`'s, checked there."""
    request = GrepRequest.from_arguments(pattern, **options)
    served = ctx.served(client_roots)
    conn = ctx.search.connection()
    deadline = ctx.search.deadline()
    with deadline.guarding(conn):
        response = grep(conn, request, deadline, served.admitting(retrieval.placer(conn)))
    if request.max_tokens is not None:
        return response  # fitted to it by grep
    return within_limit(response, ctx.settings.max_response_tokens, fit_matches)


_INTEGER = {"type": "integer"}


def register(server: MCPServer, ctx: ToolContext, run: RunInThread, roots: ClientRoots) -> None:
    """Add ``grep_rifflux`` to ``server`` (``run`` and ``roots`` as knowledge_tools')."""

    @server.tool(name="grep_rifflux", annotations=READ_ONLY)
    async def grep_rifflux_tool(
        pattern: Annotated[
            str,
            Field(description="Text to find; with regex, an RE2 regex: retry_(count|limit)\\s*=."),
        ],
        regex: Annotated[bool, Field(description="Read pattern as a regex.")] = False,
        case_sensitive: Annotated[bool, Field(description="Match case exactly.")] = False,
        path_glob: Annotated[
            Any,
            WithJsonSchema(
                {
                    "type": ["string", "array"],
                    "items": {"type": "string"},
                    "maxItems": MAX_LIST_ITEMS,
                }
            ),
            Field(description="Only files whose path matches this glob (or any of these)."),
        ] = None,
        context_lines: Annotated[
            Any,
            BeforeValidator(as_integer),
            WithJsonSchema({**_INTEGER, "minimum": 0, "maximum": MAX_CONTEXT_LINES}),
            Field(description="Lines of context around each match."),
        ] = 0,
        max_matches: Annotated[
            Any,
            BeforeValidator(as_integer),
            WithJsonSchema({**_INTEGER, "minimum": 1, "maximum": MAX_MAX_MATCHES}),
            Field(description="Most matching lines returned."),
        ] = DEFAULT_MAX_MATCHES,
        max_tokens: Annotated[
            MaxTokens,
            Field(description="Token budget of the whole answer (default: the server's limit)."),
        ] = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Find every line holding an exact string or a regex, as grep does, from the
        index. Use it for identifiers, error strings, config keys and partial words
        (CONNECTION_REF, foo_bar(, v2.3.0); search_rifflux for questions and topics.

        Matches in path and line order: line and column (1-based, in the file), text,
        before/after, chunk_id, heading_path. truncated: more lines match; scanned: no
        3-character literal, so every file was read.
        """
        client = await roots(context) if context is not None else None
        return await run(
            grep_rifflux,
            ctx,
            pattern,
            client,
            regex=regex,
            case_sensitive=case_sensitive,
            path_glob=path_glob,
            context_lines=context_lines,
            max_matches=max_matches,
            max_tokens=max_tokens,
        )
