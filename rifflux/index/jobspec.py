"""A reindex job's settings as one value: built once where the job is submitted, stored
with the job, read by every worker step.

Invariants:

- Every setting that shapes a job's rows (what is scanned, how files are read and
  chunked, how batches are cut, which embedder labels the vectors, how the vector cache
  is published) is a field here. A worker builds the settings of a job with
  :meth:`JobSpec.settings_for` from the spec in the job record, never from its own
  environment, so a worker started with other ``RIFFLUX_*`` values still indexes the job
  exactly as submitted.
- The spec travels by reference: it is stored once in the job row (``jobs.options``)
  and the messages name the job; only the index host's steps (plan, chunk, write,
  finalize), which open the job's index anyway, read it.
- A job may be scoped: ``scope`` lists the paths under its roots that changed (the
  watcher's jobs), and its plan then scans only those where that is exact
  (:mod:`rifflux.index.planner`). A spec without a scope stores no ``scope`` key, so a
  worker of an older version reads a scoped job as a job of its whole roots: more work,
  the same rows.
- It is versioned. A job row written before the spec existed (no ``version``) or
  without a later field decodes with today's defaults (:class:`Settings`'s), so an
  unfinished job survives an upgrade.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from rifflux.config import Settings

SPEC_VERSION = 1

_DEFAULTS = Settings()


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a reindex job does and how: see the module docstring."""

    force: bool = False
    prune_missing: bool = True
    include_globs: tuple[str, ...] = _DEFAULTS.include_globs
    exclude_globs: tuple[str, ...] = _DEFAULTS.exclude_globs
    max_file_bytes: int = _DEFAULTS.max_file_bytes
    max_chunk_chars: int = _DEFAULTS.max_chunk_chars
    min_chunk_chars: int = _DEFAULTS.min_chunk_chars
    batch_target_bytes: int = _DEFAULTS.batch_target_bytes
    # Stored paths are relative to it; None: the index's recorded base (or the cwd).
    base_dir: str | None = None
    allow_secret_paths: bool = _DEFAULTS.allow_secret_paths
    # Whether the index keeps the grep rows (rifflux.store.grep_text).
    grep_index: bool = _DEFAULTS.grep_index
    # The embedder identity: with ``auto`` the label is resolved where the plan runs.
    embedding_backend: str = _DEFAULTS.embedding_backend
    hash_embedding_dim: int = _DEFAULTS.hash_embedding_dim
    # How the job's publishes build the vector cache (auto, exact, hnsw).
    vector_index: str = _DEFAULTS.vector_index
    # Absolute paths under the roots that changed; None: the whole roots.
    scope: tuple[str, ...] | None = None
    version: int = SPEC_VERSION

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        force: bool = False,
        prune_missing: bool = True,
        scope: tuple[str, ...] | None = None,
    ) -> JobSpec:
        """The spec of a job submitted by a process configured with ``settings``."""
        return cls(
            force=force,
            prune_missing=prune_missing,
            scope=scope,
            include_globs=tuple(settings.include_globs),
            exclude_globs=tuple(settings.exclude_globs),
            max_file_bytes=settings.max_file_bytes,
            max_chunk_chars=settings.max_chunk_chars,
            min_chunk_chars=settings.min_chunk_chars,
            batch_target_bytes=settings.batch_target_bytes,
            base_dir=str(settings.base_dir) if settings.base_dir else None,
            allow_secret_paths=settings.allow_secret_paths,
            grep_index=settings.grep_index,
            # A process that embeds on a GPU embeds with torch (rifflux.embed.factory).
            embedding_backend=(
                "torch" if settings.embedding_device != "cpu" else settings.embedding_backend
            ),
            hash_embedding_dim=settings.hash_embedding_dim,
            vector_index=settings.vector_index,
        )

    def settings_for(self, settings: Settings, db_path: str | Path) -> Settings:
        """``settings`` (a worker's: broker, threads, limits) with every field of this job
        taken from the spec, for the index at ``db_path``. The device is the CPU's: the
        job's embedder label depends on its backend only, not on where a worker runs it."""
        return replace(
            settings,
            db_path=Path(db_path),
            base_dir=Path(self.base_dir) if self.base_dir else None,
            include_globs=self.include_globs,
            exclude_globs=self.exclude_globs,
            max_file_bytes=self.max_file_bytes,
            max_chunk_chars=self.max_chunk_chars,
            min_chunk_chars=self.min_chunk_chars,
            batch_target_bytes=self.batch_target_bytes,
            allow_secret_paths=self.allow_secret_paths,
            grep_index=self.grep_index,
            embedding_backend=self.embedding_backend,
            embedding_device="cpu",
            hash_embedding_dim=self.hash_embedding_dim,
            vector_index=self.vector_index,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe fields, as stored in the job row."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["include_globs"] = list(self.include_globs)
        data["exclude_globs"] = list(self.exclude_globs)
        if self.scope is None:
            del data["scope"]
        else:
            data["scope"] = list(self.scope)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """Decode a stored spec; a missing field (an older job row) gets its default."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known and v is not None}
        for key in ("include_globs", "exclude_globs", "scope"):
            if key in values:
                values[key] = tuple(values[key])
        if data.get("base_dir"):
            values["base_dir"] = str(data["base_dir"])
        values["version"] = int(data.get("version", 0))
        return cls(**values)
