"""A search loop run as its own process by test_vector_concurrency.py.

Usage: python vector_search_loop.py DB_PATH BASE_DIR READY_FILE STOP_FILE PROGRESS_FILE

Searches until STOP_FILE exists, then prints one JSON report; every ``PROGRESS_EVERY``
searches it writes its progress to PROGRESS_FILE as JSON, ``{"searches": N, "stale": M}``
(M: how many of its cache-state samples were ``stale``), replaced whole so that a reader
never sees half of it. Two kinds of iteration:

* strict: the search and every ``get_chunk`` run inside one read transaction on the
  service's connection, so they all see one index generation. Every returned chunk
  must resolve there, with the same content, and (semantic mode) its cosine must be the
  cosine of the vector stored for it there, not of a deleted chunk whose rowid it got.
  This is the "at that generation" check.
* plain: no transaction, as a client calls it. A returned chunk may be deleted before
  ``get_chunk`` runs; that is only allowed if the generation moved in between.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from rifflux.config import Settings
from rifflux.errors import NotFoundError
from rifflux.search.service import SearchService
from rifflux.status import index_counts
from rifflux.store.reader import current_generation
from rifflux.store.vector_blobs import int8_rows
from rifflux.vectors.quantize import quantize_query, scalar_cosine

WORDS = [
    "amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo",
    "juniper", "kelp", "lagoon", "meadow", "nectar", "onyx", "pollen", "quartz", "raven",
]  # fmt: skip
MAX_SECONDS = 600.0
"""Only ends a loop whose test never wrote STOP_FILE."""
PROGRESS_EVERY = 10


def scored_by_own_vector(
    conn: sqlite3.Connection, service: SearchService, query: str, result: dict[str, Any]
) -> bool:
    """Is the result's cosine the (int8, exact) one of the vector stored for that chunk now?"""
    row = conn.execute(
        "SELECT vec FROM embeddings WHERE chunk_id = ?", (result["chunk_id"],)
    ).fetchone()
    q = service.embed_query(query)
    if row is None or q is None:
        return False
    vec = int8_rows([(0, row[0])], 1, len(q))[0]
    cosine = scalar_cosine(vec.tolist(), quantize_query(q).tolist())
    return cosine == result["score_breakdown"]["cosine"]


def main(
    db_path: str, base_dir: str, ready_file: str, stop_file: str, progress_file: str
) -> dict[str, object]:
    settings = Settings.from_env().with_overrides(
        db_path=Path(db_path), base_dir=Path(base_dir), embedding_backend="hash"
    )
    service = SearchService(settings)
    conn = service.connection()
    rng = random.Random(1)
    searches = strict_searches = returned = moved = 0
    errors: list[str] = []
    states: dict[str, int] = {}
    Path(ready_file).touch()
    deadline = time.monotonic() + MAX_SECONDS
    i = 0
    while not Path(stop_file).exists() and time.monotonic() < deadline:
        i += 1
        query = " ".join(rng.sample(WORDS, 2))
        mode = "semantic" if i % 3 else "hybrid"
        strict = i % 2 == 0
        try:
            if strict:
                conn.execute("BEGIN")
                try:
                    results = service.search(query, top_k=5, mode=mode)
                    for result in results:
                        chunk = service.get_chunk(result["chunk_id"])
                        if chunk["content"] != result["content"]:
                            errors.append(f"content differs for {result['chunk_id']}")
                        if mode == "semantic" and not scored_by_own_vector(
                            conn, service, query, result
                        ):
                            errors.append(f"cosine of another vector for {result['chunk_id']}")
                finally:
                    conn.execute("COMMIT")
                strict_searches += 1
            else:
                before = current_generation(conn)
                results = service.search(query, top_k=5, mode=mode)
                for result in results:
                    try:
                        service.get_chunk(result["chunk_id"])
                    except NotFoundError:
                        if current_generation(conn) == before:
                            errors.append(f"unresolvable {result['chunk_id']} at {before}")
                        moved += 1
            searches += 1
            returned += len(results)
            if searches % PROGRESS_EVERY == 0:
                progress = {"searches": searches, "stale": states.get("stale", 0)}
                Path(progress_file + ".tmp").write_text(json.dumps(progress))
                os.replace(progress_file + ".tmp", progress_file)
            if i % 10 == 0:
                state = index_counts(service)["vector_cache"]["state"]
                states[state] = states.get(state, 0) + 1
        except Exception:
            errors.append(traceback.format_exc())
    return {
        "searches": searches,
        "strict": strict_searches,
        "results": returned,
        "moved": moved,
        "states": states,
        "error_count": len(errors),
        "errors": errors[:20],
    }


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:6])))
