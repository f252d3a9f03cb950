"""SearchService on the vector cache: fresh, stale and missing, and the writers that publish."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rifflux_testing import make_settings, sole_embed

from rifflux.config import Settings
from rifflux.embed.hashing import HashEmbedder
from rifflux.index import pipeline
from rifflux.index.indexer import Indexer
from rifflux.index.jobspec import JobSpec
from rifflux.index.messages import ChunkRequest, finalize_request, plan_request
from rifflux.search.service import SearchService
from rifflux.status import index_counts
from rifflux.store import jobs
from rifflux.store.connection import open_index
from rifflux.store.vector_blobs import int8_rows
from rifflux.vectors.publish import publish
from rifflux.vectors.quantize import quantize_query, scalar_cosine
from rifflux.vectors.segments import read_manifest, vectors_dir

DOCS = {
    "guide.md": "# Guide\n\n## Install\n\nInstall the package with apt on Linux.\n",
    "cooking.md": "# Cooking\n\nThe recipe needs two eggs, flour and sugar for the cake.\n",
    "garden.md": "# Garden\n\nWater the tomatoes every morning and prune the roses.\n",
    "twin-a.md": "# Twin\n\nzebra quokka identical text\n",
    "twin-b.md": "# Twin\n\nzebra quokka identical text\n",
}


@pytest.fixture
def cfg(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, min_chunk_chars=0)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    return docs


def naive_semantic(db_path: Path, query: str, top_k: int) -> list[tuple[str, int, float]]:
    """Every stored vector read from SQLite; contract order (-cosine, path, chunk_index)."""
    q = HashEmbedder().embed_batch([query])[0].astype(np.float64)
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute(
            "SELECT f.path, c.chunk_index, e.vec FROM chunks c JOIN files f ON f.id = c.file_id "
            "JOIN embeddings e ON e.chunk_id = c.chunk_id"
        ).fetchall()
    scored = []
    q8 = quantize_query(q).tolist()
    for path, index, blob in rows:
        v = int8_rows([(0, blob)], 1, len(q))[0]
        scored.append((path, int(index), scalar_cosine(v.tolist(), q8)))
    scored.sort(key=lambda r: (-r[2], r[0], r[1]))
    return scored[:top_k]


def sqlite_bytes(db_path: Path) -> dict[str, bytes]:
    """The database and its WAL, byte for byte: equal before and after means no write."""
    files = [db_path, Path(f"{db_path}-wal")]
    return {f.name: f.read_bytes() for f in files if f.exists()}


def rowids_of(db_path: Path, path: str) -> list[int]:
    with sqlite3.connect(db_path) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT c.id FROM chunks c JOIN files f ON f.id = c.file_id WHERE f.path = ? "
                "ORDER BY c.id",
                (path,),
            )
        ]


def semantic(service: SearchService, query: str, top_k: int = 5) -> list[tuple[str, int, float]]:
    results = service.search(query, top_k=top_k, mode="semantic")
    return [(r["path"], r["chunk_index"], r["score_breakdown"]["cosine"]) for r in results]


def assert_matches_naive(got: list[tuple[str, int, float]], expected: list[Any]) -> None:
    assert [(p, i) for p, i, _ in got] == [(p, i) for p, i, _ in expected]
    # int8 scores are exact: the same bits as the scalar reference.
    assert [c for *_, c in got] == [c for *_, c in expected]


def test_semantic_search_matches_the_naive_scan_with_the_contract_tie_break(
    cfg: Settings, root: Path
) -> None:
    Indexer(cfg).run([root])
    service = SearchService(cfg)

    got = semantic(service, "zebra quokka identical text", top_k=4)

    assert_matches_naive(got, naive_semantic(cfg.db_path, "zebra quokka identical text", 4))
    assert [p for p, *_ in got[:2]] == ["docs/twin-a.md", "docs/twin-b.md"]
    assert got[0][2] == got[1][2]
    assert index_counts(service)["vector_cache"]["state"] == "fresh"


def test_a_new_document_is_the_top_hit_in_the_next_search_after_indexing(
    cfg: Settings, root: Path
) -> None:
    Indexer(cfg).run([root])
    service = SearchService(cfg)
    assert semantic(service, "install package")  # the service has loaded a view
    (root / "new.md").write_text("# Xylophonic\n\nxylophonic quixotry zeugmatic words\n")

    Indexer(cfg).run([root])

    assert semantic(service, "xylophonic quixotry zeugmatic")[0][0] == "docs/new.md"


def test_a_missing_cache_is_served_from_memory_and_a_search_publishes_nothing(
    cfg: Settings, root: Path, no_publish_on_index: None
) -> None:
    Indexer(cfg).run([root])
    service = SearchService(cfg)
    assert index_counts(service)["vector_cache"]["state"] == "missing"
    before = sqlite_bytes(cfg.db_path)

    got = semantic(service, "eggs flour sugar")

    assert_matches_naive(got, naive_semantic(cfg.db_path, "eggs flour sugar", 5))
    status = index_counts(service)["vector_cache"]
    assert status["state"] == "missing" and status["in_memory"] is True
    assert status["rows"] == index_counts(service)["embeddings"]
    assert not vectors_dir(cfg.db_path).exists()
    assert sqlite_bytes(cfg.db_path) == before


def test_a_missing_cache_is_fresh_once_a_writer_publishes(
    cfg: Settings, root: Path, no_publish_on_index: None
) -> None:
    Indexer(cfg).run([root])
    service = SearchService(cfg)
    from_memory = semantic(service, "eggs flour sugar")

    publish(cfg.db_path, source="repair")

    assert semantic(service, "eggs flour sugar") == from_memory
    status = index_counts(service)["vector_cache"]
    assert status["state"] == "fresh" and status["source"] == "repair"
    assert status["generation"] == index_counts(service)["generation"]


def test_a_stale_cache_never_returns_deleted_chunks_and_stays_stale_until_a_writer_publishes(
    cfg: Settings, root: Path, no_publish_on_index: None
) -> None:
    Indexer(cfg).run([root])
    publish(cfg.db_path, source="test")
    service = SearchService(cfg)
    assert semantic(service, "tomatoes roses")[0][0] == "docs/garden.md"
    (root / "garden.md").unlink()
    (root / "cooking.md").write_text("# Cooking\n\nBake bread with yeast and salt.\n")
    Indexer(cfg).run([root])
    assert index_counts(service)["vector_cache"]["state"] == "stale"

    got = semantic(service, "tomatoes roses eggs flour sugar", top_k=10)

    assert "docs/garden.md" not in {p for p, *_ in got}
    # Every score is the cosine of the chunk now stored under that key.
    current = {
        (p, i): c for p, i, c in naive_semantic(cfg.db_path, "tomatoes roses eggs flour sugar", 99)
    }
    assert all(abs(current[(p, i)] - c) <= 1e-6 for p, i, c in got)
    # The rewritten chunk is not in the lagging generation: not found until a publish.
    assert ("docs/cooking.md", 0) not in {(p, i) for p, i, _ in semantic(service, "bread yeast")}
    assert index_counts(service)["vector_cache"]["state"] == "stale"

    publish(cfg.db_path, source="finalize")

    assert index_counts(service)["vector_cache"]["state"] == "fresh"
    assert semantic(service, "bread yeast salt")[0][0] == "docs/cooking.md"


def test_a_rewritten_chunk_that_reuses_a_rowid_is_not_scored_with_the_old_vector(
    cfg: Settings, tmp_path: Path, no_publish_on_index: None
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Apples\n\napples orchards cider\n")
    (docs / "z.md").write_text("# Zinc\n\nzinc alloys metallurgy\n")
    Indexer(cfg).run([docs])
    publish(cfg.db_path, source="test")
    service = SearchService(cfg)
    zinc_rowids = rowids_of(cfg.db_path, "docs/z.md")
    (docs / "z.md").write_text("# Tulips\n\ntulips bulbs spring\n")
    Indexer(cfg).run([docs])
    assert rowids_of(cfg.db_path, "docs/z.md") == zinc_rowids, "precondition: rowid reused"

    got = semantic(service, "zinc alloys metallurgy", top_k=5)

    current = {(p, i): c for p, i, c in naive_semantic(cfg.db_path, "zinc alloys metallurgy", 9)}
    assert all(abs(current[(p, i)] - c) <= 1e-6 for p, i, c in got)


def test_a_job_finalize_publishes_before_the_job_reads_completed(cfg: Settings, root: Path) -> None:
    Indexer(cfg).run([root])
    service = SearchService(cfg)
    assert semantic(service, "install package")
    (root / "new.md").write_text("# Xylophonic\n\nxylophonic quixotry zeugmatic words\n")
    (root / "garden.md").unlink()
    db = str(cfg.db_path)
    options = JobSpec.from_settings(cfg, force=False, prune_missing=True).to_dict()
    conn = open_index(cfg.db_path)
    job_id = jobs.create_job(conn, [str(root)], options)
    conn.close()
    sent: list[ChunkRequest] = []
    pipeline.plan(cfg, plan_request(db, job_id), sent.append, lambda _embed: None)
    for request in sent:
        embed = sole_embed(pipeline.chunk(request))
        if embed is not None:
            pipeline.write_vectors(pipeline.embed(embed, HashEmbedder()))

    record = pipeline.finalize(finalize_request(db, job_id))

    assert record is not None and record.state == "completed"
    manifest = read_manifest(vectors_dir(cfg.db_path))[0]  # type: ignore[index]
    assert manifest.source == "finalize"
    assert manifest.generation == index_counts(service)["generation"]
    assert semantic(service, "xylophonic quixotry zeugmatic")[0][0] == "docs/new.md"
    assert "docs/garden.md" not in {p for p, *_ in semantic(service, "tomatoes roses", 10)}
