"""In-process indexing: scan → change detection → chunk + write rows → embed + write vectors.

The queue workers run the same stages of :mod:`rifflux.index.pipeline` split across
actors; this module runs them back to back in one process (tests, ``rifflux eval``, and
as the reference the workers must match). Lexical first here too: every changed file's
rows are written (keyword-searchable) before the first text is embedded; the vector
phase then embeds every stored chunk that has no vector, batch by batch.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from rifflux.config import Settings
from rifflux.embed.base import Embedder
from rifflux.embed.factory import embedder_label_for, make_embedder
from rifflux.index.changes import FileWork, batch_by_bytes
from rifflux.index.pipeline import (
    doomed_paths,
    front_matter_skips,
    refresh_unchanged,
    survey,
    texts_to_embed,
)
from rifflux.index.prepare import chunk_file, embed_texts
from rifflux.index.scan import SkippedFile
from rifflux.store.connection import open_index
from rifflux.store.jobs import JobRecord
from rifflux.store.segments import merge_after_job
from rifflux.store.writer import IndexWriter
from rifflux.vectors.publish import publish_quietly

log = structlog.get_logger(__name__)

ProgressCallback = Callable[[int, int], None]

# Files whose missing vectors one embed call of the vector phase covers.
EMBED_BATCH_FILES = 64


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


class Indexer:
    """Index roots into ``settings.db_path`` within this process."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self._embedder = embedder

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = make_embedder(self.settings)
        return self._embedder

    @property
    def embedder_label(self) -> str:
        if self._embedder is not None:
            return self._embedder.label
        return embedder_label_for(self.settings)

    def run(
        self,
        roots: Sequence[Path | str],
        *,
        force: bool = False,
        prune_missing: bool = True,
        progress: ProgressCallback | None = None,
    ) -> IndexReport:
        # Markdown parsing allocates millions of short-lived objects that are never cyclic;
        # the cyclic collector's passes over them cost ~10% of a full index.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run(roots, force=force, prune_missing=prune_missing, progress=progress)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _run(
        self,
        roots: Sequence[Path | str],
        *,
        force: bool,
        prune_missing: bool,
        progress: ProgressCallback | None,
    ) -> IndexReport:
        started = time.perf_counter()
        root_paths = [Path(r) for r in roots]
        conn = open_index(self.settings.db_path)
        try:
            label = self.embedder_label
            found = survey(conn, self.settings, root_paths, label=label, force=force)
            scan, tally = found.scan, found.tally
            report = IndexReport(
                roots=scan.root_prefixes, embedding_model=label, files_scanned=len(scan.files)
            )
            report.skipped.extend(scan.skipped)
            indexed = 0
            writer = IndexWriter(conn)
            for batch_works in batch_by_bytes(found.works, self.settings.batch_target_bytes):
                self._write_rows(writer, batch_works, label, report)
                indexed += len(batch_works)
                if progress is not None:
                    done = indexed + len(tally.skipped) + tally.unchanged + len(tally.metadata)
                    progress(done, len(scan.files))
            self._embed_missing(writer, report)
            report.skipped.extend(SkippedFile(d.rel_path, d.reason) for d in tally.skipped)
            report.files_unchanged = tally.unchanged
            report.files_metadata_only = refresh_unchanged(conn, tally)
            report.files_skipped = (
                report.files_unchanged + report.files_metadata_only + len(report.skipped)
            )
            if prune_missing:
                doomed = doomed_paths(conn, found)
                report.files_deleted = IndexWriter(conn).delete_files(doomed) if doomed else 0
            merge_after_job(conn, report.chunks_written)
            if progress is not None:
                progress(len(scan.files), len(scan.files))
        finally:
            conn.close()
        publish_quietly(  # Vector cache hook.
            self.settings.db_path, source="indexer", vector_index=self.settings.vector_index
        )
        report.duration_s = round(time.perf_counter() - started, 3)
        log.info(
            "index.completed",
            roots=report.roots,
            indexed=report.files_indexed,
            unchanged=report.files_unchanged,
            deleted=report.files_deleted,
            skipped=len(report.skipped),
            vectors_new=report.vectors_new,
            duration_s=report.duration_s,
        )
        return report

    def _write_rows(
        self, writer: IndexWriter, works: list[FileWork], label: str, report: IndexReport
    ) -> None:
        files = [
            chunk_file(
                work,
                max_chars=self.settings.max_chunk_chars,
                min_chars=self.settings.min_chunk_chars,
            )
            for work in works
        ]
        with writer.transaction():
            stats = writer.write_rows(files, label)
        report.skipped += [SkippedFile(s["path"], s["reason"]) for s in front_matter_skips(files)]
        report.files_indexed += stats.files_written
        report.chunks_written += stats.chunks_written
        report.vectors_reused += stats.vectors_reused

    def _embed_missing(self, writer: IndexWriter, report: IndexReport) -> None:
        """The vector phase: embed the texts of every stored chunk without a vector."""
        paths = writer.paths_without_vectors()
        for start in range(0, len(paths), EMBED_BATCH_FILES):
            texts = texts_to_embed(writer.conn, paths[start : start + EMBED_BATCH_FILES])
            vectors = embed_texts(self.embedder, texts)
            with writer.transaction():
                report.vectors_new += writer.write_vectors(
                    self.embedder.label, self.embedder.dim, vectors
                )
