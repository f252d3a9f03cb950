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
from pathlib import Path

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
from rifflux.index.prepare import chunk_files, embed_texts
from rifflux.index.report import IndexReport
from rifflux.index.scan import SkippedFile
from rifflux.store import grep_text
from rifflux.store.connection import open_index, transaction
from rifflux.store.segments import merge_after_job
from rifflux.store.writer import IndexWriter
from rifflux.vectors.publish import publish_quietly

log = structlog.get_logger(__name__)

ProgressCallback = Callable[[int, int], None]

# Files whose missing vectors one embed call of the vector phase covers.
EMBED_BATCH_FILES = 64


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
            with transaction(conn):
                grep_text.set_grep(conn, self.settings.grep_index)
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
            # As a queued job's plan does: index_status counts per indexed root.
            writer.add_indexed_roots(scan.root_prefixes)
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
        files = chunk_files(
            writer.conn,
            works,
            max_chars=self.settings.max_chunk_chars,
            min_chars=self.settings.min_chunk_chars,
        )
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
