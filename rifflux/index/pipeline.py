"""The indexing pipeline: plan, chunk, embed, write vectors, finalize, as plain functions.

Lexical first: a batch becomes keyword-searchable as soon as it is chunked (``chunk``, on
the index host), and its vectors follow in a phase of their own (``embed`` anywhere, never
opening the index; ``write_vectors`` on the index host); ``plan`` and ``finalize`` open
and close a job. Two drivers call these functions: the in-process
:class:`~rifflux.index.indexer.Indexer` and the Dramatiq actors (``workers/actors.py``);
sending is the caller's (``SendChunk``, ``SendEmbed``), so nothing here imports Dramatiq
or ``rifflux.queue``.

Invariants: a vector lands only on a chunk whose text has exactly the hash it was
computed from, and rewriting a chunk deletes its old vector in the same transaction (no
chunk is shown with a vector of other text); each step reads the job's
:class:`~rifflux.index.jobspec.JobSpec` from its record, so workers with another
environment index exactly what the front process asked for; every step is idempotent:
a redelivered message changes nothing twice. The stages and their messages:
docs/architecture.md, "A reindex job".
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import structlog

from rifflux.config import Settings
from rifflux.embed.base import Embedder
from rifflux.embed.factory import embedder_label_for
from rifflux.errors import EmbeddingModelMismatch, RiffluxError
from rifflux.index.allowed import real, real_is_within
from rifflux.index.changes import (
    Decision,
    FileWork,
    Tally,
    decide,
    decode_text,
    load_states,
    paths_to_prune,
    sort_decisions,
)
from rifflux.index.denied import refused_secret
from rifflux.index.jobspec import JobSpec
from rifflux.index.kinds import KNOWLEDGE_VERSION
from rifflux.index.messages import (
    BatchFailure,
    ChunkRequest,
    EmbedRequest,
    JobStep,
    PlannedFile,
    VectorsRequest,
)
from rifflux.index.planner import (
    MAX_SKIPPED_KEPT,
    stream_plan,
)
from rifflux.index.prepare import chunk_files, embed_texts, embedding_input
from rifflux.index.scan import ScanResult, scan_roots
from rifflux.index.units import deal, units_for
from rifflux.store import grep_text, jobs
from rifflux.store.connection import open_index, transaction, tune_for_batch_writes
from rifflux.store.knowledge import stale_paths
from rifflux.store.own_files import IndexFiles
from rifflux.store.reader import IndexReader
from rifflux.store.rows import PreparedFile
from rifflux.store.segments import (
    DEFAULT_POLICY,
    files_stored_bound,
    merge_after_job,
    merges_deferred,
)
from rifflux.store.vector_blobs import encode_matrix, encode_vectors
from rifflux.store.writer import IndexWriter
from rifflux.vectors.publish import publish, publish_quietly
from rifflux.vectors.segments import MANIFEST_NAME, vectors_dir

log = structlog.get_logger(__name__)

# Files per batch of a plan's embed-only batches (stored files that still lack vectors).
EMBED_ONLY_BATCH_FILES = 64
# While a job's vector phase runs, the vector cache is published at most every
# PUBLISH_EVERY_SECONDS, and never more often than PUBLISH_COST_FACTOR times the last
# publish took in this process: a publish reads the rows logged since the last one
# (rifflux.store.changes), but a large job's publishes still grow with what it wrote
# (a delta segment, and past the compaction threshold a rewrite of the cache), so a
# fixed interval would spend a growing share of a large job publishing.
PUBLISH_EVERY_SECONDS = 15.0
PUBLISH_COST_FACTOR = 20.0

SendChunk = Callable[[ChunkRequest], None]
SendEmbed = Callable[[EmbedRequest], None]
R = TypeVar("R", ChunkRequest, EmbedRequest, VectorsRequest)


# -- stages shared by the in-process indexer and the job steps -------------------------


def resolve_base_dir(conn: sqlite3.Connection, settings: Settings) -> Path:
    """The directory stored paths are relative to; recorded in the index on first use."""
    writer = IndexWriter(conn)
    stored = writer.metadata("base_dir")
    if settings.base_dir is not None:
        base = Path(os.path.abspath(settings.base_dir))
    elif stored:
        base = Path(stored)
    else:
        base = Path(os.getcwd())
    if stored != base.as_posix():
        writer.set_metadata("base_dir", base.as_posix())
    return base


def check_embedding_model(conn: sqlite3.Connection, label: str, *, force: bool) -> None:
    """Refuse to mix vectors of two models in one index unless re-embedding everything."""
    stored = IndexReader(conn).metadata("embedding_model")
    if stored and stored != label and not force:
        raise EmbeddingModelMismatch(
            f"the index was embedded with {stored!r} but the configured embedder is "
            f"{label!r}; reindex with `rifflux index --force PATH...` to re-embed it"
        )


def scan_for(conn: sqlite3.Connection, settings: Settings, roots: Sequence[Path]) -> ScanResult:
    """Scan ``roots``; symlinks are followed only into them, secret paths skipped."""
    base = resolve_base_dir(conn, settings)
    return scan_roots(
        roots,
        base_dir=base,
        include_globs=settings.include_globs,
        exclude_globs=settings.exclude_globs,
        index_files=IndexFiles.for_settings(settings),
        allow_secret_paths=settings.allow_secret_paths,
    )


def decide_all(
    conn: sqlite3.Connection, scan: ScanResult, settings: Settings, *, force: bool
) -> Iterator[Decision]:
    """Decisions for every scanned file, lazily (a changed file's text is read here).

    A file stored without knowledge rows of the current rules (``KNOWLEDGE_VERSION``: an
    index written before them, or by older rules) is re-chunked as if forced, once.
    """
    states = load_states(IndexReader(conn).file_states())
    stale = stale_paths(conn, KNOWLEDGE_VERSION)
    for scanned in scan.files:
        yield decide(
            scanned,
            states.get(scanned.rel_path),
            force=force or scanned.rel_path in stale,
            max_file_bytes=settings.max_file_bytes,
        )


@dataclass(slots=True)
class Survey:
    """What a scan found: the files to (re-)chunk (lazily, sorted) and every other verdict.

    ``tally`` fills while ``works`` is consumed.
    """

    scan: ScanResult
    works: Iterator[FileWork]
    tally: Tally


def survey(
    conn: sqlite3.Connection,
    settings: Settings,
    roots: Sequence[Path],
    *,
    label: str,
    force: bool,
) -> Survey:
    """Check the index's model, scan ``roots`` and diff them with the stored files.

    Raises EmbeddingModelMismatch (and the scan's RiffluxErrors) before anything is read.
    """
    check_embedding_model(conn, label, force=force)
    scan = scan_for(conn, settings, roots)
    tally = Tally()
    works = sort_decisions(decide_all(conn, scan, settings, force=force), tally)
    return Survey(scan, works, tally)


def refresh_unchanged(conn: sqlite3.Connection, tally: Tally) -> int:
    """Store the new mtime/size of files whose content hash did not change."""
    updates = [(d.mtime_ns, d.size_bytes, d.rel_path) for d in tally.metadata]
    return IndexWriter(conn).update_file_stats(updates)


def doomed_paths(conn: sqlite3.Connection, found: Survey) -> list[str]:
    """Stored files under the scanned roots that the scan no longer keeps."""
    return paths_to_prune(
        IndexReader(conn).stored_paths(), found.tally.kept, found.scan.root_prefixes
    )


def read_works(
    base_dir: Path,
    rel_paths: Sequence[str],
    max_file_bytes: int,
    bounds: Sequence[Path] | None = None,
    *,
    allow_secret_paths: bool = False,
) -> tuple[list[FileWork], list[str]]:
    """Read the planned files now; files that vanished or turned unindexable are listed.

    A file whose realpath now lies outside ``bounds`` (realpaths, when given) or is on
    the deny list (it was swapped for a symlink after the scan, e.g. before a
    redelivered plan) counts as vanished and is not read.

    Plain strings, not ``Path``: pathlib interns every path component it parses, so a
    worker reading 100k files grew the interpreter's table of interned strings by their
    names (a 1.9 MB resize at ~6k files).
    """
    works: list[FileWork] = []
    vanished: list[str] = []
    base = os.fspath(base_dir)
    for rel_path in rel_paths:
        path = rel_path if rel_path.startswith("/") else os.path.join(base, rel_path)
        real_path = os.path.realpath(path)
        if (bounds is not None and not real_is_within(real_path, bounds)) or refused_secret(
            [real_path], allow=allow_secret_paths
        ):
            vanished.append(rel_path)
            continue
        try:
            st = os.stat(path)
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            vanished.append(rel_path)
            continue
        text = decode_text(data) if len(data) <= max_file_bytes else None
        if text is None:
            vanished.append(rel_path)
            continue
        sha256 = hashlib.sha256(data).hexdigest()
        works.append(FileWork(rel_path, st.st_mtime_ns, len(data), sha256, text))
    return works, vanished


def read_planned(
    base_dir: Path | str,
    planned: Sequence[PlannedFile],
    max_file_bytes: int,
    bounds: Sequence[Path] | None = None,
    *,
    allow_secret_paths: bool = False,
) -> tuple[list[FileWork], list[str], list[str]]:
    """Read a batch's files as :func:`read_works` does, and check each against what the
    plan saw: (the files still as planned, those changed since, those vanished or
    unindexable). A file is as planned when its size and sha256 are the plan's (a new
    mtime with the same bytes is taken); a plan that recorded no sha256 takes any."""
    works, vanished = read_works(
        Path(base_dir),
        [f.rel_path for f in planned],
        max_file_bytes,
        bounds,
        allow_secret_paths=allow_secret_paths,
    )
    seen = {f.rel_path: f for f in planned}
    current: list[FileWork] = []
    changed: list[str] = []
    for work in works:
        plan = seen[work.rel_path]
        if plan.sha256 and (plan.size_bytes, plan.sha256) != (work.size_bytes, work.sha256):
            changed.append(work.rel_path)
        else:
            current.append(work)
    return current, changed, vanished


CHANGED_WHILE_QUEUED = "changed after it was planned; a later job indexes it"
"""The job error of a planned file whose text changed between its plan and its write."""


def _disk_path(base: str, rel_path: str) -> str:
    return rel_path if rel_path.startswith("/") else os.path.join(base, rel_path)


def is_regular(base: str, rel_path: str) -> bool:
    """True if the stored path ``rel_path`` is a regular file now (links followed)."""
    try:
        return stat.S_ISREG(os.stat(_disk_path(base, rel_path)).st_mode)
    except (OSError, ValueError):
        return False


def as_on_disk(
    base: str, files: Sequence[PreparedFile], vanished: Sequence[str]
) -> tuple[list[PreparedFile], list[str], list[str]]:
    """A batch's files split by what they are now, under the write lock: those still as
    read (size and mtime), those changed since, and those no longer a regular file
    (deleted, a directory now), added to ``vanished``.

    A batch's texts are read before its write transaction takes the lock; a job submitted
    meanwhile (the watcher's, for the change) may have written or pruned the same files
    already, and this older read must not undo it: only the files still as read are
    written. Where no later job comes, the next reindex sees the change.
    """
    current: list[PreparedFile] = []
    changed: list[str] = []
    gone = list(vanished)
    for prepared in files:
        try:
            st = os.stat(_disk_path(base, prepared.rel_path))
        except (OSError, ValueError):
            gone.append(prepared.rel_path)
            continue
        if not stat.S_ISREG(st.st_mode):
            gone.append(prepared.rel_path)
        elif (st.st_mtime_ns, st.st_size) != (prepared.mtime_ns, prepared.size_bytes):
            changed.append(prepared.rel_path)
        else:
            current.append(prepared)
    return current, changed, gone


# -- the job steps ---------------------------------------------------------------------


@dataclass(slots=True)
class PlanOutcome:
    batches: int
    # The plan found nothing to send and finalized the job itself (no finalize message).
    finalized: bool = False


def plan(
    settings: Settings, request: JobStep, send_chunk: SendChunk, send_embed: SendEmbed
) -> PlanOutcome:
    """Plan the job once (persisted), then send every batch that still has work.

    A redelivered plan message (its worker died) finds the persisted plan and re-sends
    only what is unsettled: pending batches to be chunked, chunked batches to be embedded
    (rebuilt from the index, so a message lost between two steps is sent again). The
    later steps ignore a batch they already settled.

    A plan with nothing to send (no file changed) finalizes the job here: a finalize
    message would cost a queue round trip for the same idempotent work.
    """
    db_path, job_id = request.db_path, request.job_id
    conn = open_index(db_path)
    try:
        job = jobs.get_job(conn, job_id)
        if job is None or job.finished:
            return PlanOutcome(0)
        spec = JobSpec.from_dict(job.options)
        cfg = spec.settings_for(settings, db_path)
        label = embedder_label_for(cfg)
        if not job.planned and not _make_plan(conn, cfg, job, label):
            return PlanOutcome(0)
        # Batch by batch, a page of them read at a time: nothing holds every batch. The
        # chunk step reads the files (on the index host): no file text is queued.
        sent = 0
        for batch_no, paths in jobs.iter_batches(conn, job_id, "chunked"):
            embed_request = _embed_request(conn, db_path, job_id, batch_no, paths, label)
            send_embed(embed_request)
            sent += 1
        for batch_no, entries in jobs.iter_batch_files(conn, job_id, "pending"):
            sent += 1
            send_chunk(
                ChunkRequest(
                    db_path=db_path,
                    job_id=job_id,
                    batch_no=batch_no,
                    files=tuple(map(planned_file, entries)),
                    model=label,
                )
            )
        if sent:
            return PlanOutcome(sent)
    finally:
        conn.close()
    finalize(request)
    return PlanOutcome(0, finalized=True)


def planned_file(entry: jobs.BatchFile) -> PlannedFile:
    """A persisted batch's file entry as the chunk step checks it (a bare path: a plan
    that recorded no state, whatever is read is taken)."""
    if isinstance(entry, str):
        return PlannedFile(entry, 0, 0, "")
    path, mtime_ns, size_bytes, sha256 = entry
    return PlannedFile(str(path), int(mtime_ns), int(size_bytes), str(sha256))


def _make_plan(conn: sqlite3.Connection, cfg: Settings, job: jobs.JobRecord, label: str) -> bool:
    """Scan, diff and persist the job's batches, streamed (:mod:`rifflux.index.planner`);
    False if the job failed instead.

    Besides the changed files, files that are stored but still lack vectors (an earlier
    job failed in its vector phase) get batches that start at the vector phase.
    """
    job_id, spec = job.id, JobSpec.from_dict(job.options)
    with transaction(conn):
        jobs.update_job(conn, job_id, state="running", started_at=time.time())
    try:
        check_embedding_model(conn, label, force=spec.force)
        with transaction(conn):
            # Before the survey: switched on, every file lacks its grep rows (stale).
            grep_text.set_grep(conn, spec.grep_index)
        base_dir = resolve_base_dir(conn, cfg)
        found = stream_plan(
            conn,
            cfg,
            job_id,
            [Path(r) for r in job.roots],
            base_dir,
            force=spec.force,
            prune_missing=spec.prune_missing,
            scope=spec.scope,
        )
    except RiffluxError as exc:
        _fail_job(conn, job_id, str(exc))
        return False
    unembedded = found.unembedded
    embed_batches = [
        unembedded[i : i + EMBED_ONLY_BATCH_FILES]
        for i in range(0, len(unembedded), EMBED_ONLY_BATCH_FILES)
    ]
    with transaction(conn):
        current = jobs.get_job(conn, job_id)
        if current is not None and not current.planned:
            # (Otherwise another delivery of this plan message got here first.)
            jobs.add_batches(conn, job_id, embed_batches, first=found.batches, state="chunked")
            jobs.update_job(
                conn,
                job_id,
                planned=True,
                prune_paths=found.prune,
                skipped=found.skipped,
                files_total=found.files,
                files_planned=found.changed + len(unembedded),
                files_written=len(unembedded),
                batches_total=found.batches + len(embed_batches),
                batches_written=len(embed_batches),
                files_skipped=found.skipped_count + found.unchanged + found.metadata,
                files_unchanged=found.unchanged + found.metadata,
            )
            IndexWriter(conn).add_indexed_roots(found.root_prefixes)
    log.info(
        "job.planned",
        job_id=job_id,
        files=found.files,
        batches=found.batches,
        changed=found.changed,
        unchanged=found.unchanged,
        metadata_only=found.metadata,
        skipped=found.skipped_count,
        scoped=found.scope is not None,
        prune=len(found.prune),
        unembedded=len(unembedded),
    )
    return True


def _embed_request(
    conn: sqlite3.Connection,
    db_path: str,
    job_id: str,
    batch_no: int,
    paths: Sequence[str],
    label: str,
) -> EmbedRequest:
    """The texts of the batch's stored chunks that have no vector yet, read from the index
    (so a lost or redelivered message is rebuilt from what landed)."""
    return EmbedRequest(
        db_path=db_path,
        job_id=job_id,
        batch_no=batch_no,
        model=label,
        paths=tuple(paths),
        texts=texts_to_embed(conn, paths),
    )


def texts_to_embed(conn: sqlite3.Connection, paths: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(embed hash, text) of the stored chunks of ``paths`` that have no vector yet."""
    rows = IndexReader(conn).chunks_without_vectors(paths)
    return tuple((row[0], embedding_input(row[1], row[2])) for row in rows)


@dataclass(slots=True)
class RowsOutcome:
    """What follows a chunk step: the batch's embed requests (its units; none when no
    text lacks a vector), and whether the job can finalize (every batch settled)."""

    embeds: tuple[EmbedRequest, ...]
    ready: bool


def front_matter_skips(files: Sequence[PreparedFile]) -> list[dict[str, str]]:
    """``{path, reason}`` of the files whose front matter was malformed: indexed with the
    block as text, and listed among the job's skipped reasons (never a failed job)."""
    return [
        {"path": f.rel_path, "reason": f"{f.front_matter_problem}; indexed as text"}
        for f in files
        if f.front_matter_problem
    ]


def with_retries(request: R, retries: int) -> R:
    return dataclasses.replace(request, retries=retries)


def chunk(
    request: ChunkRequest,
    inline_embedder: Embedder | None = None,
    *,
    embed_workers: int = 1,
) -> RowsOutcome:
    """The lexical phase of one batch: read its files, chunk them and write their rows in
    one transaction with the job counts. The chunks are keyword-searchable when it
    commits; the texts without a vector go to the embed step, as
    :func:`~rifflux.index.units.units_for` units for ``embed_workers`` live embedding
    workers.

    The files are read here, on the index host (:func:`read_planned`): a file whose size
    or sha256 is no longer what the plan saw is not written (``CHANGED_WHILE_QUEUED``), as
    one changed between this read and the write is not (:func:`as_on_disk`).

    With ``inline_embedder`` (an embedder cheap enough to run in this step, the hash one,
    whose label is the job's model), the texts are embedded and their vectors written in
    the same transaction: the batch settles here, with no embed or vector message (their
    JSON, broker rows and second transaction were ~1/6 of a hash job). The texts are
    embedded before the write lock is taken (:func:`_embed_ahead`): the lock is what the
    workers queue on.

    Idempotent: a batch already past this phase (a redelivery) writes nothing; if it
    still waits for vectors its embed request is rebuilt from the index and sent again.
    """
    job_id, batch_no = request.job_id, request.batch_no
    paths = request.paths
    conn = tune_for_batch_writes(open_index(request.db_path))
    try:
        job = jobs.get_job(conn, job_id)
        if job is None or job.finished:
            # Cancelled, or failed by a write fault while its batches were in flight.
            return RowsOutcome((), False)
        state = jobs.batch_state(conn, job_id, batch_no)
        if state != "pending":
            if state == "chunked":
                model = request.model
                rebuilt = _embed_request(conn, request.db_path, job_id, batch_no, paths, model)
                return RowsOutcome((rebuilt,), False)
            return RowsOutcome((), state is not None and _ready(conn, job_id))
        spec = JobSpec.from_dict(job.options)
        base = IndexReader(conn).metadata("base_dir") or os.getcwd()
        works, changed_since_plan, vanished = read_planned(
            base,
            request.files,
            spec.max_file_bytes,
            [real(p) for p in job.roots],
            allow_secret_paths=spec.allow_secret_paths,
        )
        files = chunk_files(
            conn, works, max_chars=spec.max_chunk_chars, min_chars=spec.min_chunk_chars
        )
        inline = inline_embedder
        if inline is not None and inline.label != request.model:
            inline = None
        ahead = _embed_ahead(conn, files, inline, request.model) if inline is not None else {}
        retries = request.retries

        def count_busy_retry(_attempt: int, _exc: BaseException) -> None:
            nonlocal retries
            retries += 1

        with transaction(conn, on_retry=count_busy_retry):
            if jobs.batch_state(conn, job_id, batch_no) != "pending":
                return RowsOutcome((), False)  # A redelivery raced us and won.
            files, changed, vanished = as_on_disk(base, files, vanished)
            changed = changed_since_plan + changed
            writer = IndexWriter(conn)
            deleted = 0
            if spec.prune_missing:
                deleted = writer.delete_files([p for p in vanished if not is_regular(base, p)])
            # A job that will be optimized at its end merges no FTS5 segments before.
            defer = DEFAULT_POLICY.defers_merges(job.files_planned, files_stored_bound(conn))
            with merges_deferred(conn) if defer else nullcontext():
                stats = writer.write_rows(files, request.model)
            embed_request: EmbedRequest | None = None
            if inline is None:
                embed_request = _embed_request(
                    conn, request.db_path, job_id, batch_no, paths, request.model
                )
                texts = len(embed_request.texts)
                embedded = 0
            else:
                keys = writer.hashes_without_vectors(paths)
                texts = embedded = len(keys)
                if texts:
                    # A text without a vector ahead (one removed since the read) is
                    # embedded now, from the rows just written.
                    late: dict[str, bytes] = {}
                    if any(k not in ahead for k in keys):
                        missing = [(k, t) for k, t in texts_to_embed(conn, paths) if k not in ahead]
                        fresh = embed_texts(inline, missing)
                        late = encode_vectors(fresh)
                    blobs = {k: ahead[k] if k in ahead else late[k] for k in keys}
                    writer.write_blobs(request.model, inline.dim, blobs)
            done = texts == embedded
            jobs.mark_batch(conn, job_id, batch_no, "written" if done else "chunked")
            jobs.add_counts(
                conn,
                job_id,
                files_written=stats.files_written,
                chunks_written=stats.chunks_written,
                batches_written=1,
                chunks_to_embed=texts,
                files_skipped=len(vanished) + len(changed),
                files_deleted=deleted,
                files_done=stats.files_written if done else 0,
                chunks_embedded=embedded,
                batches_done=1 if done else 0,
                retries=retries,
            )
            jobs.add_errors(
                conn,
                job_id,
                [{"path": p, "error": "vanished before indexing"} for p in vanished]
                + [{"path": p, "error": CHANGED_WHILE_QUEUED} for p in changed],
            )
            jobs.add_skipped(conn, job_id, front_matter_skips(files), keep=MAX_SKIPPED_KEPT)
            ready = done and _ready(conn, job_id)
        log.info(
            "job.batch_chunked",
            job_id=job_id,
            batch=batch_no,
            files=stats.files_written,
            chunks=stats.chunks_written,
            vectors_reused=stats.vectors_reused,
            to_embed=texts,
        )
    finally:
        conn.close()
    if embedded and not ready:
        publish_if_due(request.db_path, job.started_at)
    if done or embed_request is None:
        return RowsOutcome((), ready)
    units = units_for(len(embed_request.texts), job.batches_total, embed_workers, batch_no)
    return RowsOutcome(embed_units(embed_request, units), ready)


def embed_units(request: EmbedRequest, units: int) -> tuple[EmbedRequest, ...]:
    """``request``'s texts as ``units`` embed requests (:func:`~rifflux.index.units.deal`);
    the request itself when one."""
    parts = deal(request.texts, units)
    if len(parts) == 1:
        return (request,)
    return tuple(
        dataclasses.replace(request, texts=part, unit=n, units=len(parts))
        for n, part in enumerate(parts)
    )


def _embed_ahead(
    conn: sqlite3.Connection, files: Sequence[PreparedFile], embedder: Embedder, model: str
) -> dict[str, bytes]:
    """The stored form (int8 rows, :func:`~rifflux.store.vector_blobs.encode_matrix`) of
    the vectors of the batch's chunk texts that have no ``model`` vector in the index
    yet, computed outside any write transaction. Which texts the batch really lacks is
    decided inside it (:meth:`~rifflux.store.reader.IndexReader.hashes_without_vectors`);
    a vector depends only on its text."""
    texts = {
        c.embed_sha256: embedding_input(c.heading_path, c.content) for f in files for c in f.chunks
    }
    stored = IndexReader(conn).reusable_vectors(sorted(texts), model) if texts else {}
    keys = [k for k in texts if k not in stored]
    if not keys:
        return {}
    return encode_matrix(keys, embedder.embed_batch([texts[k] for k in keys]))


def embed(request: EmbedRequest, embedder: Embedder) -> VectorsRequest:
    """Embed the request's texts in one batched call; returns the vector step's message."""
    if embedder.label != request.model:
        raise EmbeddingModelMismatch(
            f"this worker embeds with {embedder.label!r} but the job expects "
            f"{request.model!r}; start workers with the same RIFFLUX_EMBEDDING_BACKEND"
        )
    vectors = embed_texts(embedder, request.texts)
    return VectorsRequest(
        db_path=request.db_path,
        job_id=request.job_id,
        batch_no=request.batch_no,
        model=embedder.label,
        dim=embedder.dim,
        paths=request.paths,
        vectors=vectors,
        retries=request.retries,
        unit=request.unit,
        units=request.units,
    )


def write_vectors(request: VectorsRequest) -> bool:
    """The vector phase of one embed unit: attach its vectors, and settle its batch with
    the batch's last unit (:func:`~rifflux.store.jobs.mark_unit_written`), in one
    transaction with the job counts; True when this settled the job's last unsettled batch.

    A redelivered message changes nothing, but still answers whether the job is ready,
    so a finalize lost between two steps is sent again (finalizing is idempotent).
    """
    job_id, batch_no = request.job_id, request.batch_no
    # Quantized before the write lock is taken: the lock is what the workers queue on.
    blobs = encode_vectors(request.vectors)
    conn = tune_for_batch_writes(open_index(request.db_path))
    try:
        job = jobs.get_job(conn, job_id)
        if job is None or job.finished:
            return False
        retries = request.retries

        def count_busy_retry(_attempt: int, _exc: BaseException) -> None:
            nonlocal retries
            retries += 1

        with transaction(conn, on_retry=count_busy_retry):
            new, settled = jobs.mark_unit_written(
                conn, job_id, batch_no, request.unit, request.units
            )
            if not new:
                return jobs.batch_state(conn, job_id, batch_no) is not None and _ready(conn, job_id)
            added = IndexWriter(conn).write_blobs(request.model, request.dim, blobs)
            jobs.add_counts(
                conn,
                job_id,
                files_done=len(request.paths) if settled else 0,
                chunks_embedded=len(request.vectors),
                batches_done=1 if settled else 0,
                retries=retries,
            )
            ready = settled and _ready(conn, job_id)
        log.info(
            "job.batch_vectors_written",
            job_id=job_id,
            batch=batch_no,
            vectors=len(request.vectors),
            chunks_with_new_vectors=added,
        )
    finally:
        conn.close()
    if not ready:
        publish_if_due(request.db_path, job.started_at)
    return ready


_last_publish_seconds = 0.0
_publishing = threading.Lock()


def publish_if_due(db_path: str | Path, job_started_at: float | None = None) -> None:
    """Publish the vector cache while a job's vector phase runs, when it is due (see
    :data:`PUBLISH_EVERY_SECONDS`, counted from the last publish and from the job's start
    ``job_started_at``): semantic search sees new vectors in steps during a long job, not
    only when it ends; a job shorter than the interval publishes once, when its finalize
    does (a publish after the first batch of a 2.5 s hash job of awesome-copilot took
    0.08 s of its ~5 CPU-s, for rows the finalize published again a moment later).

    The publish runs in a background thread of this worker process and never waits for
    another publisher (the scale run measured a mid-job publish of 370k rows at 191 s
    under load: run inline, it held up this process's chunk and write steps, and the
    other process's waited for its lock). At most one runs per process.
    """
    manifest = vectors_dir(db_path) / MANIFEST_NAME
    due_after = max(PUBLISH_EVERY_SECONDS, PUBLISH_COST_FACTOR * _last_publish_seconds)
    now = time.time()
    try:
        age = now - manifest.stat().st_mtime
    except OSError:
        age = due_after
    if job_started_at is not None:
        age = min(age, now - job_started_at)
    if age < due_after or not _publishing.acquire(blocking=False):
        return
    threading.Thread(
        target=_publish_in_background,
        args=(db_path,),
        name="rifflux-publish",
        daemon=True,
    ).start()


def _publish_in_background(db_path: str | Path) -> None:
    """A mid-job publish: the vectors so far, scanned exactly. It builds no HNSW graph
    (whatever the job's ``vector_index``): the segments it writes are rewritten by the next
    publishes of a growing index, and a graph costs ~1 ms of CPU a row, so the 100k-file
    job built and threw away graphs it never searched; the finalize's publish builds the
    graphs of the segments that stay."""
    global _last_publish_seconds
    try:
        started = time.perf_counter()
        if publish(db_path, source="vectors", blocking=False, vector_index="exact") is not None:
            _last_publish_seconds = time.perf_counter() - started
    except Exception as exc:
        log.exception("vectors.publish_failed", db_path=str(db_path), error=str(exc))
    finally:
        _publishing.release()


def _ready(conn: sqlite3.Connection, job_id: str) -> bool:
    """True when the plan is persisted and no batch waits for rows or vectors."""
    job = jobs.get_job(conn, job_id)
    return job is not None and job.planned and jobs.unsettled_count(conn, job_id) == 0


def fail_batch(failure: BatchFailure) -> bool:
    """Record a batch that cannot be finished; True when the job can finalize.

    A batch that fails in its vector phase keeps its rows (keyword-searchable); the next
    job's plan finds its chunks without vectors and embeds them.
    """
    job_id, batch_no, paths = failure.job_id, failure.batch_no, failure.paths
    conn = open_index(failure.db_path)
    try:
        with transaction(conn):
            if jobs.mark_batch(conn, job_id, batch_no, "failed"):
                jobs.add_counts(conn, job_id, files_failed=len(paths), batches_done=1)
                jobs.add_errors(conn, job_id, [{"path": p, "error": failure.error} for p in paths])
                ready = _ready(conn, job_id)
            else:
                ready = False
        log.error(
            "job.batch_failed",
            job_id=job_id,
            batch=batch_no,
            paths=list(paths),
            error=failure.error,
        )
        return ready
    finally:
        conn.close()


def finalize(request: JobStep) -> jobs.JobRecord | None:
    """Prune vanished files and settle the job: completed, or failed if a batch failed.

    A job that wrote a large share of the index merges its FTS5 segments first
    (:func:`~rifflux.store.segments.merge_after_job`, beside the publish), so the job
    reads completed with the index compact; a small edit job does not pay for it.

    The vector cache is published before the job reads as completed, and again after the
    prune only if it deleted a file (otherwise the generation did not move). A job that
    changed nothing finds the cache as published (stat keys, ``trust_stamps``) and reads
    none of it.
    """
    db_path, job_id = request.db_path, request.job_id
    conn = open_index(db_path)
    try:
        job = jobs.get_job(conn, job_id)
        if job is None or job.finished:
            return job
        prune = list(job.prune_paths)
        vector_index = JobSpec.from_dict(job.options).vector_index
        # The finalize is the job's tail, one step on one core: the FTS5 merge (one SQLite
        # statement a table, which leaves the GIL) runs beside the publish (mostly Python
        # and numpy, on its own connection); the merge does not touch what a publish reads.
        _beside(
            lambda: merge_after_job(conn, job.chunks_written, job_id=job_id),
            lambda: publish_quietly(
                db_path, source="finalize", trust_stamps=True, vector_index=vector_index
            ),
        )
        deleted = 0
        with transaction(conn):
            current = jobs.get_job(conn, job_id)
            if current is not None and not current.finished:
                deleted = IndexWriter(conn).delete_files(prune)
                state = "failed" if current.files_failed else "completed"
                jobs.update_job(conn, job_id, state=state, finished_at=time.time())
                jobs.add_counts(conn, job_id, files_deleted=deleted)
        if deleted:
            publish_quietly(
                db_path, source="finalize", trust_stamps=True, vector_index=vector_index
            )
        record = jobs.get_job(conn, job_id)
        if record is not None:
            log.info(
                "job.finished",
                job_id=job_id,
                state=record.state,
                files_done=record.files_done,
                files_failed=record.files_failed,
                files_deleted=record.files_deleted,
                chunks_embedded=record.chunks_embedded,
                duration_s=record.duration_s,
            )
        return record
    finally:
        conn.close()


def _beside(work: Callable[[], object], meanwhile: Callable[[], object]) -> None:
    """Run ``work`` in a thread while ``meanwhile`` runs in this one, and wait for both;
    an exception of either is raised here (``meanwhile``'s first)."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # Raised again in the caller's thread.
            failed.append(exc)

    thread = threading.Thread(target=run, name="rifflux-beside", daemon=True)
    thread.start()
    try:
        meanwhile()
    finally:
        thread.join()
    if failed:
        raise failed[0]


def _fail_job(conn: sqlite3.Connection, job_id: str, error: str) -> None:
    jobs.fail_job(conn, job_id, error)
    log.error("job.failed", job_id=job_id, error=error)


def record_write_fault(db_path: str, job_id: str, reason: str) -> bool:
    """Fail the job with a write fault's one-line reason (:mod:`rifflux.store.faults`);
    True if the job row now says so. The write may fail too (the disk is still full):
    the caller retries, then reports the reason another way."""
    conn = open_index(db_path)
    try:
        jobs.fail_job(conn, job_id, reason)
        job = jobs.get_job(conn, job_id)
        return job is not None and job.finished
    finally:
        conn.close()


def fail_plan(request: JobStep, error: str) -> None:
    """Record a plan step that cannot succeed: the job fails with the error."""
    conn = open_index(request.db_path)
    try:
        job = jobs.get_job(conn, request.job_id)
        if job is not None and not job.finished:
            _fail_job(conn, request.job_id, error)
    finally:
        conn.close()
