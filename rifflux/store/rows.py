"""The rows a chunk step lands: a file with its chunks.

Built by ``rifflux.index.prepare`` (chunking) and written by
:class:`~rifflux.store.writer.IndexWriter` (on the index host); plain data, so the store
layer needs nothing from the layers above it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PreparedChunk:
    chunk_id: str
    chunk_index: int
    heading_path: str
    content: str
    embed_sha256: str


@dataclass(frozen=True, slots=True)
class PreparedFile:
    rel_path: str
    mtime_ns: int
    size_bytes: int
    sha256: str
    chunks: list[PreparedChunk]
