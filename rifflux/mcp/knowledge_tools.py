"""The knowledge tools: ``search_decisions``, ``search_errors``, ``context_stats``
(CODITECT's names) and ``multi_get`` (qmd's), as plain functions (``tool_list.py``
declares them to clients).

Like ``tools.py``, each function takes the :class:`~rifflux.mcp.tools.ToolContext`, calls
the core (rifflux.search.knowledge, rifflux.search.multi_get, rifflux.status) and returns
the JSON object the tool answers with; bad input raises a one-line
:class:`~rifflux.errors.RiffluxError`.

Every file these tools return passes ``get_file``'s check
(:meth:`~rifflux.mcp.tools.ToolContext.served`: inside the call's roots by realpath at
read time, not on the deny list): a ``multi_get`` path named outright that fails it fails
the call with ``get_file``'s message; a glob's match, a decision or an error pair that
fails it is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rifflux import status
from rifflux.errors import RiffluxError
from rifflux.mcp.tools import ToolContext, check_served, search_within_limit
from rifflux.search import knowledge
from rifflux.search.budget import within_limit
from rifflux.search.multi_get import check_paths, expand, read_files
from rifflux.search.request import (
    check_max_tokens,
)
from rifflux.store.connection import transaction
from rifflux.store.reader import IndexReader

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
