"""HNSW graphs beside the segments: recall against the exact scan, exact rescored
cosines, deleted chunks never returned, graphs built by the publisher only and checked
like every cache file."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from rifflux_testing import copy_corpus, make_settings

from rifflux.config import Settings
from rifflux.errors import ConfigError
from rifflux.index.indexer import Indexer
from rifflux.search.service import SearchService
from rifflux.status import index_counts
from rifflux.vectors import hnsw
from rifflux.vectors.cache import open_view
from rifflux.vectors.publish import publish
from rifflux.vectors.quantize import quantize_query, quantize_rows, scalar_cosine
from rifflux.vectors.scan import search_segments
from rifflux.vectors.segments import (
    MANIFEST_NAME,
    attach_hnsw,
    load_segment,
    read_manifest,
    vectors_dir,
    write_segment,
)

DIM = 384
ROWS = 4000
QUERIES = 40
QUERY = "code review checklist for pull requests"


def clustered(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """int8 rows around 40 centroids (cosine ~0.7 to their centroid), and float queries."""
    rng = np.random.default_rng(seed)
    centroids = rng.standard_normal((40, DIM))
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    noise = 1.0 / np.sqrt(DIM)
    rows = centroids[rng.integers(0, 40, ROWS)] + noise * rng.standard_normal((ROWS, DIM))
    queries = centroids[rng.integers(0, 40, QUERIES)] + noise * rng.standard_normal((QUERIES, DIM))
    return quantize_rows(rows), queries


def test_graph_candidates_rescored_exactly_recall_the_exact_top_10(tmp_path: Path) -> None:
    vectors, queries = clustered()
    ids = np.arange(ROWS, dtype=np.int64)
    paths = [f"d{i // 4:05d}.md" for i in range(ROWS)]
    ref = write_segment(tmp_path, 1, vectors, ids, ids, paths, ids % 4)
    ref = attach_hnsw(tmp_path, ref, vectors)
    exact = load_segment(tmp_path, ref, DIM)  # no ef: the graph is ignored
    graph = load_segment(tmp_path, ref, DIM, ef=50)
    assert exact.graph is None and graph.graph is not None

    recalls = []
    for query in queries:
        truth = search_segments([exact], query, 10)
        found = search_segments([graph], query, 10)
        recalls.append(len({h.row_id for h in truth} & {h.row_id for h in found}) / 10)
        q8 = quantize_query(query).tolist()
        # Every candidate carries its exact int8 cosine, in the contract order.
        assert [h.cosine for h in found] == [
            scalar_cosine(vectors[h.row_id].tolist(), q8) for h in found
        ]
        assert [(-h.cosine, h.key) for h in found] == sorted((-h.cosine, h.key) for h in found)
    assert np.mean(recalls) >= 0.98


def test_threads_searching_one_graph_get_the_serial_results(tmp_path: Path) -> None:
    vectors, queries = clustered()
    ids = np.arange(ROWS, dtype=np.int64)
    ref = write_segment(tmp_path, 1, vectors, ids, ids, [f"d{i:05d}.md" for i in ids], ids)
    segment = load_segment(tmp_path, attach_hnsw(tmp_path, ref, vectors), DIM, ef=50)
    serial = [search_segments([segment], q, 10) for q in queries]

    with ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(3):
            parallel = list(pool.map(lambda q: search_segments([segment], q, 10), queries))
            assert parallel == serial


@pytest.fixture
def hnsw_cfg(tmp_path: Path) -> Settings:
    copy_corpus(tmp_path / "docs", limit=40)
    # ef well below the row count, so the graph (not a scan of the segment) answers.
    cfg = make_settings(tmp_path, vector_index="hnsw", hnsw_ef=50)
    Indexer(cfg).run([tmp_path / "docs"])
    return cfg


def semantic(cfg: Settings, query: str, top_k: int = 10) -> list[tuple[str, int, float]]:
    service = SearchService(cfg)
    try:
        results = service.search(query, top_k=top_k, mode="semantic")
    finally:
        service.close()
    return [(r["path"], r["chunk_index"], r["score_breakdown"]["cosine"]) for r in results]


def assert_exactly_scored(cfg: Settings, query: str, hits: list[tuple[str, int, float]]) -> None:
    """Each hit's cosine is the exact scan's for that chunk; the order is the contract's."""
    every = {
        (p, i): c for p, i, c in semantic(cfg.with_overrides(vector_index="exact"), query, 10**6)
    }
    assert [c for p, i, c in hits] == [every[(p, i)] for p, i, _ in hits]
    assert [(-c, p, i) for p, i, c in hits] == sorted((-c, p, i) for p, i, c in hits)


