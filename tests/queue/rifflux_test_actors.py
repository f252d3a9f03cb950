"""Worker module for failure-injection tests: the real actors, with a slower or poisoned
embed step selected by RIFFLUX_TEST_* variables. Run as ``dramatiq rifflux_test_actors``."""

from __future__ import annotations

import os
import time
from typing import Any

from rifflux.embed.base import Embedder
from rifflux.queue import tasks
from workers import actors

_real_embed = tasks.embed


def _embed(payload: dict[str, Any], embedder: Embedder) -> dict[str, Any]:
    time.sleep(float(os.environ.get("RIFFLUX_TEST_EMBED_DELAY", "0")))
    poison = os.environ.get("RIFFLUX_TEST_POISON")
    if poison and any(poison in f["rel_path"] for f in payload["files"]):
        raise RuntimeError(f"poisoned batch containing {poison}")
    return _real_embed(payload, embedder)


tasks.embed = _embed
actors.embed_batch.options["max_retries"] = int(os.environ.get("RIFFLUX_TEST_MAX_RETRIES", "5"))
actors.embed_batch.options["min_backoff"] = 50
actors.embed_batch.options["max_backoff"] = 200
