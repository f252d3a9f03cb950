"""A local pool's output: pumped into a rotating workers.log, cut where a line is huge,
and read for the write faults its workers announce."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rifflux.logs import RotatingFile
from rifflux.queue.pool_output import MAX_LINE_BYTES, PoolOutput, parse_fault

REASON = (
    "index write failed: database or disk is full (/x/index.db); "
    "free space and run rifflux index again"
)


def event(**fields: object) -> bytes:
    return json.dumps(fields).encode() + b"\n"


def test_only_write_fault_events_with_a_reason_are_faults() -> None:
    assert parse_fault(event(event="job.write_failed", job_id="j1", reason=REASON)) == (
        "j1",
        REASON,
    )
    assert parse_fault(event(event="queue.write_failed", reason=REASON)) == (None, REASON)
    assert parse_fault(event(event="job.write_failed", job_id="j1", reason="boom")) is None
    assert parse_fault(event(event="job.batch_chunked", note='x.write_failed"')) is None
    assert parse_fault(b'{"event": "job.write_failed", "reason": "index write failed: cut') is None


def test_the_pump_writes_every_line_cuts_huge_ones_and_keeps_announced_faults(
    tmp_path: Path,
) -> None:
    read_fd, write_fd = os.pipe()
    output = PoolOutput(os.fdopen(read_fd, "rb"), RotatingFile(tmp_path / "workers.log", 10**6))
    output.start()
    with os.fdopen(write_fd, "wb") as pool:
        pool.write(event(event="worker.booted"))
        pool.write(b"x" * (5 * MAX_LINE_BYTES) + b"\n")
        pool.write(event(event="job.write_failed", job_id="j1", reason=REASON))
        pool.write(event(event="queue.write_failed", reason=REASON))
        pool.write(event(event="job.batch_chunked"))
    output.join(timeout=10)
    lines = (tmp_path / "workers.log").read_bytes().splitlines()
    assert len(lines) == 5
    assert lines[1].endswith(f"[{4 * MAX_LINE_BYTES} bytes cut]".encode())
    assert len(lines[1]) < MAX_LINE_BYTES + 40
    assert output.fault_for("j1") == REASON
    # The queue's own fault counts for jobs created before it, not for one created after.
    assert output.fault_for("j2", created_at=time.time() - 60) == REASON
    assert output.fault_for("j3", created_at=time.time() + 1) is None