def test_graph_hits_are_exactly_scored_and_a_deleted_chunk_never_returns(
    tmp_path: Path, hnsw_cfg: Settings
) -> None:
    manifest = read_manifest(vectors_dir(hnsw_cfg.db_path))[0]  # type: ignore[index]
    assert manifest.segments[0].hnsw, "hnsw mode gives the base segment a graph"
    view = open_view(vectors_dir(hnsw_cfg.db_path), ef=hnsw_cfg.hnsw_ef)
    assert view is not None and view.segments[0].graph is not None
    assert view.live_rows > 4 * hnsw_cfg.hnsw_ef, "the graph, not a scan, answers"
    before = semantic(hnsw_cfg, QUERY)
    assert_exactly_scored(hnsw_cfg, QUERY, before)
    victim = tmp_path / before[0][0]
    # The victim's own text: its chunks are the graph's nearest rows.
    content = victim.read_text()[:600]
    assert semantic(hnsw_cfg, content)[0][0] == before[0][0]

    victim.unlink()
    Indexer(hnsw_cfg).run([tmp_path / "docs"])

    manifest = read_manifest(vectors_dir(hnsw_cfg.db_path))[0]  # type: ignore[index]
    assert manifest.segments[0].dead_rows > 0, "the base segment (and its graph) was kept"
    assert manifest.segments[0].hnsw
    for query in (QUERY, content):
        after = semantic(hnsw_cfg, query)
        assert len(after) == 10 and before[0][0] not in {path for path, _, _ in after}
        assert_exactly_scored(hnsw_cfg, query, after)


def test_publisher_builds_graphs_by_mode_and_exact_readers_ignore_them(tmp_path: Path) -> None:
    copy_corpus(tmp_path / "docs", limit=20)
    cfg = make_settings(tmp_path)  # auto: a small index gets no graph
    Indexer(cfg).run([tmp_path / "docs"])
    directory = vectors_dir(cfg.db_path)
    assert read_manifest(directory)[0].segments[0].hnsw is None  # type: ignore[index]

    # Switching to hnsw: the next publish gives the kept segment its graph.
    result = publish(cfg.db_path, source="finalize", vector_index="hnsw")
    assert result is not None and result.manifest.segments[0].hnsw
    assert (directory / result.manifest.segments[0].hnsw).exists()
    again = publish(cfg.db_path, source="finalize", vector_index="hnsw")
    assert again is not None and again.action == "unchanged"

    exact_view = open_view(directory)
    assert exact_view is not None and exact_view.segments[0].graph is None


def test_a_damaged_graph_is_corrupt_and_the_next_publish_rebuilds_it(hnsw_cfg: Settings) -> None:
    directory = vectors_dir(hnsw_cfg.db_path)
    name = read_manifest(directory)[0].segments[0].hnsw  # type: ignore[index]
    assert name
    with (directory / name).open("r+b") as fh:
        fh.seek(-64, 2)
        fh.write(b"\xff" * 64)
    service = SearchService(hnsw_cfg)
    status = index_counts(service)["vector_cache"]
    assert status["state"] == "corrupt" and name in status["reason"]
    service.close()

    result = publish(hnsw_cfg.db_path, source="finalize", vector_index="hnsw")

    assert result is not None and result.action == "full" and result.discarded
    new_name = result.manifest.segments[0].hnsw
    assert new_name and new_name != name and not (directory / name).exists()
    assert index_counts(SearchService(hnsw_cfg))["vector_cache"]["state"] == "fresh"


