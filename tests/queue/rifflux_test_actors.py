"""Worker module for failure-injection tests: the real actors, with a slower or poisoned
embed step selected by RIFFLUX_TEST_* variables. Run as ``dramatiq rifflux_test_actors``.

RIFFLUX_TEST_EMBED_DIM gives the embed step an embedder of another dimension (so another
label) than the job's; RIFFLUX_TEST_EMBED_ATTEMPTS names a file that gets one line per
embed attempt; with RIFFLUX_TEST_EMBED_GATE every embed waits until that file exists
(the vector phase is held back); RIFFLUX_TEST_WRITE_PAUSE_FILE pauses the first write of
the phase RIFFLUX_TEST_WRITE_PAUSE_PHASE (``rows`` or ``vectors``) inside its transaction;
RIFFLUX_TEST_FSIZE_LIMIT caps the size of every file the worker process writes
(``RLIMIT_FSIZE``, with SIGXFSZ ignored so that a write past it fails with EFBIG: a disk
that is full for the workers only)."""

from __future__ import annotations

import os
import resource
import signal
import time
from typing import Any

from rifflux.embed.base import Embedder
from rifflux.embed.hashing import HashEmbedder
from rifflux.index import pipeline
from rifflux.index.messages import EmbedRequest, VectorsRequest
from rifflux.store.writer import IndexWriter
from workers import actors

_real_embed = pipeline.embed

if os.environ.get("RIFFLUX_TEST_FSIZE_LIMIT"):
    _limit = int(os.environ["RIFFLUX_TEST_FSIZE_LIMIT"])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (_limit, _limit))


def _embed(request: EmbedRequest, embedder: Embedder) -> VectorsRequest:
    attempts = os.environ.get("RIFFLUX_TEST_EMBED_ATTEMPTS")
    if attempts:
        with open(attempts, "a", encoding="utf-8") as out:
            out.write(f"{request.batch_no}\n")
    dim = os.environ.get("RIFFLUX_TEST_EMBED_DIM")
    if dim:
        embedder = HashEmbedder(int(dim))
    time.sleep(float(os.environ.get("RIFFLUX_TEST_EMBED_DELAY", "0")))
    gate = os.environ.get("RIFFLUX_TEST_EMBED_GATE")
    while gate and not os.path.exists(gate):
        time.sleep(0.05)
    poison = os.environ.get("RIFFLUX_TEST_POISON")
    if poison and any(poison in path for path in request.paths):
        raise RuntimeError(f"poisoned batch containing {poison}")
    return _real_embed(request, embedder)


pipeline.embed = _embed
# The failures injected here are the embed step's: keep it, though the hash embedder
# would otherwise run inside the chunk step (actors.inline_embedder).
actors.inline_embedder = lambda: None
actors.embed_batch.options["max_retries"] = int(os.environ.get("RIFFLUX_TEST_MAX_RETRIES", "5"))
actors.embed_batch.options["min_backoff"] = 50
actors.embed_batch.options["max_backoff"] = 200


def _pause_once(marker: str) -> None:
    """The first caller records its pid in ``marker`` and sleeps (inside the caller's
    transaction), so a test can kill -9 the process in the middle of a write."""
    try:
        os.close(os.open(marker + ".claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    with open(marker + ".tmp", "w", encoding="ascii") as out:
        out.write(str(os.getpid()))
    os.replace(marker + ".tmp", marker)
    time.sleep(600)


_real_write_rows = IndexWriter.write_rows
_real_write_blobs = IndexWriter.write_blobs


def _write_rows(writer: IndexWriter, files: Any, model: str) -> Any:
    """With RIFFLUX_TEST_WRITE_PAUSE_FILE and RIFFLUX_TEST_WRITE_PAUSE_PHASE=rows: pause in
    the lexical phase's transaction, after the rows are applied."""
    stats = _real_write_rows(writer, files, model)
    marker = os.environ.get("RIFFLUX_TEST_WRITE_PAUSE_FILE")
    if marker and os.environ.get("RIFFLUX_TEST_WRITE_PAUSE_PHASE", "vectors") == "rows":
        _pause_once(marker)
    return stats


def _write_blobs(writer: IndexWriter, model: str, dim: int, blobs: Any) -> int:
    """With RIFFLUX_TEST_WRITE_PAUSE_FILE (phase ``vectors``, the default): pause in the
    vector phase's transaction, after the vectors are applied."""
    added = _real_write_blobs(writer, model, dim, blobs)
    marker = os.environ.get("RIFFLUX_TEST_WRITE_PAUSE_FILE")
    if marker and os.environ.get("RIFFLUX_TEST_WRITE_PAUSE_PHASE", "vectors") == "vectors":
        _pause_once(marker)
    return added


IndexWriter.write_rows = _write_rows  # type: ignore[method-assign]
IndexWriter.write_blobs = _write_blobs  # type: ignore[method-assign]
