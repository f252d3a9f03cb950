"""A search answered while some chunks have no vector says so (``embedding_coverage`` and
a one-line ``warning``) in every mode that uses vectors, and stops saying so once every
chunk has one; through a real MCP client session over stdio on a real index."""

from __future__ import annotations

import pytest
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    call_ok,
    stdio_session,
    tree_fixture,
    write_docs,
)

from rifflux.index.indexer import Indexer

pytestmark = pytest.mark.anyio

TIMEOUT = 60
PENDING = {
    "notes/zeppelin.md": "# Airships\n\nThe zeppelin floated over the lake at dawn.\n",
    "notes/troubleshooting.md": "# Troubleshooting\n\n## Error: ZEPPELIN_DOWN\n\n"
    "Fix: refill the zeppelin with helium.\n",
}


def index_without_vectors(tree: IndexedTree, monkeypatch: pytest.MonkeyPatch) -> None:
    """Index PENDING's files as a job's first phase does, their vectors not yet written."""
    write_docs(tree.root, PENDING)
    with monkeypatch.context() as patch:
        patch.setattr(Indexer, "_embed_missing", lambda self, writer, report: None)
        Indexer(tree.settings()).run([tree.root])


async def test_searches_say_when_chunks_lack_vectors(
    tree: IndexedTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_without_vectors(tree, monkeypatch)
    async with stdio_session(tree) as session:
        for mode in ("hybrid", "semantic"):
            found = await call_ok(
                session, "search_rifflux", timeout=TIMEOUT, query="zeppelin", mode=mode
            )
            coverage = found["embedding_coverage"]
            assert 0 < coverage < 1
            warning = found["warning"]
            assert "\n" not in warning
            assert warning.startswith(f"{int(coverage * 100)}% of chunks have vectors")
            assert list(found)[:6] == [
                "query", "mode", "count", "embedding_model", "embedding_coverage", "warning"
            ]  # fmt: skip
        hybrid = await call_ok(session, "search_rifflux", timeout=TIMEOUT, query="zeppelin")
        assert "ranked by keywords only" in hybrid["warning"]
        assert "notes/zeppelin.md" in {r["path"] for r in hybrid["results"]}
        lexical = await call_ok(
            session, "search_rifflux", timeout=TIMEOUT, query="zeppelin", mode="lexical"
        )
        assert "embedding_coverage" not in lexical and "warning" not in lexical
        errors = await call_ok(session, "search_errors", timeout=TIMEOUT, query="ZEPPELIN_DOWN")
        assert 0 < errors["embedding_coverage"] < 1 and "warning" in errors

        Indexer(tree.settings()).run([tree.root])  # The vector phase: every chunk embedded.
        done = await call_ok(session, "search_rifflux", timeout=TIMEOUT, query="zeppelin")
        assert "embedding_coverage" not in done and "warning" not in done
        errors = await call_ok(session, "search_errors", timeout=TIMEOUT, query="ZEPPELIN_DOWN")
        assert "embedding_coverage" not in errors
