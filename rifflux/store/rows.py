"""The rows a write step lands: a batch of files, each with its chunks, and new vectors.

Built by ``rifflux.index.prepare`` (chunking and embedding, anywhere) and written by
:class:`~rifflux.store.writer.IndexWriter` (on the index host); plain data, so the store
layer needs nothing from the layers above it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


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


@dataclass(slots=True)
class PreparedBatch:
    files: list[PreparedFile]
    model: str
    dim: int
    # embed_sha256 → float32 row, for the texts embedded by this batch only.
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
