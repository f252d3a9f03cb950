"""The one report of an index run, shared by the in-process indexer and queued jobs.

:class:`~rifflux.index.indexer.Indexer` fills it as it goes; a queued job's report is a
view of its :class:`~rifflux.store.jobs.JobRecord` (:meth:`IndexReport.from_job`). The
CLI renders either with :meth:`IndexReport.lines`; the MCP ``reindex`` tool reads the
same fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rifflux.index.scan import SkippedFile
from rifflux.store.jobs import JobRecord


@dataclass(slots=True)
class IndexReport:
    """The one report of an index run, in-process (:class:`Indexer`) or as a queued job
    (:meth:`from_job`, a view of its :class:`~rifflux.store.jobs.JobRecord`), rendered
    one way (:meth:`lines`) by the CLI; the MCP ``reindex`` tool reads the same fields.

    ``files_skipped`` counts every scanned file not (re)indexed: unchanged, only its
    mtime refreshed, or skipped with a reason (listed in ``skipped``). The text says
    "unchanged" for the first two (``files_unchanged``; a queued job's includes the
    mtime-only refreshes) and "skipped" only for files that were not indexed.
    """

    roots: list[str]
    embedding_model: str
    files_scanned: int = 0
    files_indexed: int = 0
    files_unchanged: int = 0
    files_metadata_only: int = 0
    files_deleted: int = 0
    chunks_written: int = 0
    vectors_new: int = 0
    vectors_reused: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)
    duration_s: float = 0.0
    # A queued job's id and state; None and "completed" for an in-process run.
    job_id: str | None = None
    state: str = "completed"
    files_skipped: int = 0
    files_failed: int = 0
    errors: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def from_job(cls, record: JobRecord, embedding_model: str) -> IndexReport:
        """The report of a queued job, from its record."""
        return cls(
            roots=list(record.roots),
            embedding_model=embedding_model,
            files_scanned=record.files_total,
            files_indexed=record.files_done,
            files_deleted=record.files_deleted,
            chunks_written=record.chunks_written,
            vectors_new=record.chunks_embedded,
            skipped=[SkippedFile(s["path"], s["reason"]) for s in record.skipped],
            duration_s=record.duration_s,
            job_id=record.id,
            state=record.state,
            files_skipped=record.files_skipped,
            files_unchanged=record.files_unchanged,
            files_failed=record.files_failed,
            errors=list(record.errors),
        )

    def skipped_dicts(self) -> list[dict[str, str]]:
        return [{"path": s.rel_path, "reason": s.reason} for s in self.skipped]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["skipped"] = self.skipped_dicts()
        return data

    @property
    def files_left_as_they_were(self) -> int:
        """Scanned files whose rows stayed: unchanged, or only their mtime refreshed."""
        return self.files_unchanged + self.files_metadata_only

    def lines(self) -> list[str]:
        """The human-readable report: one summary line, then errors and skipped files."""
        head = f"job {self.job_id} {self.state}: " if self.job_id else ""
        unchanged = self.files_left_as_they_were
        lines = [
            f"{head}indexed {self.files_indexed} files ({self.chunks_written} chunks, "
            f"{self.vectors_new} embedded), unchanged {unchanged}, "
            f"skipped {self.files_skipped - unchanged}, "
            f"deleted {self.files_deleted}, failed {self.files_failed} "
            f"in {self.duration_s:.2f}s"
        ]
        lines += [f"  {e.get('path') or '(job)'}: {e.get('error', '?')}" for e in self.errors]
        lines += [f"  skipped {s.rel_path}: {s.reason}" for s in self.skipped]
        return lines
