"""The rows a chunk step lands: a file with its chunks.

Built by ``rifflux.index.prepare`` (chunking) and written by
:class:`~rifflux.store.writer.IndexWriter` (on the index host); plain data, so the store
layer needs nothing from the layers above it.

A chunk's ``headings`` column holds the headings that start in it, as JSON ``[offset,
breadcrumb]`` pairs: ``[[0, "Guide"], [17, "Guide > Install"]]``, offsets in characters
(code points) of its content, in order; ``[]`` when none starts in it (pairs rather than
objects: a quarter smaller on awesome-copilot). NULL (a row written before the column
existed) means not recorded: readers then know the chunk by its ``heading_path`` alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PreparedChunk:
    chunk_id: str
    chunk_index: int
    heading_path: str
    content: str
    embed_sha256: str
    headings: str = "[]"  # JSON, see the module docstring (``headings_json``)


@dataclass(frozen=True, slots=True)
class PreparedFile:
    rel_path: str
    mtime_ns: int
    size_bytes: int
    sha256: str
    chunks: list[PreparedChunk]


def headings_json(headings: Sequence[tuple[int, str]]) -> str:
    """The ``headings`` column of a chunk: ``(offset, heading_path)`` pairs as JSON."""
    pairs = [[offset, path] for offset, path in headings]
    return json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))


def headings_from_json(text: str | None) -> list[dict[str, Any]] | None:
    """A stored ``headings`` column as a list of ``{offset, heading_path}``; None when the
    row has none recorded (written by an older Rifflux)."""
    if text is None:
        return None
    return [{"offset": offset, "heading_path": path} for offset, path in json.loads(text)]
