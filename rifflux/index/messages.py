"""The messages of a reindex job's steps: frozen dataclasses, encoded to JSON-safe dicts.

Every message that crosses the queue is one of these, sent as the actor's single
argument: ``to_dict()`` gives ``{"kind", "version", ...fields}``, and ``from_dict()``
checks both before reading a field, so a worker of another Rifflux version refuses a
message it would misread (:class:`~rifflux.errors.MessageVersionError`, which is never
retried) instead of guessing. Bump ``MESSAGE_VERSION`` with any change of a message's
fields or their meaning.

A batch crosses three messages, one per phase: ``ChunkRequest`` (the files as the plan saw
them, no text: the chunk step runs on the index host and reads them), ``EmbedRequest``
(texts that still lack a vector: the only text that travels, to whichever host embeds)
and ``VectorsRequest`` (the new vectors, keyed by the sha256 of the embedded text). A
batch's texts may go out as several embed units (``unit`` of ``units``), each its own
embed and vectors message, so that every worker of a large pool has one to embed.
The job's settings (chunk sizes, globs, the embedder: its
:class:`~rifflux.index.jobspec.JobSpec`) are not repeated here: the steps that need them
read them from the job record the message names. Vectors travel compactly: base64 of raw
little-endian float32 (a 384-d vector is 2 KB).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from rifflux.errors import MessageVersionError

MESSAGE_VERSION = 4


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


def _batch_header(message: Any) -> dict[str, Any]:
    """The fields every batch step's message starts with."""
    return {
        "kind": message.KIND,
        "version": message.version,
        "db_path": message.db_path,
        "job_id": message.job_id,
        "batch_no": message.batch_no,
    }


def _batch_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The common fields of a batch step's message, decoded."""
    return {
        "db_path": str(data["db_path"]),
        "job_id": str(data["job_id"]),
        "batch_no": int(data["batch_no"]),
    }


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
class PlannedFile:
    """A file as its job's plan saw it (``sha256`` empty: not recorded, any content is
    taken)."""

    rel_path: str
    mtime_ns: int
    size_bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class ChunkRequest:
    """One planned batch's files: read, chunk and write their rows (the lexical phase)."""

    db_path: str
    job_id: str
    batch_no: int
    files: tuple[PlannedFile, ...]
    model: str
    retries: int = 0
    version: int = MESSAGE_VERSION

    KIND: ClassVar[str] = "chunk"

    @property
    def paths(self) -> list[str]:
        return [f.rel_path for f in self.files]

    def to_dict(self) -> dict[str, Any]:
        return {
            **_batch_header(self),
            "files": [[f.rel_path, f.mtime_ns, f.size_bytes, f.sha256] for f in self.files],
            "model": self.model,
            "retries": self.retries,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChunkRequest:
        _check(data, cls.KIND)
        return cls(
            **_batch_fields(data),
            files=tuple(
                PlannedFile(str(path), int(mtime_ns), int(size_bytes), str(sha256))
                for path, mtime_ns, size_bytes, sha256 in data["files"]
            ),
            model=str(data["model"]),
            retries=int(data["retries"]),
        )


@dataclass(frozen=True, slots=True)
class EmbedRequest:
    """A written batch's texts that have no vector yet, or unit ``unit`` of ``units`` of
    them: ``texts`` maps embed hash → text.

    ``paths`` are the batch's files (for failure records); the embedder never opens
    the index.
    """

    db_path: str
    job_id: str
    batch_no: int
    model: str
    paths: tuple[str, ...]
    texts: tuple[tuple[str, str], ...]
    retries: int = 0
    unit: int = 0
    units: int = 1
    version: int = MESSAGE_VERSION

    KIND: ClassVar[str] = "embed"

    def to_dict(self) -> dict[str, Any]:
        return {
            **_batch_header(self),
            "model": self.model,
            "paths": list(self.paths),
            "texts": [list(pair) for pair in self.texts],
            "retries": self.retries,
            "unit": self.unit,
            "units": self.units,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EmbedRequest:
        _check(data, cls.KIND)
        return cls(
            **_batch_fields(data),
            model=str(data["model"]),
            paths=tuple(data["paths"]),
            texts=tuple((str(key), str(text)) for key, text in data["texts"]),
            retries=int(data["retries"]),
            unit=int(data["unit"]),
            units=int(data["units"]),
        )


def encode_vectors(vectors: Mapping[str, np.ndarray]) -> dict[str, str]:
    """embed hash → base64 of raw little-endian float32."""
    return {
        key: base64.b64encode(np.ascontiguousarray(vec, dtype="<f4").tobytes()).decode("ascii")
        for key, vec in vectors.items()
    }


def decode_vectors(data: Mapping[str, str]) -> dict[str, np.ndarray]:
    return {
        key: np.frombuffer(base64.b64decode(raw), dtype="<f4").astype(np.float32)
        for key, raw in data.items()
    }


@dataclass(frozen=True, slots=True)
class VectorsRequest:
    """A batch's new vectors (embed hash → float32 row), those of its embed unit ``unit``
    of ``units``, to attach to the chunks that have exactly that text; ``retries`` so
    far, for the job's count."""

    db_path: str
    job_id: str
    batch_no: int
    model: str
    dim: int
    paths: tuple[str, ...]
    vectors: dict[str, np.ndarray]
    retries: int = 0
    unit: int = 0
    units: int = 1
    version: int = MESSAGE_VERSION

    KIND: ClassVar[str] = "vectors"

    def to_dict(self) -> dict[str, Any]:
        return {
            **_batch_header(self),
            "model": self.model,
            "dim": self.dim,
            "paths": list(self.paths),
            "vectors": encode_vectors(self.vectors),
            "retries": self.retries,
            "unit": self.unit,
            "units": self.units,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VectorsRequest:
        _check(data, cls.KIND)
        return cls(
            **_batch_fields(data),
            model=str(data["model"]),
            dim=int(data["dim"]),
            paths=tuple(data["paths"]),
            vectors=decode_vectors(data["vectors"]),
            retries=int(data["retries"]),
            unit=int(data["unit"]),
            units=int(data["units"]),
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
            **_batch_header(self),
            "paths": list(self.paths),
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchFailure:
        _check(data, cls.KIND)
        return cls(
            **_batch_fields(data),
            paths=tuple(data["paths"]),
            error=str(data["error"]),
        )


BatchStep = ChunkRequest | EmbedRequest | VectorsRequest


def decode_batch_step(data: Mapping[str, Any]) -> BatchStep:
    """A chunk, embed or vectors message (a batch's retries ran out in that step)."""
    kind = data.get("kind") if isinstance(data, Mapping) else None
    if kind == VectorsRequest.KIND:
        return VectorsRequest.from_dict(data)
    if kind == EmbedRequest.KIND:
        return EmbedRequest.from_dict(data)
    return ChunkRequest.from_dict(data)
