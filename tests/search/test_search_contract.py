"""The search contract, proven on a real SQLite index built by the real pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rifflux_testing import make_settings

from rifflux.embed.hashing import HashEmbedder
from rifflux.errors import EmbeddingModelMismatch, InvalidQueryError
from rifflux.index.indexer import Indexer
from rifflux.search.service import SearchService
from rifflux.status import index_counts

RESULT_KEYS = {"chunk_id", "path", "heading_path", "chunk_index", "content", "score_breakdown"}

DOCS = {
    "guide.md": "# Guide\n\n## Install\n\n### Linux\n\nInstall the package with apt on Linux.\n\n"
    "## Usage\n\nRun the search command with a query.\n",
    "cooking.md": "# Cooking\n\nThe recipe needs two eggs, flour and sugar for the cake.\n",
    "twin-a.md": "# Twin\n\nzebra quokka identical text\n",
    "twin-b.md": "# Twin\n\nzebra quokka identical text\n",
}


class ZeroQueryEmbedder(HashEmbedder):
    """Embeds documents normally but every query to a zero vector."""

    def __init__(self) -> None:
        super().__init__(384)
        self.indexing = True

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        if self.indexing:
            return super().embed_batch(texts)
        return np.zeros((len(texts), self.dim), dtype=np.float32)


def build(tmp_path: Path, docs: dict[str, str] = DOCS, **overrides: object) -> SearchService:
    root = tmp_path / "docs"
    root.mkdir(exist_ok=True)
    for name, text in docs.items():
        (root / name).write_text(text)
    settings = make_settings(tmp_path, **{"min_chunk_chars": 0, **overrides})
    Indexer(settings).run([root])
    return SearchService(settings)


@pytest.fixture
def service(tmp_path: Path) -> SearchService:
    return build(tmp_path)


@pytest.mark.parametrize(
    ("mode", "breakdown"),
    [
        ("lexical", {"bm25"}),
        ("semantic", {"cosine"}),
        ("hybrid", {"rrf", "lexical_rank", "semantic_rank"}),
    ],
)
def test_results_have_exactly_the_contract_fields(
    service: SearchService, mode: str, breakdown: set[str]
) -> None:
    results = service.search("install package linux", top_k=5, mode=mode)
    assert results
    for result in results:
        assert set(result) == RESULT_KEYS
        assert set(result["score_breakdown"]) == breakdown
        assert isinstance(result["chunk_id"], str) and isinstance(result["chunk_index"], int)
        assert not result["path"].startswith("/")
    assert results[0]["path"] == "docs/guide.md"
    assert results[0]["heading_path"].startswith("Guide > Install")


def test_unknown_mode_names_the_valid_ones(service: SearchService) -> None:
    with pytest.raises(ValueError, match="lexical, semantic, hybrid"):
        service.search("x", mode="fuzzy")


@pytest.mark.parametrize("top_k", [0, -1, 1.5, "3", True])
def test_top_k_must_be_a_positive_integer(service: SearchService, top_k: object) -> None:
    with pytest.raises(InvalidQueryError, match="top_k"):
        service.search("x", top_k=top_k)  # type: ignore[arg-type]


def test_lexical_orders_by_bm25_ascending(service: SearchService) -> None:
    results = service.search("eggs flour cake recipe", mode="lexical")
    scores = [r["score_breakdown"]["bm25"] for r in results]
    assert scores == sorted(scores)
    assert results[0]["path"] == "docs/cooking.md"


def test_semantic_orders_by_cosine_descending(service: SearchService) -> None:
    results = service.search("eggs flour cake", mode="semantic", top_k=10)
    scores = [r["score_breakdown"]["cosine"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert all(-1.0 <= s <= 1.0 + 1e-6 for s in scores)


def test_hybrid_score_is_rrf_of_the_ranks(service: SearchService) -> None:
    assert service.settings.rrf_k == 60  # the contract's default
    for result in service.search("install the package", top_k=5):
        b = result["score_breakdown"]
        k = service.settings.rrf_k
        expected = sum(1 / (k + r) for r in (b["lexical_rank"], b["semantic_rank"]) if r)
        assert b["rrf"] == pytest.approx(expected)


def test_maxnorm_fusion_orders_by_its_score_and_names_it(tmp_path: Path) -> None:
    service = build(tmp_path, fusion="maxnorm")
    results = service.search("install the package", top_k=5)
    assert results
    scores = [r["score_breakdown"]["maxnorm"] for r in results]
    assert scores == sorted(scores, reverse=True)
    for result in results:
        assert set(result) == RESULT_KEYS
        assert set(result["score_breakdown"]) == {"maxnorm", "lexical_rank", "semantic_rank"}
        assert 0.0 <= result["score_breakdown"]["maxnorm"] <= 1.0 + 1e-9


def test_each_modality_fetches_top_k_times_multiplier(tmp_path: Path) -> None:
    docs = {f"d{i}.md": f"# Doc {i}\n\nshared term number {i}\n" for i in range(12)}
    service = build(tmp_path, docs, candidate_multiplier=3)
    results = service.search("shared term", top_k=2, mode="hybrid")
    assert len(results) == 2
    lexical = service.search("shared term", top_k=12, mode="lexical")
    assert len(lexical) == 12
    assert len(service.search("shared term", top_k=4, mode="lexical")) == 4


def test_identical_chunks_tie_break_by_path(service: SearchService) -> None:
    for mode in ("lexical", "semantic", "hybrid"):
        results = service.search("zebra quokka identical", top_k=2, mode=mode)
        assert [r["path"] for r in results] == ["docs/twin-a.md", "docs/twin-b.md"], mode


def test_same_query_same_output(tmp_path: Path, service: SearchService) -> None:
    first = service.search("search command query", top_k=10)
    again = SearchService(service.settings).search("search command query", top_k=10)
    assert first == again


def test_empty_lexical_list_leaves_semantic_ranks(service: SearchService) -> None:
    results = service.search("xylophonist", top_k=3, mode="hybrid")
    assert results
    assert all(r["score_breakdown"]["lexical_rank"] is None for r in results)
    assert service.search("xylophonist", mode="lexical") == []


def test_zero_norm_query_gives_no_semantic_results(tmp_path: Path) -> None:
    embedder = ZeroQueryEmbedder()
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text)
    settings = make_settings(tmp_path)
    Indexer(settings, embedder=embedder).run([root])
    embedder.indexing = False
    service = SearchService(settings, embedder=embedder)
    assert service.search("install", mode="semantic") == []
    hybrid = service.search("install", mode="hybrid")
    assert hybrid and all(r["score_breakdown"]["semantic_rank"] is None for r in hybrid)


def test_query_without_words_is_empty_not_an_error(service: SearchService) -> None:
    for mode in ("lexical", "semantic", "hybrid"):
        assert service.search("   ", mode=mode) == []
        assert service.search('"*:-()', mode=mode) == []


def test_fts_syntax_is_searched_as_plain_text(service: SearchService) -> None:
    for query in [
        '"install',
        "install*",
        "install AND",
        "NEAR(install",
        "col:install",
        "-install",
        "(install",
    ]:
        results = service.search(query, mode="lexical")
        assert results and results[0]["path"] == "docs/guide.md", query


def test_same_chunk_in_both_lists_has_both_ranks_and_one_row(service: SearchService) -> None:
    results = service.search("eggs flour sugar cake recipe", top_k=3)
    top = results[0]
    assert top["path"] == "docs/cooking.md"
    assert top["score_breakdown"]["lexical_rank"] == 1
    assert top["score_breakdown"]["semantic_rank"] == 1
    assert len({r["chunk_id"] for r in results}) == len(results)


def test_top_k_larger_than_corpus_returns_everything_once(service: SearchService) -> None:
    total = index_counts(service)["chunks"]
    for mode in ("semantic", "hybrid"):
        results = service.search("text", top_k=1000, mode=mode)
        assert len(results) == total
        assert len({r["chunk_id"] for r in results}) == total


def test_model_mismatch_tells_to_reindex_with_force(tmp_path: Path, service: SearchService) -> None:
    other = SearchService(service.settings.with_overrides(hash_embedding_dim=128))
    with pytest.raises(EmbeddingModelMismatch, match="--force"):
        other.search("install", mode="semantic")
    assert other.search("install", mode="lexical")


def test_get_chunk_and_get_file(service: SearchService) -> None:
    hit = service.search("eggs", mode="lexical")[0]
    chunk = service.get_chunk(hit["chunk_id"])
    # A search hit in full, and the headings that start in it (search results have none).
    assert chunk.pop("headings") == [{"offset": 0, "heading_path": hit["heading_path"]}]
    assert chunk == {k: v for k, v in hit.items() if k != "score_breakdown"}
    file = service.get_file("docs/guide.md")
    assert [c["chunk_index"] for c in file["chunks"]] == list(range(len(file["chunks"])))
    assert len(file["sha256"]) == 64


def test_ties_beyond_the_fetch_window_still_order_by_path(tmp_path: Path) -> None:
    docs = {f"same-{i:02}.md": "# Same\n\nidentical walrus text\n" for i in range(40, 0, -1)}
    service = build(tmp_path, docs)
    results = service.search("walrus", top_k=3, mode="lexical")
    assert [r["path"] for r in results] == ["docs/same-01.md", "docs/same-02.md", "docs/same-03.md"]
