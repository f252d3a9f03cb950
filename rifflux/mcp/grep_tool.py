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
from rifflux.search.budget import response_tokens, within_limit
from rifflux.search.grep import (
    DEFAULT_MAX_MATCHES,
    MAX_CONTEXT_LINES,
    MAX_MAX_MATCHES,
    GrepRequest,
    grep,
)
from rifflux.search.request import MAX_LIST_ITEMS, as_integer

RunInThread = Callable[..., Awaitable[Any]]
ClientRoots = Callable[[Context[Any, Any]], Awaitable[list[Path] | None]]


def grep_rifflux(
    ctx: ToolContext,
    pattern: object,
    regex: object = False,
    case_sensitive: object = False,
    path_glob: object = None,
    context_lines: object = 0,
    max_matches: object = DEFAULT_MAX_MATCHES,
    max_tokens: object = None,
    client_roots: Sequence[Path] | None = None,
) -> dict[str, Any]:
    """``{pattern, regex, count, truncated, scanned, matches}`` (rifflux.search.grep)."""
    request = GrepRequest.from_arguments(
        pattern,
        regex=regex,
        case_sensitive=case_sensitive,
        path_glob=path_glob,
        context_lines=context_lines,
        max_matches=max_matches,
        max_tokens=max_tokens,
    )
    served = ctx.served(client_roots)
    conn = ctx.search.connection()
    deadline = ctx.search.deadline()
    with deadline.guarding(conn):
        response = grep(conn, request, deadline, served.admitting(retrieval.placer(conn)))
    if request.max_tokens is not None:
        return response
    return within_limit(response, ctx.settings.max_response_tokens, fit_matches)


def fit_matches(response: dict[str, Any], limit: int) -> dict[str, Any]:
    """``response`` with the longest prefix of its matches whose whole answer is at most
    ``limit`` estimated tokens, marked ``truncated``: the server's default budget."""

    def first(count: int) -> dict[str, Any]:
        return {**response, "count": count, "truncated": True, "matches": matches[:count]}

    matches = response["matches"]
    low, high = 0, len(matches)
    while low < high:
        middle = (low + high + 1) // 2
        if response_tokens(first(middle)) <= limit:
            low = middle
        else:
            high = middle - 1
    return first(low)


_INTEGER = {"type": "integer"}


def register(server: MCPServer, ctx: ToolContext, run: RunInThread, roots: ClientRoots) -> None:
    """Add ``grep_rifflux`` to ``server`` (``run`` and ``roots`` as knowledge_tools')."""

    @server.tool(name="grep_rifflux", annotations=READ_ONLY)
    async def grep_rifflux_tool(
        pattern: Annotated[
            str,
            Field(
                description="The exact text to find (or, with regex=true, an RE2 / ripgrep "
                "regex such as retry_(count|limit)\\s*=)."
            ),
        ],
        regex: Annotated[
            bool, Field(description="Read pattern as a regex; default: a literal string.")
        ] = False,
        case_sensitive: Annotated[
            bool, Field(description="Match case exactly; default: ignore case.")
        ] = False,
        path_glob: Annotated[
            Any,
            WithJsonSchema(
                {
                    "anyOf": [
                        {"type": "string"},
                        {"type": "array", "items": {"type": "string"}, "maxItems": MAX_LIST_ITEMS},
                        {"type": "null"},
                    ]
                }
            ),
            Field(
                description="Only files whose indexed path matches this POSIX glob (or any "
                "of these), as search_rifflux's path_glob: docs/**/*.md."
            ),
        ] = None,
        context_lines: Annotated[
            Any,
            BeforeValidator(as_integer),
            WithJsonSchema({**_INTEGER, "minimum": 0, "maximum": MAX_CONTEXT_LINES}),
            Field(description="Lines of context before and after each matching line."),
        ] = 0,
        max_matches: Annotated[
            Any,
            BeforeValidator(as_integer),
            WithJsonSchema({**_INTEGER, "minimum": 1, "maximum": MAX_MAX_MATCHES}),
            Field(description="The most matching lines to return."),
        ] = DEFAULT_MAX_MATCHES,
        max_tokens: Annotated[
            MaxTokens,
            Field(
                description="Token budget for the matches together (paths, lines and "
                "context): matches in order while they fit, then truncated."
            ),
        ] = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Find every line of the indexed files holding an exact string or a regex, like
        grep/ripgrep, answered from the index (a trigram index picks the files). Use it
        for identifiers, error strings, config keys, paths, symbols and partial words
        (CONNECTION_REF, foo_bar(, ->, v2.3.0) that search_rifflux's word search splits
        or ranks away; use search_rifflux for questions and topics.

        Returns {pattern, regex, count, truncated, scanned, matches} in path order, then
        line order; each match has path, line and column (1-based, in the file as
        indexed, front matter included), text (the line), before and after (context
        lines), chunk_id and heading_path (for get_chunk). truncated: more matching
        lines exist than were returned; scanned: the pattern had no literal of 3+
        characters, so every file's text was searched.
        """
        client = await roots(context) if context is not None else None
        return await run(
            grep_rifflux,
            ctx,
            pattern,
            regex,
            case_sensitive,
            path_glob,
            context_lines,
            max_matches,
            max_tokens,
            client,
        )
