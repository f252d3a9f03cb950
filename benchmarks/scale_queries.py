"""Realistic search queries lifted from an index: shared by the
scale benchmarks (``benchmarks.lexical_scale``, ``benchmarks.scale_run --mcp``).

A query is a run of 2–6 consecutive words of a random chunk of the index (lower-cased),
20% of them quoted as phrases. Each is labelled by the rarest of its words: ``rare`` (a
word in under 0.1% of the chunks), ``common`` (every word in 1% or more) or ``mid``;
``phrase`` for the quoted ones. Only SQL over the ``chunks`` and ``chunks_fts`` tables,
no Rifflux import, so the same queries can be drawn from an index built by any checkout.
The same ``(index, count, seed)`` always gives the same queries.
"""

from __future__ import annotations

import random
import re
import sqlite3

WORD = re.compile(r"[A-Za-z]{2,}")
PHRASE_SHARE = 0.2


def document_frequency(conn: sqlite3.Connection, term: str, cache: dict[str, int]) -> int:
    """Chunks whose keyword index holds ``term``."""
    if term not in cache:
        cache[term] = conn.execute(
            "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (f'"{term}"',)
        ).fetchone()[0]
    return cache[term]


def make_queries(conn: sqlite3.Connection, count: int, seed: int) -> list[tuple[str, str]]:
    """(label, query): runs of 2–6 consecutive words of random chunks, 20% as phrases."""
    rng = random.Random(seed)
    total, top = conn.execute("SELECT count(*), max(id) FROM chunks").fetchone()
    df: dict[str, int] = {}
    queries: list[tuple[str, str]] = []
    while len(queries) < count:
        row = conn.execute(
            "SELECT content FROM chunks WHERE id >= ? ORDER BY id LIMIT 1", (rng.randint(1, top),)
        ).fetchone()
        words = WORD.findall(row[0]) if row else []
        n = rng.randint(2, 6)
        if len(words) < n:
            continue
        start = rng.randrange(len(words) - n + 1)
        text = " ".join(w.lower() for w in words[start : start + n])
        if rng.random() < PHRASE_SHARE:
            queries.append(("phrase", f'"{text}"'))
            continue
        # Stop words are the commonest words, so they never decide the rarest one.
        rarest = min(document_frequency(conn, t, df) for t in dict.fromkeys(text.split()))
        label = "rare" if rarest < total / 1000 else "common" if rarest >= total / 100 else "mid"
        queries.append((label, text))
    return queries
