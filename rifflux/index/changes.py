"""Change detection: decide per file whether to skip, refresh metadata, or re-chunk.

mtime+size unchanged → skip without reading. Otherwise the file is read and hashed:
an unchanged sha256 only refreshes the stored mtime/size; a new hash (or ``force``)
re-chunks the file. Unindexable input (binary, too large, unreadable) is a skip with
a reason, never an exception that stops the run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from rifflux.index.scan import ScannedFile, is_under

DecisionKind = Literal["unchanged", "metadata", "index", "skip"]


class StoredFileState(NamedTuple):
    # A tuple, not a frozen dataclass: a plan builds one per stored file (100k: 0.05 s
    # against 0.14 s).
    mtime_ns: int
    size_bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class FileWork:
    """A file to (re-)chunk, with the exact text its hash was computed from."""

    rel_path: str
    mtime_ns: int
    size_bytes: int
    sha256: str
    text: str


@dataclass(frozen=True, slots=True)
class Decision:
    kind: DecisionKind
    rel_path: str
    mtime_ns: int = 0
    size_bytes: int = 0
    sha256: str = ""
    reason: str = ""
    work: FileWork | None = None


def decode_text(data: bytes) -> str | None:
    """UTF-8 text with invalid bytes replaced; ``None`` for binary data (NUL bytes)."""
    if b"\x00" in data:
        return None
    text = data.decode("utf-8", errors="replace")
    return text[1:] if text.startswith("\ufeff") else text


def decide(
    scanned: ScannedFile,
    stored: StoredFileState | None,
    *,
    force: bool,
    max_file_bytes: int,
) -> Decision:
    """What to do with one scanned file, reading it only when metadata changed."""
    path = scanned.rel_path
    if scanned.size_bytes > max_file_bytes:
        return Decision(
            "skip", path, reason=f"larger than {max_file_bytes} bytes ({scanned.size_bytes})"
        )
    if (
        not force
        and stored is not None
        and stored.mtime_ns == scanned.mtime_ns
        and stored.size_bytes == scanned.size_bytes
    ):
        return Decision("unchanged", path)
    try:
        with open(scanned.abs_path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        return Decision("skip", path, reason=f"unreadable: {exc.strerror or exc}")
    if len(data) > max_file_bytes:
        return Decision("skip", path, reason=f"larger than {max_file_bytes} bytes ({len(data)})")
    sha256 = hashlib.sha256(data).hexdigest()
    if not force and stored is not None and stored.sha256 == sha256:
        return Decision("metadata", path, scanned.mtime_ns, len(data), sha256)
    text = decode_text(data)
    if text is None:
        return Decision("skip", path, reason="binary file (contains NUL bytes)")
    work = FileWork(path, scanned.mtime_ns, len(data), sha256, text)
    return Decision("index", path, scanned.mtime_ns, len(data), sha256, work=work)


@dataclass(slots=True)
class Tally:
    """Where the decisions of one run went, apart from the files to (re-)chunk."""

    kept: set[str] = field(default_factory=set)
    skipped: list[Decision] = field(default_factory=list)
    metadata: list[Decision] = field(default_factory=list)
    unchanged: int = 0


def sort_decisions(decisions: Iterable[Decision], tally: Tally) -> Iterator[FileWork]:
    """Yield the files to (re-)chunk, lazily; record every other decision in ``tally``.

    ``kept`` gets every file still indexable (pruning spares those); a skipped file is
    not kept, so an index entry for it is pruned.
    """
    for decision in decisions:
        if decision.kind == "skip":
            tally.skipped.append(decision)
            continue
        tally.kept.add(decision.rel_path)
        if decision.kind == "unchanged":
            tally.unchanged += 1
        elif decision.kind == "metadata":
            tally.metadata.append(decision)
        elif decision.work is not None:
            yield decision.work


def paths_to_prune(
    stored_paths: Iterable[str], kept_paths: set[str], root_prefixes: Iterable[str]
) -> list[str]:
    """Stored files under the scanned roots that the scan no longer keeps, sorted."""
    prefixes = list(root_prefixes)
    return sorted(
        path
        for path in stored_paths
        if path not in kept_paths and any(is_under(path, prefix) for prefix in prefixes)
    )


def batch_by_bytes(works: Iterable[FileWork], target_bytes: int) -> Iterator[list[FileWork]]:
    """Group files into batches of about ``target_bytes`` of text (a big file goes alone)."""
    batch: list[FileWork] = []
    size = 0
    for work in works:
        if batch and size + work.size_bytes > target_bytes:
            yield batch
            batch, size = [], 0
        batch.append(work)
        size += work.size_bytes
    if batch:
        yield batch


def load_states(rows: Iterable[tuple[str, int, int, str]]) -> dict[str, StoredFileState]:
    """Index (path, mtime_ns, size_bytes, sha256) rows of ``files`` by path."""
    return {path: StoredFileState(mtime, size, sha) for path, mtime, size, sha in rows}
