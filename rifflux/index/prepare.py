"""Compute-anywhere stage: chunk files and embed only the chunk texts not yet embedded.

It never opens the index. The caller passes the embed hashes that already have vectors
(``known_hashes``); the writer reuses those vectors from the database, so editing one
section of a long file embeds only that section's chunks.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rifflux.embed.base import Embedder
from rifflux.index.changes import FileWork
from rifflux.index.chunker import chunk_document, chunk_id_for


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

    def to_payload(self) -> dict[str, Any]:
        """A JSON-safe dict; vectors travel as base64 of raw little-endian float32."""
        return {
            "model": self.model,
            "dim": self.dim,
            "files": [
                {
                    "rel_path": f.rel_path,
                    "mtime_ns": f.mtime_ns,
                    "size_bytes": f.size_bytes,
                    "sha256": f.sha256,
                    "chunks": [
                        [c.chunk_id, c.chunk_index, c.heading_path, c.content, c.embed_sha256]
                        for c in f.chunks
                    ],
                }
                for f in self.files
            ],
            "vectors": {
                key: base64.b64encode(vec.astype("<f4").tobytes()).decode("ascii")
                for key, vec in self.vectors.items()
            },
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> PreparedBatch:
        files = [
            PreparedFile(
                f["rel_path"],
                int(f["mtime_ns"]),
                int(f["size_bytes"]),
                f["sha256"],
                [PreparedChunk(c[0], int(c[1]), c[2], c[3], c[4]) for c in f["chunks"]],
            )
            for f in payload["files"]
        ]
        vectors = {
            key: np.frombuffer(base64.b64decode(raw), dtype="<f4").astype(np.float32)
            for key, raw in payload["vectors"].items()
        }
        return cls(files, payload["model"], int(payload["dim"]), vectors)


def embedding_input(heading_path: str, content: str) -> str:
    """The text given to the embedder for one chunk.

    A chunk that does not open with a heading continues a section whose heading is in an
    earlier chunk: its heading breadcrumb goes first, so its vector knows the section.
    """
    if heading_path and not content.startswith("#"):
        return f"{heading_path}\n\n{content}"
    return content


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chunk_file(work: FileWork, *, max_chars: int, min_chars: int) -> PreparedFile:
    chunks = [
        PreparedChunk(
            chunk_id_for(work.rel_path, chunk.chunk_index),
            chunk.chunk_index,
            chunk.heading_path,
            chunk.content,
            text_sha256(embedding_input(chunk.heading_path, chunk.content)),
        )
        for chunk in chunk_document(
            work.text, work.rel_path, max_chars=max_chars, min_chars=min_chars
        )
    ]
    return PreparedFile(work.rel_path, work.mtime_ns, work.size_bytes, work.sha256, chunks)


def prepare_batch(
    works: Sequence[FileWork],
    *,
    embedder: Embedder,
    max_chars: int,
    min_chars: int,
    known_hashes: Iterable[str] = (),
) -> PreparedBatch:
    """Chunk ``works`` and embed, in one batched call, every text not in ``known_hashes``."""
    files = [chunk_file(work, max_chars=max_chars, min_chars=min_chars) for work in works]
    known = set(known_hashes)
    pending: dict[str, str] = {}
    for prepared in files:
        for chunk in prepared.chunks:
            if chunk.embed_sha256 not in known and chunk.embed_sha256 not in pending:
                pending[chunk.embed_sha256] = embedding_input(chunk.heading_path, chunk.content)
    batch = PreparedBatch(files, embedder.label, embedder.dim)
    if pending:
        matrix = embedder.embed_batch(list(pending.values()))
        batch.vectors = {key: matrix[row] for row, key in enumerate(pending)}
    return batch
