"""Job records: one row per reindex job in the index database, surviving restarts.

States move queued → running → completed | failed | cancelled. Counters are updated in
the same transaction as the index rows they describe, so a job's progress never
claims work that did not land.

A job row keeps what was submitted (``roots``, ``options``: the indexing settings) apart
from what its plan step found (``planned``, ``skipped``, ``prune_paths``, and the plan's
batches in ``job_batches``). Job records live beside the index rows they describe, so
they belong to the store: the pipeline (``rifflux.index``) and the queue front end
(``rifflux.queue``) both use them.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rifflux.store.connection import transaction
from rifflux.store.faults import is_write_fault_reason

FINISHED_STATES = ("completed", "failed", "cancelled")
# Keeps job rows bounded: errors beyond this many are counted, not listed.
MAX_ERRORS_KEPT = 200
# Columns stored as JSON text.
_JSON_COLUMNS = ("options", "errors", "roots", "skipped", "prune_paths")


@dataclass(slots=True)
class JobRecord:
    id: str
    roots: list[str]
    options: dict[str, Any]
    state: str
    files_total: int = 0
    files_done: int = 0
    files_skipped: int = 0
    files_failed: int = 0
    files_deleted: int = 0
    chunks_embedded: int = 0
    batches_total: int = 0
    batches_done: int = 0
    retries: int = 0
    errors: list[dict[str, str]] = field(default_factory=list)
    # Per phase: the plan's files; the lexical phase's files, chunks and batches written;
    # the vector phase's texts to embed. ``files_done``, ``chunks_embedded`` and
    # ``batches_done`` count what has finished both phases.
    files_planned: int = 0
    files_written: int = 0
    chunks_written: int = 0
    batches_written: int = 0
    chunks_to_embed: int = 0
    # Of ``files_skipped`` (every scanned file not rewritten), those left as they were:
    # unchanged, or only their mtime refreshed; the rest were not indexed (``skipped``).
    files_unchanged: int = 0
    # The plan step's results: persisted once, with the job's batches.
    planned: bool = False
    skipped: list[dict[str, str]] = field(default_factory=list)
    prune_paths: list[str] = field(default_factory=list)
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    updated_at: float = 0.0

    @property
    def duration_s(self) -> float:
        """Seconds from its start (else its creation) to its end (else its last update)."""
        ended = self.finished_at or self.updated_at
        began = self.started_at or self.created_at
        return round(max(0.0, ended - began), 3)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def write_fault(self) -> str | None:
        """The reason of a job failed by a write no retry fixes (a job-level error that
        :mod:`rifflux.store.faults` wrote), else None."""
        if self.state != "failed":
            return None
        return next(
            (
                e["error"]
                for e in self.errors
                if not e.get("path") and is_write_fault_reason(e.get("error", ""))
            ),
            None,
        )

    @property
    def phase(self) -> str:
        """The earliest phase with work left: ``queued``, ``scanning``, ``lexical``
        (chunking and writing keyword-searchable rows), ``embedding``, ``finalizing``, or
        ``done`` once the job is finished. Batches move through both phases on their own,
        so ``embedding`` can start while ``lexical`` is still the job's phase."""
        if self.finished:
            return "done"
        if self.state == "queued":
            return "queued"
        if not self.planned:
            return "scanning"
        if self.batches_written < self.batches_total:
            return "lexical"
        if self.batches_done < self.batches_total:
            return "embedding"
        return "finalizing"

    def phases(self) -> dict[str, dict[str, int]]:
        """Progress of each phase: files (and chunks) done out of the plan's."""
        return {
            "lexical": {
                "files_done": self.files_written,
                "files_total": self.files_planned,
                "chunks_done": self.chunks_written,
            },
            "embedding": {
                "files_done": self.files_done,
                "files_total": self.files_planned,
                "chunks_done": self.chunks_embedded,
                "chunks_total": self.chunks_to_embed,
            },
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.id,
            "roots": self.roots,
            "state": self.state,
            "files_total": self.files_total,
            "files_done": self.files_done,
            "files_skipped": self.files_skipped,
            "files_unchanged": self.files_unchanged,
            "files_failed": self.files_failed,
            "files_deleted": self.files_deleted,
            "chunks_embedded": self.chunks_embedded,
            "batches_total": self.batches_total,
            "batches_done": self.batches_done,
            "retries": self.retries,
            "errors": self.errors,
            "phase": self.phase,
            "phases": self.phases(),
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }


