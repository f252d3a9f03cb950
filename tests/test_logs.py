"""Log lines carry no content and never raise; the worker log rotates at its cap."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
import structlog
from dramatiq.broker import MessageProxy

from rifflux.logs import LOG_BACKUPS, RotatingFile, configure_logging

FILE_TEXT = "The secret recipe calls for saffron. " * 20_000  # ~740 KB, as a chunk message.


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """These tests point the process's logging at their own streams: put it back."""
    root = logging.getLogger()
    handlers, level, config = root.handlers[:], root.level, structlog.get_config()
    yield
    root.handlers, root.level = handlers, level
    structlog.configure(**config)


@pytest.fixture
def stderr(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """What a worker writes to stderr, with the workers' logging configuration."""
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    configure_logging("DEBUG", style="json")
    return stream


def test_dramatiq_logs_a_failed_message_by_name_and_id_not_by_its_text(
    stderr: io.StringIO,
) -> None:
    message = dramatiq.Message(
        queue_name="rifflux_write",
        actor_name="chunk_batch",
        args=({"files": [{"text": FILE_TEXT}]},),
        kwargs={},
        options={},
    )
    worker_log = logging.getLogger("dramatiq.worker.WorkerThread")
    try:
        raise RuntimeError("the batch failed")
    except RuntimeError:
        # Dramatiq's own calls (worker.py): the proxy's str() is the whole argument list.
        worker_log.error(
            "Failed to process message %s with unhandled exception.",
            MessageProxy(message),
            exc_info=True,
        )
    logging.getLogger("dramatiq.actor").debug("Received args=%r kwargs=%r.", message.args, {})
    structlog.get_logger().error(
        "job.step_failed", text=FILE_TEXT, paths=[f"p{i}" for i in range(99)]
    )
    out = stderr.getvalue().splitlines()
    assert len(out) == 3
    assert all(len(line) < 2_000 and "saffron" not in line[600:] for line in out)
    failed = json.loads(out[0])
    assert failed["event"] == (
        f"Failed to process message chunk_batch[{message.message_id}] with unhandled exception."
    )
    assert failed["exception"].endswith("RuntimeError: the batch failed")
    assert "saffron" not in out[0] and "saffron" not in out[1]
    step = json.loads(out[2])
    assert step["text"].endswith("chars cut]") and len(step["paths"]) == 21


def test_a_full_disk_or_a_closed_pipe_drops_the_line_instead_of_raising(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with open("/dev/full", "wb", buffering=0) as device:
        full = io.TextIOWrapper(device, write_through=True)
        monkeypatch.setattr("sys.stderr", full)
        configure_logging("INFO", style="json")
        structlog.get_logger().info("job.batch_chunked", files=3)
        logging.getLogger("dramatiq").warning("a warning")
        full.detach()


def test_the_worker_log_rotates_at_its_cap_and_keeps_a_few_backups(tmp_path: Path) -> None:
    log = RotatingFile(tmp_path / "workers.log", max_bytes=1_000)
    line = b'{"event": "job.batch_chunked", "batch": 1}\n'  # 43 bytes
    for _ in range(200):
        assert log.write(line)
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["workers.log", *(f"workers.log.{n}" for n in range(1, LOG_BACKUPS + 1))]
    for path in tmp_path.iterdir():
        assert 0 < path.stat().st_size <= 1_000
        assert path.read_bytes().endswith(b"\n")


def test_a_log_that_cannot_be_written_counts_the_lines_it_dropped() -> None:
    log = RotatingFile(Path("/dev/full"), max_bytes=1_000)
    assert not log.write(b"line\n") and not log.write(b"line\n")
    assert log.dropped == 2
