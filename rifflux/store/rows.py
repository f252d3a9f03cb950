"""The rows a chunk step lands: a file with its chunks and its knowledge metadata.

Built by ``rifflux.index.prepare`` (chunking, front matter, kind detection) and written by
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
from json.encoder import encode_basestring
from typing import Any

KINDS: tuple[str, ...] = ("decision", "error", "note")
"""Document kinds (rifflux.index.kinds): a chunk is a decision when its file is one, an
error when it lies in an error section, a note otherwise."""


@dataclass(frozen=True, slots=True)
class PreparedChunk:
    chunk_id: str
    chunk_index: int
    heading_path: str
    content: str
    embed_sha256: str
    headings: str = "[]"  # JSON, see the module docstring (``headings_json``)


@dataclass(frozen=True, slots=True)
class ErrorPair:
    """One error section: its signature, its solution text and the chunks it spans."""

    heading_path: str
    signature: str
    solution: str
    first_chunk: int
    last_chunk: int


@dataclass(frozen=True, slots=True)
class FileKnowledge:
    """A file's front matter fields and detected kind (rifflux.store.knowledge's rows).

    ``version`` is the detection rules' version that produced it: a file stored with an
    older one is re-chunked by the next job even when unchanged.
    """

    version: int
    kind: str
    title: str = ""
    # Front matter's title, name, description and summary: searched as a file field.
    about: str = ""
    tags: tuple[str, ...] = ()
    doc_type: str = ""
    status: str = ""
    date: str = ""
    decision_type: str = ""
    decision: str = ""
    extra: str = "{}"
    errors: tuple[ErrorPair, ...] = ()


@dataclass(frozen=True, slots=True)
class PreparedFile:
    rel_path: str
    mtime_ns: int
    size_bytes: int
    sha256: str
    chunks: list[PreparedChunk]
    knowledge: FileKnowledge | None = None
    # Why the file's front matter was kept as text (malformed), for the job's skip list.
    front_matter_problem: str | None = None
    # The whole text as indexed (front matter included), where its trigram blocks start,
    # the 1-based line where each chunk starts, and the blocks Zstandard-compressed with
    # the dictionary they used (empty: none): the file's grep rows
    # (rifflux.store.grep_text; the blocks compressed by its ``compressed``, outside the
    # write lock). ``text`` None writes none.
    text: str | None = None
    chunk_lines: tuple[int, ...] = ()
    block_starts: tuple[int, ...] = ()
    block_blobs: tuple[bytes, ...] = ()
    dictionary: bytes = b""


def headings_json(headings: Sequence[tuple[int, str]]) -> str:
    """The ``headings`` column of a chunk: ``(offset, heading_path)`` pairs as JSON, the
    text of ``json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))`` built with
    json's own string encoder in half its CPU (one call per chunk)."""
    pairs = ",".join([f"[{offset},{encode_basestring(path)}]" for offset, path in headings])
    return f"[{pairs}]"


def headings_from_json(text: str | None) -> list[dict[str, Any]] | None:
    """A stored ``headings`` column as a list of ``{offset, heading_path}``; None when the
    row has none recorded (written by an older Rifflux)."""
    if text is None:
        return None
    return [{"offset": offset, "heading_path": path} for offset, path in json.loads(text)]
