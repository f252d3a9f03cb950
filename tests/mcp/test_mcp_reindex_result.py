"""The MCP reindex tool answers with the one job report's fields, in its own keys."""

from __future__ import annotations

from pathlib import Path

from rifflux.config import Settings
from rifflux.index.report import IndexReport
from rifflux.mcp.tools import reindex_result
from rifflux.store.jobs import JobRecord


def job_record() -> JobRecord:
    return JobRecord(
        id="j1",
        roots=["docs"],
        options={},
        state="completed",
        files_done=4,
        files_skipped=3,
        files_deleted=1,
        skipped=[{"path": "docs/big.md", "reason": "larger than 5000000 bytes"}],
    )


def test_the_reindex_tool_answers_with_the_reports_fields_in_its_keys() -> None:
    report = IndexReport.from_job(job_record(), "hash:384")
    assert reindex_result(report, [Path("/srv/docs")], Settings(embedding_backend="hash")) == {
        "indexed_files": 4,
        "skipped_files": 3,
        "deleted_files": 1,
        "skipped": [{"path": "docs/big.md", "reason": "larger than 5000000 bytes"}],
        "indexed_paths": ["/srv/docs"],
        "embedding_model": "hash:384",
        "embedding_backend": "hash",
        "job_id": "j1",
    }
