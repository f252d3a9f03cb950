"""A job's JobSpec: built from the submitter's settings, stored as JSON, and decoded from
rows written before it existed with today's defaults."""

from __future__ import annotations

import json
from pathlib import Path

from rifflux.config import Settings
from rifflux.index.jobspec import SPEC_VERSION, JobSpec


def test_a_spec_survives_its_json_round_trip() -> None:
    settings = Settings(
        max_chunk_chars=800,
        min_chunk_chars=100,
        include_globs=("*.md",),
        batch_target_bytes=20_000,
        base_dir=Path("/srv/docs"),
        embedding_backend="hash",
        hash_embedding_dim=64,
        vector_index="exact",
        grep_index=False,
    )
    spec = JobSpec.from_settings(settings, force=True, prune_missing=False)
    again = JobSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec and again.version == SPEC_VERSION
    assert (again.force, again.prune_missing, again.base_dir) == (True, False, "/srv/docs")
    assert again.grep_index is False


def test_settings_for_a_job_take_every_row_shaping_field_from_the_spec() -> None:
    submitter = Settings(max_chunk_chars=800, min_chunk_chars=100, include_globs=("*.md",))
    worker = Settings(
        max_chunk_chars=3000,
        min_chunk_chars=0,
        include_globs=("*.txt",),
        batch_target_bytes=1,
        base_dir=Path("/elsewhere"),
        embedding_backend="onnx",
        grep_index=False,
        workers=7,
    )
    spec = JobSpec.from_settings(submitter)
    job = spec.settings_for(worker, "/idx/index.db")
    assert JobSpec.from_settings(job) == spec
    assert job.base_dir is None and job.db_path == Path("/idx/index.db")
    assert job.workers == 7  # The worker's own process settings stay.


def test_a_job_row_from_before_the_spec_decodes_with_todays_defaults() -> None:
    # What job_options stored before JobSpec: no version, no embedder, no vector index.
    old = {
        "force": True,
        "prune_missing": True,
        "include_globs": ["*.md"],
        "exclude_globs": [".git"],
        "max_file_bytes": 1000,
        "max_chunk_chars": 900,
        "min_chunk_chars": 300,
        "batch_target_bytes": 4096,
        "base_dir": None,
    }
    spec = JobSpec.from_dict(old)
    defaults = Settings()
    assert spec.version == 0
    assert (spec.force, spec.include_globs, spec.max_chunk_chars) == (True, ("*.md",), 900)
    assert spec.allow_secret_paths is False and spec.grep_index is True
    assert spec.embedding_backend == defaults.embedding_backend
    assert spec.vector_index == defaults.vector_index
    assert JobSpec.from_dict({}) == JobSpec(version=0)
