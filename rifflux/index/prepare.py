"""Compute-anywhere stage: chunk files and embed only the chunk texts not yet embedded.

It never opens the index. The caller passes the embed hashes that already have vectors
(``known_hashes``); the writer reuses those vectors from the database, so editing one
section of a long file embeds only that section's chunks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from rifflux.embed.base import Embedder
from rifflux.index.changes import FileWork
from rifflux.index.chunker import chunk_document, chunk_id_for
from rifflux.store.rows import PreparedBatch, PreparedChunk, PreparedFile


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
