"""One status of an index, the object MCP ``index_status`` and ``rifflux status`` render.

Shape (documented once, in docs/mcp.md, "index_status"):

``{files, chunks, embeddings, embedding_coverage, roots: [{root, files, chunks,
embeddings, embedding_coverage}], generation, db_path, embedding_model,
embedding_backend, vector_cache: {state, generation, segments, rows, tombstones, ...},
broker, live_workers: {count, workers: [...]}, queue_depths, recent_jobs: [{...,
phase, phases}], watcher, knowledge}``

``knowledge`` is the knowledge bases' sizes (rifflux.store.knowledge.summary:
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
* :func:`index_counts` (the index's rows, generation, embedding model and vector cache
  state) and :func:`check_index` (``rifflux check``: ``PRAGMA quick_check`` and a full
  verification of the vector cache) read the index alone; the rest of status builds on
  them.

Layer: above the queue and the watcher (it reports both: the queue's workers, depths
and jobs, the watcher's persisted state) and below ``mcp`` and ``cli``, its two callers.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from rifflux.errors import RiffluxError
from rifflux.search.ranking import REPAIR_HINT
from rifflux.search.service import SearchService, coverage, damage_reported
from rifflux.search.snapshot import IndexSnapshot
from rifflux.store import knowledge
from rifflux.store.connection import transaction
from rifflux.store.integrity import quick_check
from rifflux.store.reader import IndexReader, current_generation
from rifflux.vectors.segments import forget_verified
from rifflux.watch.watcher import read_watcher_state

MAX_TAGS = 50
"""How many tags (the most used) the ``knowledge`` block lists; ``tags_total`` counts all."""


def index_counts(search: SearchService) -> dict[str, Any]:
    """``{files, chunks, embeddings, generation, db_path, embedding_model,
    embedding_backend, vector_cache}``: the index's own part of :func:`index_status`."""
    with damage_reported(search.db_path):
        return _counts(search.snapshot())


def _counts(snapshot: IndexSnapshot) -> dict[str, Any]:
    conn = snapshot.conn
    return {
        **IndexReader(conn).row_counts(),
        "generation": current_generation(conn),
        "db_path": str(snapshot.settings.db_path),
        "embedding_model": snapshot.stored_model(),
        "embedding_backend": snapshot.settings.embedding_backend,
        "vector_cache": snapshot.vectors.status(conn, snapshot.db_path),
    }


def check_index(search: SearchService) -> dict[str, Any]:
    """``PRAGMA quick_check`` of the database and a full verification of the cache.

    ``{"ok", "database": {"ok", "problems"}, "vector_cache": {"ok", "state",
    "problems"}}``; every problem is one line. The cache is re-hashed even if this
    process verified it before.
    """
    db_path = search.db_path
    db_problems = quick_check(db_path)
    cache: dict[str, Any] = {"ok": True, "state": None, "problems": []}
    forget_verified()
    search.vectors.forget()
    if not db_path.is_file():
        cache["ok"] = False  # Not checked; the database problem says why.
    else:
        try:
            status = search.vectors.status(search.connection(), db_path, thorough=True)
        except (sqlite3.DatabaseError, RiffluxError) as exc:
            cache.update(ok=False, problems=[f"cannot be checked: {exc}"])
        else:
            cache["state"] = status["state"]
            if status["state"] == "corrupt":
                cache.update(ok=False, problems=[f"{status['reason']}; {REPAIR_HINT}"])
    return {
        "ok": not db_problems and cache["ok"],
        "database": {"ok": not db_problems, "problems": db_problems},
        "vector_cache": cache,
    }


def index_status(
    search: SearchService, queue_status: Callable[[], Mapping[str, Any]]
) -> dict[str, Any]:
    """The index's counts and vector cache, the queue's status (``Reindexer.status``:
    broker, live workers, depths, recent jobs) and the file watcher's last state.

    The index is read first: a missing or foreign index is reported as such before
    ``queue_status`` is called (it opens the index for the job records).
    """
    counts = index_counts(search)
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