def _record(row: sqlite3.Row) -> JobRecord:
    columns = row.keys()  # (``in row`` would test its values)
    return JobRecord(
        id=row["id"],
        roots=json.loads(row["roots"]),
        options=json.loads(row["options"]),
        state=row["state"],
        files_total=row["files_total"],
        files_done=row["files_done"],
        files_skipped=row["files_skipped"],
        files_failed=row["files_failed"],
        files_deleted=row["files_deleted"],
        chunks_embedded=row["chunks_embedded"],
        batches_total=row["batches_total"],
        batches_done=row["batches_done"],
        retries=row["retries"],
        errors=json.loads(row["errors"]),
        files_planned=row["files_planned"],
        files_written=row["files_written"],
        chunks_written=row["chunks_written"],
        batches_written=row["batches_written"],
        chunks_to_embed=row["chunks_to_embed"],
        # A read-only reader of an index no writer has opened since the column came.
        files_unchanged=row["files_unchanged"] if "files_unchanged" in columns else 0,
        planned=bool(row["planned"]),
        skipped=json.loads(row["skipped"]),
        prune_paths=json.loads(row["prune_paths"]),
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        updated_at=row["updated_at"],
    )


def create_job(conn: sqlite3.Connection, roots: Sequence[str], options: dict[str, Any]) -> str:
    job_id = uuid.uuid4().hex
    now = time.time()

    with transaction(conn):
        conn.execute(
            "INSERT INTO jobs(id, roots, options, state, created_at, updated_at) "
            "VALUES (?, ?, ?, 'queued', ?, ?)",
            (job_id, json.dumps(list(roots)), json.dumps(options), now, now),
        )
    return job_id


def get_job(conn: sqlite3.Connection, job_id: str) -> JobRecord | None:
    row = conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return _record(row) if row else None


def recent_jobs(conn: sqlite3.Connection, limit: int = 10) -> list[JobRecord]:
    rows = conn.execute(
        "SELECT * FROM jobs ORDER BY created_at DESC, id LIMIT ?", (limit,)
    ).fetchall()
    return [_record(row) for row in rows]


def unfinished_job_ids(conn: sqlite3.Connection) -> list[str]:
    """Ids of the jobs still queued or running, oldest first."""
    rows = conn.execute(
        "SELECT id FROM jobs WHERE state IN ('queued', 'running') ORDER BY created_at, id"
    ).fetchall()
    return [row["id"] for row in rows]


def unfinished_job_for(
    conn: sqlite3.Connection, roots: Sequence[str], options: Mapping[str, Any]
) -> str | None:
    """The newest job still queued or running with exactly these roots and options (as
    stored: JSON), or None."""
    wanted_roots, wanted_options = list(roots), json.loads(json.dumps(dict(options)))
    rows = conn.execute(
        "SELECT id, roots, options FROM jobs WHERE state IN ('queued', 'running') "
        "ORDER BY created_at DESC, id"
    ).fetchall()
    for row in rows:
        same = json.loads(row["roots"]) == wanted_roots
        if same and json.loads(row["options"]) == wanted_options:
            return str(row["id"])
    return None


def update_job(conn: sqlite3.Connection, job_id: str, **fields: Any) -> None:
    """Set columns of a job (call inside a write transaction)."""
    if not fields:
        return
    encoded = {
        key: json.dumps(value) if key in _JSON_COLUMNS else value for key, value in fields.items()
    }
    encoded["updated_at"] = time.time()
    assignments = ", ".join(f"{key} = ?" for key in encoded)
    conn.execute(f"UPDATE jobs SET {assignments} WHERE id = ?", (*encoded.values(), job_id))


