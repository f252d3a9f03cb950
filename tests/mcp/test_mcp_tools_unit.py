"""The tool functions and error mapping without the protocol: validate, call, shape."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    plain_words,
    shared_tree_fixture,
    tool_context_fixture,
    tree_fixture,
)
from pydantic import BaseModel, Field, ValidationError
from structlog.testing import capture_logs

from rifflux.errors import (
    NotFoundError,
    RiffluxError,
    RootNotFoundError,
    SchemaVersionError,
)
from rifflux.mcp import tools
from rifflux.mcp.server import tool_error_message, validation_message
from rifflux.mcp.tools import ToolContext
from rifflux.store.connection import open_index
from rifflux.store.jobs import JobRecord

RESULT_KEYS = {"chunk_id", "path", "heading_path", "chunk_index", "content", "score_breakdown"}
BREAKDOWN_KEYS = {
    "lexical": {"bm25"},
    "semantic": {"cosine"},
    "hybrid": {"rrf", "lexical_rank", "semantic_rank"},
}


def make_foreign_schema_db(path: Path) -> Path:
    conn = open_index(path)
    conn.execute("UPDATE index_metadata SET value='999' WHERE key='schema_version'")
    conn.close()
    return path


@pytest.mark.parametrize(
    "query",
    ['"', '"unbalanced quote', "tomato*", "basil AND", "NEAR(basil", "path:docs", "-sun", "(a OR"],
)
def test_fts_syntax_is_searched_as_plain_text(tool_context: ToolContext, query: str) -> None:
    response = tools.search_rifflux(tool_context, query, mode="lexical")
    words_only = tools.search_rifflux(tool_context, plain_words(query), mode="lexical")
    assert response["results"] == words_only["results"]
    assert response["count"] == len(words_only["results"])


def test_db_path_searches_another_index_and_reuses_its_service(
    tool_context: ToolContext, shared_tree: IndexedTree
) -> None:
    other = str(shared_tree.db_path)
    allowed = (str(tool_context.cwd), str(shared_tree.root))
    tool_context.settings = tool_context.settings.with_overrides(allowed_roots=allowed)
    response = tools.search_rifflux(tool_context, "fusion", mode="lexical", db_path=other)
    assert response["count"] > 0
    assert tool_context.service_for(other) is tool_context.service_for(other)
    assert tool_context.service_for(other) is not tool_context.search


def test_db_path_services_share_the_servers_query_cache(
    tool_context: ToolContext, shared_tree: IndexedTree
) -> None:
    """One cache per process, so its byte bound is the process's however many indexes
    the server opens for db_path searches."""
    other = str(shared_tree.db_path)
    allowed = (str(tool_context.cwd), str(shared_tree.root))
    tool_context.settings = tool_context.settings.with_overrides(allowed_roots=allowed)
    cache = tool_context.search.query_cache
    for _ in range(2):
        tools.search_rifflux(tool_context, "fusion", mode="lexical", db_path=other)
        tools.search_rifflux(tool_context, "fusion", mode="lexical")
    assert tool_context.service_for(other).query_cache is cache
    assert (cache.hits, len(cache)) == (2, 2)


def test_db_path_of_the_servers_own_index_is_the_main_service(tool_context: ToolContext) -> None:
    assert tool_context.service_for(".rifflux/index.db") is tool_context.search
    assert tool_context.service_for(None) is tool_context.search


def test_missing_db_path_is_not_found_and_not_created(tool_context: ToolContext) -> None:
    with pytest.raises(NotFoundError, match=r"no index at .*nowhere"):
        tools.search_rifflux(tool_context, "basil", db_path="nowhere/index.db")
    assert not (tool_context.cwd / "nowhere").exists()


def test_db_of_another_schema_version_is_a_clear_error(tool_context: ToolContext) -> None:
    db = make_foreign_schema_db(tool_context.cwd / "old.db")
    with pytest.raises(SchemaVersionError, match="schema version 999"):
        tools.search_rifflux(tool_context, "basil", db_path=str(db))


def test_reindex_roots_paths_win_then_path_then_cwd(tool_context: ToolContext) -> None:
    root = tool_context.cwd
    assert tools.resolve_roots(tool_context, None, None) == [root]
    assert tools.resolve_roots(tool_context, "docs", None) == [root / "docs"]
    assert tools.resolve_roots(tool_context, "docs", ["notes", str(root / "docs")]) == [
        root / "notes",
        root / "docs",
    ]
    assert tools.resolve_roots(tool_context, "docs", []) == [root / "docs"]


def test_without_base_dir_relative_paths_are_read_against_the_recorded_base(
    tree: IndexedTree, tmp_path: Path
) -> None:
    """A server started elsewhere (a host's ``/``) still reads ``docs`` as results show it:
    against the base directory the index recorded, not its own working directory."""
    elsewhere = tmp_path / "host-cwd"
    elsewhere.mkdir()
    settings = tree.settings(RIFFLUX_BASE_DIR="", RIFFLUX_ALLOWED_ROOTS=str(tree.root))
    ctx = ToolContext.from_settings(settings, cwd=elsewhere)
    try:
        assert ctx.base == tree.root
        assert tools.resolve_roots(ctx, "docs", None) == [tree.root / "docs"]
        assert ctx.service_for(".rifflux/index.db") is ctx.search
        # With no path, the server's own working directory, as the contract says; the
        # refusal says that this default was the path, and how to give another.
        with pytest.raises(RiffluxError) as refused:
            tools.resolve_roots(ctx, None, None)
        assert str(refused.value) == (
            f"{elsewhere} is outside the allowed roots ({tree.root}); with no path reindex "
            "indexes the server's working directory; pass a path (relative paths are read "
            f"from {tree.root}), or start the server with RIFFLUX_BASE_DIR, the directory it "
            "then works in"
        )
    finally:
        ctx.close()


def test_reindex_of_a_missing_path_names_it(tool_context: ToolContext) -> None:
    with pytest.raises(RootNotFoundError, match="does-not-exist"):
        tools.reindex(tool_context, paths=["docs", "does-not-exist"])


class FakeQueue:
    """Stands in for IndexQueue: records submissions, finishes jobs in a given state."""

    def __init__(self, state: str, errors: list[dict[str, str]] | None = None) -> None:
        self.state = state
        self.errors = errors or []
        self.submitted: list[tuple[list[Path], bool, bool]] = []
        self.workers_ensured = 0

    def ensure_workers(self) -> None:
        self.workers_ensured += 1

    def submit(self, roots: list[Path], *, force: bool, prune_missing: bool) -> str:
        self.submitted.append((list(roots), force, prune_missing))
        return "job-1"

    def _record(self, state: str) -> JobRecord:
        return JobRecord(
            id="job-1",
            roots=[],
            options={},
            state=state,
            files_done=2,
            files_skipped=5,
            files_deleted=1,
            errors=self.errors,
        )

    def job(self, job_id: str) -> JobRecord:
        return self._record("queued")

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        on_progress: Callable[[JobRecord], None] | None = None,
        start_workers: bool = False,
    ) -> JobRecord:
        # A waiting reindex may start workers if its job stalls.
        assert start_workers
        running = self._record("running")
        if on_progress is not None:
            on_progress(running)
        return self._record(self.state)

    def close(self) -> None:
        pass


def test_reindex_waits_and_maps_the_job_counters(tool_context: ToolContext) -> None:
    tool_context.queue = FakeQueue("completed")  # type: ignore[assignment]
    result = tools.reindex(tool_context, path="docs", force=True, prune_missing=False)
    assert result == {
        "indexed_files": 2,
        "skipped_files": 5,
        "deleted_files": 1,
        "skipped": [],
        "indexed_paths": [str(tool_context.cwd / "docs")],
        "embedding_model": "hash:384",
        "embedding_backend": "hash",
        "job_id": "job-1",
    }
    assert tool_context.queue.submitted == [([tool_context.cwd / "docs"], True, False)]  # type: ignore[attr-defined]
    assert tool_context.queue.workers_ensured == 1  # type: ignore[attr-defined]


def test_reindex_in_background_returns_job_id_and_state(tool_context: ToolContext) -> None:
    tool_context.queue = FakeQueue("completed")  # type: ignore[assignment]
    assert tools.reindex(tool_context, background=True) == {"job_id": "job-1", "status": "queued"}


def test_failed_job_is_an_error_listing_its_file_errors(tool_context: ToolContext) -> None:
    errors = [{"path": f"docs/{i}.md", "error": "boom"} for i in range(7)]
    tool_context.queue = FakeQueue("failed", errors)  # type: ignore[assignment]
    with pytest.raises(RiffluxError) as caught:
        tools.reindex(tool_context)
    message = str(caught.value)
    assert message.startswith("reindex job job-1 failed: docs/0.md: boom; docs/1.md: boom")
    assert message.endswith("; and 2 more")
    assert "\n" not in message


def test_closing_the_context_stops_a_reindex_wait(tool_context: ToolContext) -> None:
    tool_context.queue = FakeQueue("completed")  # type: ignore[assignment]
    tool_context.close()
    with pytest.raises(RiffluxError, match="the server is shutting down; job job-1"):
        tools.reindex(tool_context)


def test_index_status_reports_counts_workers_queue_jobs_and_watcher(
    tool_context: ToolContext,
) -> None:
    status = tools.index_status(tool_context)
    assert status["files"] == 3
    assert status["chunks"] == status["embeddings"] > 0
    assert status["generation"] >= 1
    assert status["db_path"] == str(tool_context.settings.db_path)
    assert Path(status["db_path"]).is_absolute()
    assert status["embedding_backend"] == "hash"
    assert status["embedding_model"] == "hash:384"
    assert status["live_workers"] == {"count": 0, "workers": []}
    assert isinstance(status["queue_depths"], dict)
    assert status["recent_jobs"] == []
    assert status["watcher"] == {"running": False}


class Args(BaseModel):
    top_k: int = Field(ge=1)
    mode: str


def test_validation_message_is_one_line_naming_fields_and_values() -> None:
    with pytest.raises(ValidationError) as caught:
        Args.model_validate({"top_k": 0})
    message = validation_message("search_rifflux", caught.value)
    assert message == (
        "invalid arguments for search_rifflux: top_k: Input should be greater than or "
        "equal to 1 (got 0); mode: Field required"
    )


def raised_as(cls: type[ToolError], cause: BaseException) -> ToolError:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise cls("Error executing tool t") from exc
    except ToolError as wrapped:
        return wrapped


def test_rifflux_and_value_errors_keep_their_message() -> None:
    assert tool_error_message("t", raised_as(UnexpectedToolError, NotFoundError("gone"))) == "gone"
    assert tool_error_message("t", raised_as(UnexpectedToolError, ValueError("a\nb"))) == "a b"


def test_unexpected_errors_are_internal_errors_logged_with_traceback() -> None:
    cause = sqlite3.InterfaceError("bad parameter")
    with capture_logs() as logs:
        message = tool_error_message("t", raised_as(UnexpectedToolError, cause))
    assert message == "internal error: InterfaceError: bad parameter"
    assert logs[0]["event"] == "mcp.tool_crashed"
    assert logs[0]["log_level"] == "error"
    assert logs[0]["exc_info"] is cause
