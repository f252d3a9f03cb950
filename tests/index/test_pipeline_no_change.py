"""The cheap paths of a job (issue 13): a job that changes nothing finishes in its plan
step and reads no file of the vector cache; damage to the cache still makes it
republish; one edited file republishes only its own rows. Each is checked against a
fresh in-process index of the same files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cache_damage import DAMAGES
from rifflux_testing import copy_corpus, make_settings, sole_embed

from rifflux.config import Settings
from rifflux.embed.hashing import HashEmbedder
from rifflux.index import pipeline
from rifflux.index.indexer import Indexer
from rifflux.index.jobspec import JobSpec
from rifflux.index.messages import ChunkRequest, EmbedRequest, plan_request
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService
from rifflux.status import index_counts
from rifflux.store import jobs
from rifflux.store.connection import open_index
from rifflux.vectors import publish as publish_module
from rifflux.vectors.segments import (
    LOCK_NAME,
    MANIFEST_NAME,
    StatKey,
    read_manifest,
    stat_key,
    vectors_dir,
)

QUERIES = ("kubernetes deployment best practices", "write unit tests for python code")


def run_job(settings: Settings, root: Path) -> tuple[jobs.JobRecord, pipeline.PlanOutcome]:
    """Every step of one job, in this process, in the order the workers run them."""
    conn = open_index(settings.db_path)
    try:
        options = JobSpec.from_settings(settings, force=False, prune_missing=True).to_dict()
        job_id = jobs.create_job(conn, [str(root)], options)
    finally:
        conn.close()
    chunks: list[ChunkRequest] = []
    embeds: list[EmbedRequest] = []
    request = plan_request(str(settings.db_path), job_id)
    outcome = pipeline.plan(settings, request, chunks.append, embeds.append)
    for chunk in chunks:
        embed = sole_embed(pipeline.chunk(chunk))
        if embed is not None:
            embeds.append(embed)
    for embed in embeds:
        pipeline.write_vectors(pipeline.embed(embed, HashEmbedder()))
    if not outcome.finalized:
        pipeline.finalize(request)
    conn = open_index(settings.db_path)
    try:
        found = jobs.get_job(conn, job_id)
    finally:
        conn.close()
    assert found is not None
    return found, outcome


def cache_files(settings: Settings) -> dict[str, StatKey | None]:
    directory = vectors_dir(settings.db_path)
    return {e.name: stat_key(e.path) for e in os.scandir(directory) if e.name != LOCK_NAME}


def answers(service: SearchService) -> list[tuple]:
    """Semantic and hybrid results by (path, chunk_index, scores): row ids may differ
    between an incremental index and a fresh one, nothing else may."""
    out = []
    for query in QUERIES:
        for mode in ("semantic", "hybrid"):
            response = service.search_response(SearchRequest(query, mode=mode, top_k=10))
            assert "warning" not in response
            out.append(
                [(r["path"], r["chunk_index"], r["score_breakdown"]) for r in response["results"]]
            )
    return out


def fresh_answers(tmp_path: Path, root: Path) -> list[tuple]:
    settings = make_settings(tmp_path, db_path=tmp_path / "fresh" / "index.db")
    Indexer(settings).run([root])
    service = SearchService(settings)
    try:
        return answers(service)
    finally:
        service.close()


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    return copy_corpus(tmp_path / "docs", limit=20)


@pytest.fixture
def settings(tmp_path: Path, docs: Path) -> Settings:
    settings = make_settings(tmp_path)
    record, _ = run_job(settings, docs)
    assert record.state == "completed" and record.files_done == 20
    return settings


def forbid_cache_reads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Make reading a segment or listing the rows fail a publish; returns the list the
    results of every publish from now on are appended to. (A failed publish is only
    logged by finalize, so the test checks the results, not that the job completed.)"""

    def must_not_read(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a job that changed nothing read the vector cache's rows")

    monkeypatch.setattr(publish_module, "load_segment", must_not_read)
    monkeypatch.setattr(publish_module, "list_rowids", must_not_read)
    results: list[object] = []
    real_publish = publish_module.publish

    def recording_publish(*args: object, **kwargs: object) -> object:
        result = real_publish(*args, **kwargs)  # type: ignore[arg-type]
        results.append(result)
        return result

    monkeypatch.setattr(publish_module, "publish", recording_publish)
    return results


def test_a_job_that_changes_nothing_finishes_in_its_plan_and_reads_no_cache_file(
    settings: Settings, docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = cache_files(settings)
    results = forbid_cache_reads(monkeypatch)

    record, outcome = run_job(settings, docs)

    assert outcome.finalized and outcome.batches == 0
    assert record.state == "completed" and record.files_done == 0
    assert [getattr(r, "action", None) for r in results] == ["unchanged"]
    assert cache_files(settings) == before


def test_damage_to_the_cache_is_repaired_by_a_job_that_changes_nothing(
    tmp_path: Path, settings: Settings, docs: Path
) -> None:
    DAMAGES["random-bytes"](settings.db_path)
    service = SearchService(settings)
    assert index_counts(service)["vector_cache"]["state"] == "corrupt"

    record, outcome = run_job(settings, docs)

    assert outcome.finalized and record.state == "completed" and record.files_done == 0
    assert index_counts(service)["vector_cache"]["state"] == "fresh"
    assert answers(service) == fresh_answers(tmp_path, docs)
    service.close()


def test_one_edited_file_republishes_only_its_rows(
    tmp_path: Path, settings: Settings, docs: Path
) -> None:
    directory = vectors_dir(settings.db_path)
    found = read_manifest(directory)
    assert found is not None
    before = found[0]
    edited = sorted(docs.rglob("*.md"))[7]
    with edited.open("a", encoding="utf-8") as out:
        out.write("\n\n## Xylophonic edit\n\nxylophonic quixotry zeugmatic words\n")
    stored = f"docs/{edited.relative_to(docs).as_posix()}"

    record, _ = run_job(settings, docs)

    assert record.state == "completed" and record.files_done == 1
    found = read_manifest(directory)
    assert found is not None
    after = found[0]
    assert after.generation > before.generation
    # The old segments stay (same files), the edited file's rows arrive as one delta
    # segment that holds nothing else, and its old rows are tombstoned.
    assert [s.id for s in after.segments[:-1]] == [s.id for s in before.segments]
    delta = after.segments[-1]
    assert (directory / f"{delta.id}.paths.json").read_text() == f'["{stored}"]'
    assert sum(s.dead_rows for s in after.segments) > sum(s.dead_rows for s in before.segments)
    service = SearchService(settings)
    assert index_counts(service)["vector_cache"]["state"] == "fresh"
    assert answers(service) == fresh_answers(tmp_path, docs)
    service.close()


def test_a_manifest_without_stat_keys_gets_them_from_the_next_job_that_changes_nothing(
    settings: Settings, docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older publisher's manifest: the first no-op job checks the cache in full and
    records the stat keys, so the second one reads no cache file."""
    directory = vectors_dir(settings.db_path)
    manifest = directory / MANIFEST_NAME
    data = json.loads(manifest.read_bytes())
    del data["stat"]
    manifest.write_text(json.dumps(data))

    record, _ = run_job(settings, docs)

    assert record.state == "completed"
    found = read_manifest(directory)
    assert found is not None and found[0].stamps
    assert {name for name, _ in found[0].stamps} == found[0].files()

    before = cache_files(settings)
    results = forbid_cache_reads(monkeypatch)
    record, outcome = run_job(settings, docs)
    assert outcome.finalized and record.state == "completed"
    assert [getattr(r, "action", None) for r in results] == ["unchanged"]
    assert cache_files(settings) == before
