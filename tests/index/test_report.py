"""One report of an index run: a queued job's record seen as an IndexReport renders the
same lines as an in-process run; "unchanged" counts files left as they were, "skipped"
only files that were not indexed."""

from __future__ import annotations

from rifflux.index.report import IndexReport
from rifflux.index.scan import SkippedFile
from rifflux.store.jobs import JobRecord


def job_record() -> JobRecord:
    return JobRecord(
        id="j1",
        roots=["docs"],
        options={},
        state="failed",
        files_total=9,
        files_done=4,
        files_skipped=3,
        files_unchanged=2,
        files_failed=2,
        files_deleted=1,
        chunks_embedded=7,
        chunks_written=11,
        errors=[{"path": "docs/x.md", "error": "boom"}, {"path": "", "error": "disk full"}],
        skipped=[{"path": "docs/big.md", "reason": "larger than 5000000 bytes"}],
        created_at=100.0,
        started_at=101.0,
        finished_at=103.5,
    )


def test_a_job_report_renders_as_an_in_process_report_does() -> None:
    report = IndexReport.from_job(job_record(), "hash:384")
    assert report.lines() == [
        "job j1 failed: indexed 4 files (11 chunks, 7 embedded), unchanged 2, skipped 1, "
        "deleted 1, failed 2 in 2.50s",
        "  docs/x.md: boom",
        "  (job): disk full",
        "  skipped docs/big.md: larger than 5000000 bytes",
    ]
    in_process = IndexReport(
        roots=["docs"],
        embedding_model="hash:384",
        files_indexed=4,
        chunks_written=11,
        vectors_new=7,
        files_skipped=3,
        files_unchanged=1,
        files_metadata_only=1,
        files_deleted=1,
        skipped=[SkippedFile("docs/big.md", "larger than 5000000 bytes")],
        duration_s=2.5,
    )
    assert in_process.lines() == [
        "indexed 4 files (11 chunks, 7 embedded), unchanged 2, skipped 1, deleted 1, "
        "failed 0 in 2.50s",
        "  skipped docs/big.md: larger than 5000000 bytes",
    ]
