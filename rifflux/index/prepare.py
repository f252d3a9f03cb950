"""Compute stages that never open the index: chunk a file, embed texts.

A chunk's embedded text (its breadcrumb and content) is identified by its sha256: the
writer reuses a stored vector of the same hash, so editing one section of a long file
embeds only that section's chunks.

A markdown file's front matter is split off first (rifflux.index.frontmatter): the chunker
sees only the body, so no field of the block reaches a chunk's content or embedding; its
``title`` still names the document in breadcrumbs. The fields and the file's
kind (rifflux.index.kinds) travel with the chunks as the file's ``knowledge`` row.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence

import numpy as np

from rifflux.embed.base import Embedder
from rifflux.index.changes import FileWork
from rifflux.index.chunker import chunk_document, chunk_ids_for, normalize_text
from rifflux.index.frontmatter import split_front_matter
from rifflux.index.kinds import classify
from rifflux.store import grep_text
from rifflux.store.rows import PreparedChunk, PreparedFile, headings_json


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
    """The file's chunks, without its front matter, its knowledge row, and its whole text
    (front matter included) with each chunk's first line, for grep."""
    front = split_front_matter(work.text, work.rel_path)
    text = normalize_text(work.text)
    parts = chunk_document(
        front.body, work.rel_path, max_chars=max_chars, min_chars=min_chars, title=front.title
    )
    ids = chunk_ids_for(work.rel_path, len(parts))
    chunks = [
        PreparedChunk(
            ids[chunk.chunk_index],
            chunk.chunk_index,
            chunk.heading_path,
            chunk.content,
            text_sha256(embedding_input(chunk.heading_path, chunk.content)),
            headings_json(chunk.headings),
        )
        for chunk in parts
    ]
    return PreparedFile(
        work.rel_path,
        work.mtime_ns,
        work.size_bytes,
        work.sha256,
        chunks,
        knowledge=classify(work.rel_path, front, [chunk.content for chunk in parts]),
        front_matter_problem=front.problem,
        text=text,
        # Front matter is blanked in the body, not cut (rifflux.index.frontmatter): its
        # line numbers are the file's.
        chunk_lines=tuple(grep_text.lines_at(front.body, [chunk.start for chunk in parts])),
        block_starts=tuple(grep_text.block_starts(text)),
    )


def chunk_files(
    conn: sqlite3.Connection, works: Sequence[FileWork], *, max_chars: int, min_chars: int
) -> list[PreparedFile]:
    """A batch's files as :func:`chunk_file` makes them, their grep blocks compressed with
    the index's dictionary (:func:`~rifflux.store.grep_text.compressed`): the CPU work of
    a batch, done before its write transaction takes the lock."""
    return grep_text.compressed(
        conn, [chunk_file(work, max_chars=max_chars, min_chars=min_chars) for work in works]
    )


def embed_texts(embedder: Embedder, texts: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
    """Embed ``(embed hash, text)`` pairs in one batched call: embed hash → vector."""
    if not texts:
        return {}
    matrix = embedder.embed_batch([text for _key, text in texts])
    return {key: matrix[row] for row, (key, _text) in enumerate(texts)}
