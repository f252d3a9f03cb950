"""The knowledge tools' searches: decisions and error-solution pairs, ranked by hybrid search.

CODITECT answers ``search_decisions`` and ``search_errors`` from knowledge
bases in a database; here the knowledge is the markdown itself, detected at index time
(rifflux.index.kinds, stored by rifflux.store.knowledge), and the ranking is the one
search of ``search_rifflux``:

* ``search_decisions`` ranks the chunks of decision records only (filtered by ``status``
  and ``decision_type`` before ranking, as every filter), one result per record (its best
  chunk, ``group_by="file"``), and answers each with the record's fields: ``{title, path,
  status, date, decision_type, decision, score_breakdown, chunk_id}``.
* ``search_errors`` ranks the chunks of error sections only, and answers each chunk with
  the error pair it lies in (``{signature, solution, path, heading_path,
  score_breakdown, chunk_id}``); a chunk holding several pairs (short sections share a
  chunk) answers with the pair that shares the most query terms; each pair is listed once,
  at its best chunk's rank.
* Both rank hybrid (the settings' fusion), take ``limit`` results (1 to
  ``MAX_TOP_K``), and with ``max_tokens`` fit the whole response to that budget as
  ``search_rifflux`` does (``budget.budget_response``: rank order kept, later ``decision``
  / ``solution`` texts cut around the query's terms, those that cannot fit dropped), each
  result then with ``tokens`` and ``truncated`` and the response with ``budget``.
* Responses: ``{query, count, embedding_model, results}`` (+ ``warning`` when lexical
  results stand in for a corrupt vector cache, or with ``embedding_coverage`` while some
  chunks have no vector; + ``budget``).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np

from rifflux.errors import InvalidQueryError
from rifflux.search import ranking, retrieval
from rifflux.search.budget import budget_response
from rifflux.search.query import query_terms
from rifflux.search.request import (
    MAX_TOP_K,
    SearchRequest,
    check_max_tokens,
    check_status,
    check_top_k,
)
from rifflux.search.served import ServedPaths
from rifflux.search.service import SearchService, damage_reported, partial_vectors_warning
from rifflux.store import knowledge

ERROR_DEPTH = 3
"""``search_errors`` ranks ``limit × ERROR_DEPTH`` chunks (at most ``MAX_TOP_K``): several
chunks may lie in one pair."""


def check_limit(value: object) -> int:
    """``limit``: an int from 1 to ``MAX_TOP_K`` (the messages name ``limit``)."""
    try:
        return check_top_k(value)
    except InvalidQueryError as exc:
        raise InvalidQueryError(str(exc).replace("top_k", "limit", 1)) from exc


def check_decision_type(value: object) -> str | None:
    try:
        return check_status(value)
    except InvalidQueryError as exc:
        raise InvalidQueryError(
            str(exc).replace("status", "decision_type", 1).replace("accepted", "architectural")
        ) from exc


def _search_within(
    service: SearchService,
    request: SearchRequest,
    restrict: np.ndarray | None,
    served: ServedPaths | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """(results, warning) of ``request`` among the chunk rowids ``restrict`` (sorted;
    None: every chunk) only, as if a filter admitted them: how a knowledge tool ranks
    one kind. ``served``: only files it serves (None: every file)."""
    with damage_reported(service.db_path):
        deadline = service.deadline()
        snapshot = service.snapshot()
        admits = None if served is None else served.admitting(retrieval.placer(snapshot.conn))
        with deadline.guarding(snapshot.conn):
            return ranking.rank(snapshot, request, request.top_k, deadline, restrict, admits)


def _restricted(service: SearchService, **conditions: Any) -> np.ndarray | None:
    """Sorted rowids of the chunks ``conditions`` admit (None: every chunk)."""
    return knowledge.chunk_rowids(service.connection(), **conditions)


def _response(
    service: SearchService,
    query: str,
    results: list[dict[str, Any]],
    warning: str | None,
    text_key: str,
    max_tokens: int | None,
) -> dict[str, Any]:
    response: dict[str, Any] = {
        "query": query,
        "count": len(results),
        "embedding_model": service.stored_model() or service.embedder_label,
    }
    if warning is not None:
        response["warning"] = warning
    elif query.strip():
        with damage_reported(service.db_path):
            share = service.coverage.share(service.connection())
        if share < 1.0:
            response["embedding_coverage"] = share
            response["warning"] = partial_vectors_warning(share, "hybrid")
    response["results"] = results
    if max_tokens is not None:
        response = budget_response(response, query, max_tokens, text_key=text_key)
    return response


def search_decisions(
    service: SearchService,
    query: object,
    *,
    limit: object = 10,
    decision_type: object = None,
    status: object = None,
    max_tokens: object = None,
    served: ServedPaths | None = None,
) -> dict[str, Any]:
    """Decision records ranked for ``query`` (see the module docstring); ``served``: only
    the files it serves (an MCP call's)."""
    budget = check_max_tokens(max_tokens)
    request = SearchRequest(
        query=query,  # type: ignore[arg-type]  # checked by SearchRequest
        top_k=check_limit(limit),
        group_by="file",
        status=status,  # type: ignore[arg-type]
    )
    restrict = _restricted(
        service,
        kinds=("decision",),
        status=request.status,
        decision_type=check_decision_type(decision_type),
    )
    hits, warning = _search_within(service, request, restrict, served)
    rows = knowledge.decisions_of_files(service.connection(), [h["path"] for h in hits])
    results = [
        {
            "title": row["title"],
            "path": hit["path"],
            "status": row["status"],
            "date": row["date"],
            "decision_type": row["decision_type"] or None,
            "decision": row["decision"],
            "score_breakdown": hit["score_breakdown"],
            "chunk_id": hit["chunk_id"],
        }
        for hit in hits
        if (row := rows.get(hit["path"])) is not None
    ]
    return _response(service, request.query, results, warning, "decision", budget)


def search_errors(
    service: SearchService,
    query: object,
    *,
    limit: object = 10,
    max_tokens: object = None,
    served: ServedPaths | None = None,
) -> dict[str, Any]:
    """Error-solution pairs ranked for ``query`` (see the module docstring); ``served``:
    only the files it serves (an MCP call's)."""
    budget = check_max_tokens(max_tokens)
    wanted = check_limit(limit)
    request = SearchRequest(
        query=query,  # type: ignore[arg-type]  # checked by SearchRequest
        top_k=min(MAX_TOP_K, wanted * ERROR_DEPTH),
    )
    restrict = _restricted(service, kinds=("error",))
    hits, warning = _search_within(service, request, restrict, served)
    conn = service.connection()
    terms = query_terms(request.query)
    pairs_of: dict[str, list[sqlite3.Row]] = {}
    seen: set[tuple[str, int]] = set()
    results: list[dict[str, Any]] = []
    for hit in hits:
        path = hit["path"]
        if path not in pairs_of:
            pairs_of[path] = knowledge.error_pairs_of_file(conn, path)
        pair = best_pair(pairs_of[path], hit["chunk_index"], terms)
        if pair is None or (path, pair[0]) in seen:
            continue
        seen.add((path, pair[0]))
        row = pair[1]
        results.append(
            {
                "signature": row["signature"],
                "solution": row["solution"],
                "path": path,
                "heading_path": row["heading_path"],
                "score_breakdown": hit["score_breakdown"],
                "chunk_id": hit["chunk_id"],
            }
        )
        if len(results) == wanted:
            break
    return _response(service, request.query, results, warning, "solution", budget)


def best_pair(
    pairs: list[sqlite3.Row], chunk_index: int, terms: list[str]
) -> tuple[int, sqlite3.Row] | None:
    """(position, row) of the pair around ``chunk_index`` that shares the most query
    ``terms`` (signature words count twice), the first on a tie; None if none is."""
    best: tuple[int, int, sqlite3.Row] | None = None
    for position, row in enumerate(pairs):
        if not row["first_chunk"] <= chunk_index <= row["last_chunk"]:
            continue
        signature, solution = row["signature"].lower(), row["solution"].lower()
        score = sum(2 * (term in signature) + (term in solution) for term in terms)
        if best is None or score > best[0]:
            best = (score, position, row)
    return None if best is None else (best[1], best[2])
