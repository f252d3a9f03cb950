"""The messages of a reindex job's steps: frozen dataclasses, encoded to JSON-safe dicts.

Every message that crosses the queue is one of these, sent as the actor's single
argument: ``to_dict()`` gives ``{"kind", "version", ...fields}``, and ``from_dict()``
checks both before reading a field, so a worker of another Rifflux version refuses a
message it would misread (:class:`~rifflux.errors.MessageVersionError`, which is never
retried) instead of guessing. Bump ``MESSAGE_VERSION`` with any change of a message's
fields or their meaning.

Vectors travel compactly: base64 of raw little-endian float32 (a 384-d vector is 2 KB).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from rifflux.errors import MessageVersionError
from rifflux.index.changes import FileWork
from rifflux.store.rows import PreparedBatch, PreparedChunk, PreparedFile

MESSAGE_VERSION = 1


def _check(data: Mapping[str, Any], kind: str) -> None:
    found_kind = data.get("kind") if isinstance(data, Mapping) else None
    if found_kind != kind:
        raise MessageVersionError(
            f"expected a {kind!r} message, got {found_kind!r}; run the workers and the "
            "front process from the same Rifflux version"
        )
    version = data.get("version")
    if version != MESSAGE_VERSION:
        raise MessageVersionError(
            f"{kind!r} message has version {version!r}, this Rifflux reads version "
            f"{MESSAGE_VERSION}; run the workers and the front process from the same "
            "Rifflux version"
        )


@dataclass(frozen=True, slots=True)
class JobStep:
    """Plan (or finalize) job ``job_id`` of the index at ``db_path``."""

    kind: str
    db_path: str
    job_id: str
    version: int = MESSAGE_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "version": self.version,
            "db_path": self.db_path,
            "job_id": self.job_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], kind: str) -> JobStep:
        _check(data, kind)
        return cls(kind, str(data["db_path"]), str(data["job_id"]))


def plan_request(db_path: str, job_id: str) -> JobStep:
    return JobStep("plan", db_path, job_id)


def finalize_request(db_path: str, job_id: str) -> JobStep:
    return JobStep("finalize", db_path, job_id)


@dataclass(frozen=True, slots=True)
class EmbedRequest:
    """One batch's file texts to chunk and embed; ``known`` embed hashes have vectors."""

    db_path: str
    job_id: str
    batch_no: int
    files: tuple[FileWork, ...]
    known: tuple[str, ...]
    model: str
    max_chunk_chars: int
    min_chunk_chars: int
    # Planned files that vanished or turned unindexable before they were read.
    vanished: tuple[str, ...] = ()
    version: int = MESSAGE_VERSION

    KIND: ClassVar[str] = "embed"

    @property
    def paths(self) -> list[str]:
        return [f.rel_path for f in self.files]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "version": self.version,
            "db_path": self.db_path,
            "job_id": self.job_id,
            "batch_no": self.batch_no,
            "files": [
                {
                    "rel_path": w.rel_path,
                    "mtime_ns": w.mtime_ns,
                    "size_bytes": w.size_bytes,
                    "sha256": w.sha256,
                    "text": w.text,
                }
                for w in self.files
            ],
            "known": list(self.known),
            "model": self.model,
            "max_chunk_chars": self.max_chunk_chars,
            "min_chunk_chars": self.min_chunk_chars,
            "vanished": list(self.vanished),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EmbedRequest:
        _check(data, cls.KIND)
        return cls(
            db_path=str(data["db_path"]),
            job_id=str(data["job_id"]),
            batch_no=int(data["batch_no"]),
            files=tuple(
                FileWork(
                    f["rel_path"], int(f["mtime_ns"]), int(f["size_bytes"]), f["sha256"], f["text"]
                )
                for f in data["files"]
            ),
            known=tuple(data["known"]),
            model=str(data["model"]),
            max_chunk_chars=int(data["max_chunk_chars"]),
            min_chunk_chars=int(data["min_chunk_chars"]),
            vanished=tuple(data["vanished"]),
        )


def encode_batch(batch: PreparedBatch) -> dict[str, Any]:
    """A JSON-safe dict; vectors travel as base64 of raw little-endian float32."""
    return {
        "model": batch.model,
        "dim": batch.dim,
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
            for f in batch.files
        ],
        "vectors": {
            key: base64.b64encode(vec.astype("<f4").tobytes()).decode("ascii")
            for key, vec in batch.vectors.items()
        },
    }


def decode_batch(data: Mapping[str, Any]) -> PreparedBatch:
    files = [
        PreparedFile(
            f["rel_path"],
            int(f["mtime_ns"]),
            int(f["size_bytes"]),
            f["sha256"],
            [PreparedChunk(c[0], int(c[1]), c[2], c[3], c[4]) for c in f["chunks"]],
        )
        for f in data["files"]
    ]
    vectors = {
        key: np.frombuffer(base64.b64decode(raw), dtype="<f4").astype(np.float32)
        for key, raw in data["vectors"].items()
    }
    return PreparedBatch(files, data["model"], int(data["dim"]), vectors)


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """One chunked and embedded batch to write; ``retries`` so far, for the job's count."""

    db_path: str
    job_id: str
    batch_no: int
    batch: PreparedBatch
    vanished: tuple[str, ...] = ()
    retries: int = 0
    version: int = MESSAGE_VERSION

    KIND: ClassVar[str] = "write"

    @property
    def paths(self) -> list[str]:
        return [f.rel_path for f in self.batch.files]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "version": self.version,
            "db_path": self.db_path,
            "job_id": self.job_id,
            "batch_no": self.batch_no,
            "batch": encode_batch(self.batch),
            "vanished": list(self.vanished),
            "retries": self.retries,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WriteRequest:
        _check(data, cls.KIND)
        return cls(
            db_path=str(data["db_path"]),
            job_id=str(data["job_id"]),
            batch_no=int(data["batch_no"]),
            batch=decode_batch(data["batch"]),
            vanished=tuple(data["vanished"]),
            retries=int(data["retries"]),
        )


@dataclass(frozen=True, slots=True)
class BatchFailure:
    """A batch that cannot be written: its files are recorded as failed with ``error``."""

    db_path: str
    job_id: str
    batch_no: int
    paths: tuple[str, ...]
    error: str
    version: int = MESSAGE_VERSION

    KIND: ClassVar[str] = "batch_failure"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "version": self.version,
            "db_path": self.db_path,
            "job_id": self.job_id,
            "batch_no": self.batch_no,
            "paths": list(self.paths),
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchFailure:
        _check(data, cls.KIND)
        return cls(
            db_path=str(data["db_path"]),
            job_id=str(data["job_id"]),
            batch_no=int(data["batch_no"]),
            paths=tuple(data["paths"]),
            error=str(data["error"]),
        )


def decode_batch_step(data: Mapping[str, Any]) -> EmbedRequest | WriteRequest:
    """An embed or write message (a batch's retries ran out in either step)."""
    kind = data.get("kind") if isinstance(data, Mapping) else None
    if kind == WriteRequest.KIND:
        return WriteRequest.from_dict(data)
    return EmbedRequest.from_dict(data)