def add_counts(conn: sqlite3.Connection, job_id: str, **deltas: int) -> None:
    """Increment counters of a job (call inside a write transaction)."""
    if not deltas:
        return
    assignments = ", ".join(f"{key} = {key} + ?" for key in deltas)
    conn.execute(
        f"UPDATE jobs SET {assignments}, updated_at = ? WHERE id = ?",
        (*deltas.values(), time.time(), job_id),
    )


def add_errors(conn: sqlite3.Connection, job_id: str, errors: Sequence[dict[str, str]]) -> None:
    """Append ``{"path", "error"}`` entries (call inside a write transaction)."""
    if not errors:
        return
    row = conn.execute("SELECT errors FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        return
    kept = json.loads(row["errors"])
    kept.extend(errors)
    update_job(conn, job_id, errors=kept[:MAX_ERRORS_KEPT])


def add_skipped(
    conn: sqlite3.Connection, job_id: str, entries: Sequence[dict[str, str]], *, keep: int
) -> None:
    """Append ``{"path", "reason"}`` entries to the job's skipped list, keeping at most
    ``keep`` (call inside a write transaction)."""
    if not entries:
        return
    row = conn.execute("SELECT skipped FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        return
    kept = json.loads(row["skipped"])
    kept.extend(entries)
    update_job(conn, job_id, skipped=kept[:keep])


# A batch's states: ``pending`` (planned) → ``chunked`` (its rows are written and
# keyword-searchable; some texts still wait for vectors) → ``written`` (every vector in)
# or ``failed``. A batch whose texts all had vectors goes from pending to written.
UNSETTLED_STATES = ("pending", "chunked")

BatchFile = str | list[Any]
"""A file of a persisted batch: its stored path, or ``[path, mtime_ns, size_bytes,
sha256]`` as the plan saw it (the chunk step reads the file and indexes it only if its
size and sha256 are still those)."""


def add_batches(
    conn: sqlite3.Connection,
    job_id: str,
    batches: Sequence[Sequence[BatchFile]],
    *,
    first: int = 0,
    state: str = "pending",
) -> None:
    """Persist a job's plan: batch ``first + n`` holds the files ``batches[n]`` (in a
    transaction), each a path or a :data:`BatchFile` with the state the plan saw."""
    conn.executemany(
        "INSERT OR IGNORE INTO job_batches(job_id, batch_no, state, files) VALUES (?, ?, ?, ?)",
        [(job_id, first + n, state, json.dumps(list(files))) for n, files in enumerate(batches)],
    )


def batch_path(entry: BatchFile) -> str:
    """The stored path of a batch's file entry."""
    return entry if isinstance(entry, str) else str(entry[0])


def batches_in(conn: sqlite3.Connection, job_id: str, state: str) -> list[tuple[int, list[str]]]:
    """(batch_no, paths) of the job's batches in ``state``, by number."""
    rows = conn.execute(
        "SELECT batch_no, files FROM job_batches WHERE job_id = ? AND state = ? ORDER BY batch_no",
        (job_id, state),
    ).fetchall()
    return [(int(row["batch_no"]), list(map(batch_path, json.loads(row["files"])))) for row in rows]


def iter_batches(
    conn: sqlite3.Connection, job_id: str, state: str, *, page: int = 8
) -> Iterator[tuple[int, list[str]]]:
    """:func:`batches_in`, lazily: ``page`` batches per read, so a plan sending a
    100k-file job holds one page of paths, not all of them."""
    for batch_no, files in iter_batch_files(conn, job_id, state, page=page):
        yield batch_no, list(map(batch_path, files))


def iter_batch_files(
    conn: sqlite3.Connection, job_id: str, state: str, *, page: int = 8
) -> Iterator[tuple[int, list[BatchFile]]]:
    """:func:`iter_batches` with each file's entry as the plan stored it (a path, or a
    :data:`BatchFile` with its size, mtime and sha256)."""
    after = -1
    while True:
        rows = conn.execute(
            "SELECT batch_no, files FROM job_batches WHERE job_id = ? AND state = ? "
            "AND batch_no > ? ORDER BY batch_no LIMIT ?",
            (job_id, state, after, page),
        ).fetchall()
        for row in rows:
            yield int(row["batch_no"]), json.loads(row["files"])
        if len(rows) < page:
            return
        after = int(rows[-1]["batch_no"])


def delete_batches(conn: sqlite3.Connection, job_id: str) -> None:
    """Forget a job's batches (those of a plan that died before the job read planned)."""
    conn.execute("DELETE FROM job_batches WHERE job_id = ?", (job_id,))


def unsettled_count(conn: sqlite3.Connection, job_id: str) -> int:
    """Batches of the job that still wait for rows or vectors."""
    row = conn.execute(
        "SELECT COUNT(*) FROM job_batches WHERE job_id = ? AND state IN (?, ?)",
        (job_id, *UNSETTLED_STATES),
    ).fetchone()
    return int(row[0])


def mark_batch(
    conn: sqlite3.Connection,
    job_id: str,
    batch_no: int,
    state: str,
    *,
    from_states: Sequence[str] = UNSETTLED_STATES,
) -> bool:
    """Move a batch to ``state`` from one of ``from_states``, once; False if it was not in
    one of them (a redelivery)."""
    marks = ",".join("?" * len(from_states))
    cursor = conn.execute(
        f"UPDATE job_batches SET state = ? WHERE job_id = ? AND batch_no = ? "
        f"AND state IN ({marks})",
        (state, job_id, batch_no, *from_states),
    )
    return cursor.rowcount == 1


def batch_state(conn: sqlite3.Connection, job_id: str, batch_no: int) -> str | None:
    row = conn.execute(
        "SELECT state FROM job_batches WHERE job_id = ? AND batch_no = ?", (job_id, batch_no)
    ).fetchone()
    return str(row["state"]) if row is not None else None


def mark_unit_written(
    conn: sqlite3.Connection, job_id: str, batch_no: int, unit: int, units: int
) -> tuple[bool, bool]:
    """Record that embed unit ``unit`` of ``units`` of a chunked batch has its vectors
    written; (whether this unit was new, whether the batch is now written).

    Each unit is a bit of ``units_done``, so a redelivered unit changes nothing; the batch
    moves to ``written`` with its last unit. A batch's only unit (``units`` 1: also what
    a plan or chunk redelivery rebuilds from the texts still lacking vectors) settles it
    whatever the bits say. A batch that is not ``chunked`` (failed, or written already)
    takes no unit. Call inside a transaction.
    """
    row = conn.execute(
        "SELECT state, units_done FROM job_batches WHERE job_id = ? AND batch_no = ?",
        (job_id, batch_no),
    ).fetchone()
    if row is None or row["state"] != "chunked":
        return False, False
    bit = 1 << unit
    done = int(row["units_done"])
    if units > 1 and done & bit:
        return False, False
    done |= bit
    complete = units <= 1 or done == (1 << units) - 1
    conn.execute(
        "UPDATE job_batches SET units_done = ?, state = ? WHERE job_id = ? AND batch_no = ?",
        (done, "written" if complete else "chunked", job_id, batch_no),
    )
    return True, complete


def cancel_job(conn: sqlite3.Connection, job_id: str) -> bool:
    with transaction(conn):
        job = get_job(conn, job_id)
        if job is None or job.finished:
            return False
        update_job(conn, job_id, state="cancelled", finished_at=time.time())
        return True


def fail_job(conn: sqlite3.Connection, job_id: str, error: str) -> bool:
    """Fail an unfinished job with a job-level ``error``; False if it had finished."""
    with transaction(conn):
        job = get_job(conn, job_id)
        if job is None or job.finished:
            return False
        add_errors(conn, job_id, [{"path": "", "error": error}])
        update_job(conn, job_id, state="failed", finished_at=time.time())
        return True


def delete_job(conn: sqlite3.Connection, job_id: str) -> None:
    """Remove a job that was never enqueued (its submit failed), batches and all."""
    with transaction(conn):
        conn.execute("DELETE FROM job_batches WHERE job_id = ?", (job_id,))
        conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
