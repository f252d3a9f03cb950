"""One status of an index, the object MCP ``index_status`` and ``rifflux status`` render.

Shape (documented once, in docs/mcp.md, "index_status"):

``{files, chunks, embeddings, embedding_coverage, roots: [{root, files, chunks,
embeddings, embedding_coverage}], generation, db_path, embedding_model,
embedding_backend, vector_cache: {state, generation, segments, rows, tombstones, ...},
broker, live_workers: {count, workers: [...]}, queue_depths, recent_jobs: [{...,
phase, phases}], watcher, knowledge}``

``knowledge`` (issue 23) is the knowledge bases' sizes (rifflux.store.knowledge.summary:
decisions by status, error pairs, notes, tags with counts, chunks by kind); MCP
``context_stats`` (CODITECT's name) answers the index's counts, coverage and the same
block, without the queue (:func:`context_stats`).

``embedding_coverage`` is embedded chunks ÷ chunks (1.0 for an index without chunks:
nothing waits for a vector); it stays below 1.0 while a job's vector phase runs.

Invariants:

* Both front ends call :func:`index_status` and print what it returns: the MCP tool as
  JSON, ``rifflux status --json`` as the same JSON, ``rifflux status`` as text lines
  (``rifflux.cli``). Neither adds, drops or renames a key.
* Reading status writes nothing: the index is read through the SearchService's
  read-only connection, the queue's status never creates the broker's file.

Layer: above the queue and the watcher (it reports both: the queue's workers, depths
and jobs, the watcher's persisted state) and below ``mcp`` and ``cli``, its two callers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rifflux.search.service import SearchService
from rifflux.store import knowledge
from rifflux.store.connection import transaction
from rifflux.store.reader import IndexReader
from rifflux.watch.watcher import read_watcher_state

MAX_TAGS = 50
"""How many tags (the most used) the ``knowledge`` block lists; ``tags_total`` counts all."""


def coverage(embedded: int, chunks: int) -> float:
    """Embedded chunks ÷ chunks, rounded to 4 places (1.0 when there are no chunks); below
    1.0 whenever a chunk lacks its vector, however few."""
    if not chunks:
        return 1.0
    return round(embedded / chunks, 4) if embedded >= chunks else min(embedded / chunks, 0.9999)


def index_status(
    search: SearchService, queue_status: Callable[[], Mapping[str, Any]]
) -> dict[str, Any]:
    """The index's counts and vector cache, the queue's status (``IndexQueue.status``:
    broker, live workers, depths, recent jobs) and the file watcher's last state.

    The index is read first: a missing or foreign index is reported as such before
    ``queue_status`` is called (it opens the index for the job records).
    """
    counts = search.counts()
    conn = search.connection()
    roots = IndexReader(conn).counts_by_root()
    for root in roots:
        root["embedding_coverage"] = coverage(root["embeddings"], root["chunks"])
    watcher = read_watcher_state(conn)
    queue = queue_status()
    workers = list(queue["live_workers"])
    return {
        **counts,
        "embedding_coverage": coverage(counts["embeddings"], counts["chunks"]),
        "roots": roots,
        "broker": queue["broker"],
        "live_workers": {"count": len(workers), "workers": workers},
        "queue_depths": queue["queue_depths"],
        "recent_jobs": queue["recent_jobs"],
        "watcher": watcher,
        "knowledge": knowledge.summary(conn, max_tags=MAX_TAGS),
    }


def context_stats(search: SearchService) -> dict[str, Any]:
    """``{files, chunks, embeddings, embedding_coverage, embedding_model, generation,
    db_path, knowledge}``: the index's counts, its embedding coverage and the size of each
    knowledge base, read in one snapshot."""
    conn = search.connection()
    reader = IndexReader(conn)
    with transaction(conn, write=False):
        counts = reader.row_counts()
        generation = reader.generation()
        model = search.stored_model(conn)
        summary = knowledge.summary(conn, max_tags=MAX_TAGS)
    return {
        **counts,
        "embedding_coverage": coverage(counts["embeddings"], counts["chunks"]),
        "embedding_model": model,
        "generation": generation,
        "db_path": str(search.db_path),
        "knowledge": summary,
    }