def test_vector_index_settings_are_checked_with_one_line_errors() -> None:
    assert Settings.from_env({"RIFFLUX_VECTOR_INDEX": " HNSW "}).vector_index == "hnsw"
    assert Settings.from_env({"RIFFLUX_HNSW_EF": "80"}).hnsw_ef == 80
    with pytest.raises(ConfigError, match=r"RIFFLUX_VECTOR_INDEX='fast' .*auto, exact, hnsw"):
        Settings.from_env({"RIFFLUX_VECTOR_INDEX": "fast"})
    with pytest.raises(ConfigError, match=r"RIFFLUX_HNSW_EF='0'"):
        Settings.from_env({"RIFFLUX_HNSW_EF": "0"})


# -- recall measured where it is used (issue 22) ---------------------------------------


@pytest.fixture
def weak_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sparse, cheap graphs searched narrowly: random rows then fall well short of the
    recall floor (~0.6 at 2,000 rows) while clustered rows still pass (~1.0)."""
    monkeypatch.setattr(hnsw, "CONNECTIVITY", 8)
    monkeypatch.setattr(hnsw, "EXPANSION_ADD", 32)
    monkeypatch.setattr(hnsw, "DEFAULT_EF", 50)


def structureless(rows: int = 2000, seed: int = 5) -> np.ndarray:
    return quantize_rows(np.random.default_rng(seed).standard_normal((rows, DIM)))


@pytest.mark.usefixtures("weak_graphs")
def test_a_graph_on_structureless_rows_is_refused_and_one_on_clustered_rows_is_used(
    tmp_path: Path,
) -> None:
    refs = {}
    for name, vectors in (("random", structureless()), ("clustered", clustered()[0][:2000])):
        n = vectors.shape[0]
        ids = np.arange(n, dtype=np.int64)
        ref = write_segment(tmp_path, 1, vectors, ids, ids, [f"d{i:05d}.md" for i in ids], ids)
        refs[name] = attach_hnsw(tmp_path, ref, vectors)

    refused, kept = refs["random"], refs["clustered"]
    assert refused.hnsw is None and refused.hnsw_recall is not None
    assert refused.hnsw_recall < hnsw.RECALL_FLOOR
    assert not list(tmp_path.glob(f"{refused.id}*.usearch")), "a refused graph is not written"
    assert kept.hnsw and kept.hnsw_recall is not None and kept.hnsw_recall >= hnsw.RECALL_FLOOR
    assert load_segment(tmp_path, refused, DIM, ef=50).graph is None
    assert load_segment(tmp_path, kept, DIM, ef=50).graph is not None


@pytest.mark.usefixtures("weak_graphs")
def test_a_large_segment_is_checked_on_a_sample_before_its_own_graph_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rifflux.vectors import segments

    monkeypatch.setattr(hnsw, "SAMPLE_ROWS", 1000)
    built: list[int] = []
    build = hnsw.build_graph

    def counted(vectors: np.ndarray, threads: int = 0) -> object:
        built.append(int(vectors.shape[0]))
        return build(vectors, threads)

    monkeypatch.setattr(hnsw, "build_graph", counted)
    monkeypatch.setattr(segments, "build_graph", counted)
    recalls, builds = {}, {}
    for name, vectors in (("random", structureless(4000)), ("clustered", clustered()[0])):
        ids = np.arange(vectors.shape[0], dtype=np.int64)
        ref = write_segment(tmp_path, 1, vectors, ids, ids, [f"d{i:05d}.md" for i in ids], ids)
        built.clear()
        attached = attach_hnsw(tmp_path, ref, vectors)
        recalls[name], builds[name] = (attached.hnsw, attached.hnsw_recall), list(built)

    # Random rows: the sample's graph falls short, so the segment's is never built.
    graph, recall = recalls["random"]
    assert builds["random"] == [1000]
    assert graph is None and recall is not None and recall < hnsw.RECALL_FLOOR
    # Clustered rows: the sample passes, then the segment's own graph is built and checked.
    graph, recall = recalls["clustered"]
    assert builds["clustered"] == [1000, ROWS]
    assert graph and recall is not None and recall >= hnsw.RECALL_FLOOR
    # At most twice the sample's rows, a segment builds its own graph straight away.
    built.clear()
    small = structureless(2000)
    ids = np.arange(2000, dtype=np.int64)
    ref = write_segment(tmp_path, 1, small, ids, ids, [f"d{i:05d}.md" for i in ids], ids)
    attach_hnsw(tmp_path, ref, small)
    assert built == [2000]


def searches(cfg: Settings) -> list[dict[str, object]]:
    service = SearchService(cfg)
    try:
        return index_counts(service)["vector_cache"]["segment_search"]  # type: ignore[no-any-return]
    finally:
        service.close()


def test_index_status_says_which_segments_are_searched_approximately_and_why(
    hnsw_cfg: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = vectors_dir(hnsw_cfg.db_path)
    manifest = read_manifest(directory)[0]  # type: ignore[index]
    [used] = searches(hnsw_cfg)
    assert used["search"] == "hnsw" and used["reason"] is None
    assert used["recall"] == manifest.segments[0].hnsw_recall and used["recall"] >= 0.95  # type: ignore[operator]
    assert used["rows"] == manifest.rows
    [ignored] = searches(hnsw_cfg.with_overrides(vector_index="exact"))
    assert ignored["search"] == "exact" and ignored["reason"] == "RIFFLUX_VECTOR_INDEX=exact"

    # A floor above what the graph measures: the republished segment has no graph, the
    # manifest keeps the recall that refused it, and readers scan it exactly.
    monkeypatch.setattr(hnsw, "RECALL_FLOOR", 1.01)
    result = publish(hnsw_cfg.db_path, source="finalize", full=True, vector_index="hnsw")
    assert result is not None
    segment = result.manifest.segments[0]
    # The rebuilt graph measured its own recall (graph builds are multi-threaded, so not
    # always the first build's figure).
    assert segment.hnsw is None and segment.hnsw_recall is not None
    assert 0.0 <= segment.hnsw_recall < 1.01
    [refused] = searches(hnsw_cfg)
    assert refused["search"] == "exact"
    assert refused["reason"] == f"recall {segment.hnsw_recall:.3f} < 1.01"
    view = open_view(directory, ef=hnsw_cfg.hnsw_ef)
    assert view is not None and view.segments[0].graph is None
    assert semantic(hnsw_cfg, QUERY) == semantic(
        hnsw_cfg.with_overrides(vector_index="exact"), QUERY
    )
    again = publish(hnsw_cfg.db_path, source="finalize", vector_index="hnsw")
    assert again is not None and again.action == "unchanged", "a refused graph is not rebuilt"


def test_auto_below_hnsw_min_rows_is_reported_as_the_reason(tmp_path: Path) -> None:
    copy_corpus(tmp_path / "docs", limit=10)
    cfg = make_settings(tmp_path)
    Indexer(cfg).run([tmp_path / "docs"])
    [segment] = searches(cfg)
    assert segment["search"] == "exact" and segment["recall"] is None
    assert segment["reason"] == f"below HNSW_MIN_ROWS ({hnsw.HNSW_MIN_ROWS})"


def test_an_old_manifest_without_recall_loads_and_its_graph_is_measured_not_rebuilt(
    hnsw_cfg: Settings,
) -> None:
    directory = vectors_dir(hnsw_cfg.db_path)
    path = directory / MANIFEST_NAME
    data = json.loads(path.read_text())
    for entry in data["segments"]:
        del entry["hnsw_recall"]  # as written before recall checks
    path.write_text(json.dumps(data))
    graph = data["segments"][0]["hnsw"]

    view = open_view(directory, ef=hnsw_cfg.hnsw_ef)
    assert view is not None and view.segments[0].graph is None, "unchecked: scanned exactly"
    [unchecked] = searches(hnsw_cfg)
    assert unchecked["search"] == "exact" and "unchecked" in str(unchecked["reason"])
    assert semantic(hnsw_cfg, QUERY) == semantic(
        hnsw_cfg.with_overrides(vector_index="exact"), QUERY
    )

    result = publish(hnsw_cfg.db_path, source="finalize", trust_stamps=True, vector_index="hnsw")

    assert result is not None
    segment = result.manifest.segments[0]
    assert segment.hnsw == graph, "the existing graph is measured, not rebuilt"
    assert segment.hnsw_recall is not None and segment.hnsw_recall >= hnsw.RECALL_FLOOR
    view = open_view(directory, ef=hnsw_cfg.hnsw_ef)
    assert view is not None and view.segments[0].graph is not None
    assert searches(hnsw_cfg)[0]["search"] == "hnsw"
