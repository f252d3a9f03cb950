"""Worker module for failure-injection tests: the real actors, with a slower or poisoned
embed step selected by RIFFLUX_TEST_* variables. Run as ``dramatiq rifflux_test_actors``.

RIFFLUX_TEST_EMBED_DIM gives the embed step an embedder of another dimension (so another
label) than the job's; RIFFLUX_TEST_EMBED_ATTEMPTS names a file that gets one line per
embed attempt."""

from __future__ import annotations

import os
import time
from typing import Any

from rifflux.embed.base import Embedder
from rifflux.embed.hashing import HashEmbedder
from rifflux.index import pipeline
from rifflux.index.messages import EmbedRequest, WriteRequest
from rifflux.store.writer import IndexWriter
from workers import actors

_real_embed = pipeline.embed


def _embed(request: EmbedRequest, embedder: Embedder) -> WriteRequest:
    attempts = os.environ.get("RIFFLUX_TEST_EMBED_ATTEMPTS")
    if attempts:
        with open(attempts, "a", encoding="utf-8") as out:
            out.write(f"{request.batch_no}\n")
    dim = os.environ.get("RIFFLUX_TEST_EMBED_DIM")
    if dim:
        embedder = HashEmbedder(int(dim))
    time.sleep(float(os.environ.get("RIFFLUX_TEST_EMBED_DELAY", "0")))
    poison = os.environ.get("RIFFLUX_TEST_POISON")
    if poison and any(poison in path for path in request.paths):
        raise RuntimeError(f"poisoned batch containing {poison}")
    return _real_embed(request, embedder)


pipeline.embed = _embed
actors.embed_batch.options["max_retries"] = int(os.environ.get("RIFFLUX_TEST_MAX_RETRIES", "5"))
actors.embed_batch.options["min_backoff"] = 50
actors.embed_batch.options["max_backoff"] = 200

_real_apply_batch = IndexWriter.apply_batch


def _apply_batch(writer: IndexWriter, batch: Any, *, also: Any = None, on_retry: Any = None) -> Any:
    """With RIFFLUX_TEST_WRITE_PAUSE_FILE: the first write to get here records its pid in
    that file and sleeps inside its transaction, after its rows are applied, so a test
    can kill -9 the process in the middle of the write."""
    marker = os.environ.get("RIFFLUX_TEST_WRITE_PAUSE_FILE")

    def also_then_pause(tx: Any) -> None:
        if also is not None:
            also(tx)
        if not marker:
            return
        try:
            os.close(os.open(marker + ".claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        with open(marker + ".tmp", "w", encoding="ascii") as out:
            out.write(str(os.getpid()))
        os.replace(marker + ".tmp", marker)
        time.sleep(600)

    return _real_apply_batch(writer, batch, also=also_then_pause, on_retry=on_retry)


IndexWriter.apply_batch = _apply_batch  # type: ignore[method-assign]
