"""The ``grep_rifflux`` tool: exact and regex search over the indexed files' text
(rifflux.search.grep), as a plain function (``tool_list.py`` declares it to clients).

A file the call may not return (:meth:`ToolContext.served`, the one check of every
tool: outside the call's roots by realpath now, or on the deny list) is left out of the
matches. The search runs under the server's search deadline; an answer given no
``max_tokens`` keeps to ``RIFFLUX_MAX_RESPONSE_TOKENS``, its matches cut and ``truncated``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rifflux.mcp.tools import ToolContext
from rifflux.search import retrieval
from rifflux.search.budget import within_limit
from rifflux.search.grep import (
    GrepRequest,
    fit_matches,
    grep,
)


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
