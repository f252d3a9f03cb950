"""A damaged vector cache is detected, contained (lexical results and a warning) and
repaired by the next publish; checked against a fresh index of the same files."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from cache_damage import DAMAGES, base_segment_files
from rifflux_testing import copy_corpus, make_settings

from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService
from rifflux.status import check_index, index_counts
from rifflux.store.connection import open_index
from rifflux.store.reader import get_metadata
from rifflux.store.vector_blobs import float_row
from rifflux.vectors.publish import publish
from rifflux.vectors.segments import (
    MANIFEST_NAME,
    CacheCorrupt,
    forget_verified,
    load_segment,
    read_manifest,
    segment_files,
    vectors_dir,
)

QUERY = "kubernetes deployment best practices"


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    return copy_corpus(tmp_path / "docs", limit=60)


def index_at(tmp_path: Path, docs: Path, name: str) -> Settings:
    cfg = make_settings(tmp_path, db_path=tmp_path / name / "index.db")
    Indexer(cfg).run([docs])
    return cfg


@pytest.fixture
def cfg(tmp_path: Path, docs: Path) -> Settings:
    return index_at(tmp_path, docs, "index")


@pytest.fixture
def reference(tmp_path: Path, docs: Path) -> Iterator[SearchService]:
    """A fresh index of the same files: the semantic results a sound cache gives."""
    service = SearchService(index_at(tmp_path, docs, "reference"))
    yield service
    service.close()


def keyed(results: list[dict]) -> list[tuple[str, int, dict]]:
    return [(r["path"], r["chunk_index"], r["score_breakdown"]) for r in results]


def lexical(service: SearchService, query: str = QUERY, top_k: int = 10) -> list[tuple]:
    return keyed(service.search(query, top_k=top_k, mode="lexical"))


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("repair", ["no-op index", "full publish"])
def test_damaged_cache_is_reported_corrupt_serves_lexical_with_a_warning_and_is_repaired(
    cfg: Settings, docs: Path, reference: SearchService, damage: str, repair: str
) -> None:
    service = SearchService(cfg)
    want = {
        mode: reference.search_response(SearchRequest(QUERY, mode=mode))
        for mode in ("semantic", "hybrid")
    }
    assert service.search_response(SearchRequest(QUERY, mode="semantic")) == want["semantic"]
    assert index_counts(service)["vector_cache"]["state"] == "fresh"

    damaged = DAMAGES[damage](cfg.db_path)

    status = index_counts(service)["vector_cache"]
    assert status["state"] == "corrupt"
    assert damaged in status["reason"] and "checksum" in status["reason"]
    for mode in ("semantic", "hybrid"):
        response = service.search_response(SearchRequest(QUERY, mode=mode))
        assert damaged in response["warning"] and "rifflux index --repair" in response["warning"]
        assert keyed(response["results"]) == lexical(service)
        assert response["count"] == 10 and response["mode"] == mode
    # A second process sees the same: the verdict does not depend on what was loaded.
    other = SearchService(cfg)
    assert index_counts(other)["vector_cache"]["state"] == "corrupt"
    other.close()

    if repair == "no-op index":
        report = Indexer(cfg).run([docs])
        assert report.files_indexed == 0 and report.files_deleted == 0
    else:
        assert publish(cfg.db_path, source="repair", full=True) is not None

    assert index_counts(service)["vector_cache"]["state"] == "fresh"
    for mode in ("semantic", "hybrid"):
        assert service.search_response(SearchRequest(QUERY, mode=mode)) == want[mode]
    service.close()


def test_a_sound_cache_answers_byte_identically_and_without_a_warning_key(
    cfg: Settings, reference: SearchService
) -> None:
    service = SearchService(cfg)
    for mode in ("lexical", "semantic", "hybrid"):
        got = service.search_response(SearchRequest(QUERY, mode=mode))
        assert "warning" not in got
        assert json.dumps(got) == json.dumps(
            reference.search_response(SearchRequest(QUERY, mode=mode))
        )
    service.close()


def test_damage_after_a_long_running_reader_verified_the_cache_is_noticed_by_its_next_search(
    cfg: Settings,
) -> None:
    service = SearchService(cfg)
    assert "warning" not in service.search_response(SearchRequest(QUERY, mode="semantic"))

    DAMAGES["zeroed-rows"](cfg.db_path)

    assert "warning" in service.search_response(SearchRequest(QUERY, mode="semantic"))
    assert index_counts(service)["vector_cache"]["state"] == "corrupt"
    service.close()


def test_a_replaced_segment_file_is_noticed_although_the_old_one_stays_mapped(
    cfg: Settings,
) -> None:
    service = SearchService(cfg)
    assert "warning" not in service.search_response(SearchRequest(QUERY, mode="semantic"))
    vec_path, _ = base_segment_files(cfg.db_path)
    copy = vec_path.with_name("copy.tmp")
    shutil.copyfile(vec_path, copy)
    vectors = np.load(copy, mmap_mode="r+")
    vectors[0] = -vectors[0]
    vectors.flush()
    del vectors
    copy.replace(vec_path)

    assert index_counts(service)["vector_cache"]["state"] == "corrupt"
    service.close()


def test_rows_that_differ_from_the_database_at_the_same_generation_are_corrupt(
    cfg: Settings, reference: SearchService
) -> None:
    """Checksums pass, but the database lost rows without a new generation."""
    conn = open_index(cfg.db_path)
    chunk = conn.execute("SELECT chunk_id FROM embeddings LIMIT 1").fetchone()[0]
    conn.execute("DELETE FROM embeddings WHERE chunk_id = ?", (chunk,))
    conn.close()
    service = SearchService(cfg)

    status = index_counts(service)["vector_cache"]
    assert status["state"] == "corrupt"
    assert "do not match the database" in status["reason"] and "1 unknown to it" in status["reason"]
    assert "warning" in service.search_response(SearchRequest(QUERY, mode="hybrid"))

    result = publish(cfg.db_path, source="finalize")
    assert result is not None and result.action == "full"
    assert result.discarded is not None and "do not match" in result.discarded
    assert index_counts(service)["vector_cache"]["state"] == "fresh"
    service.close()


def test_status_check_compares_full_row_identities_with_the_database(cfg: Settings) -> None:
    """Same rowids, another chunk behind one of them, same generation: only the thorough
    identity comparison of ``check()`` can tell, and a full publish repairs it."""
    conn = open_index(cfg.db_path)
    first = conn.execute("SELECT MIN(id) FROM chunks").fetchone()[0]
    conn.execute("UPDATE chunks SET embed_sha256 = 'swapped' WHERE id = ?", (first,))
    conn.close()
    service = SearchService(cfg)
    assert index_counts(service)["vector_cache"]["state"] == "fresh"

    check = check_index(service)

    assert check["ok"] is False and check["database"]["ok"] is True
    assert check["vector_cache"]["state"] == "corrupt"
    assert "row identities do not match" in check["vector_cache"]["problems"][0]
    assert publish(cfg.db_path, source="repair", full=True) is not None
    assert check_index(service)["ok"] is True
    service.close()


def test_a_publisher_never_copies_rows_out_of_a_damaged_segment(
    cfg: Settings, docs: Path, reference: SearchService
) -> None:
    """A delta publish after damage rewrites everything from the database."""
    DAMAGES["shifted-ids"](cfg.db_path)
    (docs / "zz-new.md").write_text("# Xylophone\n\nxylophone quixotic zeugma words\n")
    Indexer(cfg).run([docs])

    service = SearchService(cfg)
    assert index_counts(service)["vector_cache"]["state"] == "fresh"
    Indexer(reference.settings).run([docs])
    request = SearchRequest(QUERY, mode="semantic")
    assert service.search_response(request) == reference.search_response(request)
    service.close()


def test_verification_is_cached_per_file_identity_and_redone_when_the_file_changes(
    cfg: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    directory = vectors_dir(cfg.db_path)
    found = read_manifest(directory)
    assert found is not None
    manifest = found[0]
    hashed: list[object] = []
    real = hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest", lambda f, d: hashed.append(f) or real(f, d))
    forget_verified()

    load_segment(directory, manifest.segments[0], manifest.dim)
    load_segment(directory, manifest.segments[0], manifest.dim)
    assert len(hashed) == 3  # vec, meta, paths: once each

    DAMAGES["random-bytes"](cfg.db_path)
    with pytest.raises(CacheCorrupt, match=r"vec\.npy does not match its sha256"):
        load_segment(directory, manifest.segments[0], manifest.dim)


def downgrade(db_path: Path, fmt: int) -> None:
    """Rewrite the cache as publishers of format ``fmt`` (1 or 2) wrote it: float32 rows,
    each the database's vector L2-normalised, 4 meta columns; checksums from format 2."""
    directory = vectors_dir(db_path)
    path = directory / MANIFEST_NAME
    data = json.loads(path.read_bytes())
    data["format"] = fmt
    conn = open_index(db_path)
    model = get_metadata(conn, "embedding_model")
    for segment in data["segments"]:
        vec_name, meta_name, _ = segment_files(segment["id"])
        meta = np.load(directory / meta_name)
        blobs = dict(
            conn.execute(
                "SELECT c.id, e.vec FROM chunks c JOIN embeddings e ON e.chunk_id = c.chunk_id "
                "WHERE e.model = ?",
                (model,),
            )
        )
        floats = np.stack([float_row(blobs[int(r)], int(data["dim"])) for r in meta[:, 0]])
        np.save(directory / vec_name, floats / np.linalg.norm(floats, axis=1, keepdims=True))
        np.save(directory / meta_name, np.ascontiguousarray(meta[:, :4]))
        if fmt == 1:
            del segment["sha256"]
        else:
            for name in (vec_name, meta_name):
                segment["sha256"][name] = hashlib.sha256(
                    (directory / name).read_bytes()
                ).hexdigest()
    conn.close()
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("fmt", [1, 2])
def test_an_outdated_cache_is_republished_in_full_by_the_next_writer(
    cfg: Settings, fmt: int
) -> None:
    downgrade(cfg.db_path, fmt)
    service = SearchService(cfg)
    status = index_counts(service)["vector_cache"]
    assert status["state"] == "stale" and f"format {fmt}" in status["reason"]

    result = publish(cfg.db_path, source="finalize")

    assert (
        result is not None and result.action == "full" and f"format {fmt}" in str(result.discarded)
    )
    assert result.manifest.format == 3
    assert index_counts(service)["vector_cache"]["state"] == "fresh"
    service.close()


@pytest.mark.parametrize("fmt", [1, 2])
def test_an_outdated_cache_is_served_identically_and_left_to_the_next_writer(
    cfg: Settings, reference: SearchService, fmt: int
) -> None:
    downgrade(cfg.db_path, fmt)
    service = SearchService(cfg)

    response = service.search_response(SearchRequest(QUERY, mode="semantic"))

    assert "warning" not in response
    assert keyed(response["results"]) == keyed(reference.search(QUERY, mode="semantic"))
    found = read_manifest(vectors_dir(cfg.db_path))
    assert found is not None and found[0].format == fmt, "a search republished the cache"
    assert index_counts(service)["vector_cache"]["state"] == "stale"
    service.close()


def test_a_manifest_that_is_not_json_is_corrupt_not_silently_rebuilt(cfg: Settings) -> None:
    (vectors_dir(cfg.db_path) / MANIFEST_NAME).write_bytes(b"\x00garbage")
    service = SearchService(cfg)

    assert index_counts(service)["vector_cache"]["state"] == "corrupt"
    assert "not JSON" in service.search_response(SearchRequest(QUERY, mode="semantic"))["warning"]
    service.close()
