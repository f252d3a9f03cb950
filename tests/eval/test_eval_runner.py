import math
import time
from pathlib import Path

import pytest
from eval_support import LEXICAL_MRR, LEXICAL_NDCG, LEXICAL_RECALL, ODD_ID

from rifflux.config import Settings
from rifflux.eval import beir
from rifflux.eval.runner import (
    distinct_documents,
    evaluate_search,
    judged_queries,
    rank_documents,
    run_eval,
)

# How long the fake search in the p50 test takes per query.
SEARCH_SLEEP_S = 0.02


def hash_settings() -> Settings:
    return Settings(embedding_backend="hash")


def test_best_chunk_decides_a_documents_position() -> None:
    doc_of_path = {"docs/a.md": "a", "docs/b.md": "b"}
    paths = ["docs/b.md", "docs/a.md", "docs/b.md", "docs/unknown.md"]
    assert distinct_documents(paths, doc_of_path) == ["b", "a"]


def test_rank_documents_searches_deeper_until_it_has_top_k_documents() -> None:
    doc_of_path = {f"docs/{i}.md": str(i) for i in range(10)}
    # Every document has four chunks, listed together: 3 chunks per document is too few.
    chunks = [f"docs/{i}.md" for i in range(10) for _ in range(4)]
    depths: list[int] = []

    def search(query: str, n: int) -> list[str]:
        depths.append(n)
        return chunks[:n]

    assert rank_documents(search, "q", doc_of_path, 5) == ["0", "1", "2", "3", "4"]
    assert depths == [15, 30]


def test_rank_documents_stops_when_the_index_runs_out() -> None:
    calls: list[int] = []

    def search(query: str, n: int) -> list[str]:
        calls.append(n)
        return ["docs/a.md"]

    assert rank_documents(search, "q", {"docs/a.md": "a"}, 100) == ["a"]
    assert calls == [300]


def test_judged_queries_skip_queries_without_relevant_documents_or_text() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"a": 0}, "q3": {"b": 2}}
    assert judged_queries({"q1": "one", "q2": "two"}, qrels) == {"q1": "one"}


def test_evaluate_search_averages_hand_computed_metrics() -> None:
    doc_of_path = {f"docs/{d}.md": d for d in "abcd"}
    rankings = {"first": ["docs/a.md", "docs/b.md"], "second": ["docs/c.md", "docs/b.md"]}
    qrels = {"q1": {"a": 1}, "q2": {"b": 1, "d": 1}}

    def search(query: str, n: int) -> list[str]:
        time.sleep(SEARCH_SLEEP_S)
        return rankings[query]

    result = evaluate_search(
        search,
        {"q1": "first", "q2": "second"},
        qrels,
        doc_of_path,
        top_k=100,
    )
    q2_ndcg = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert math.isclose(result.ndcg, (1 + q2_ndcg) / 2)
    assert math.isclose(result.recall, (1 + 0.5) / 2)
    assert math.isclose(result.mrr, (1 + 0.5) / 2)
    assert result.runs == {"q1": ["a", "b"], "q2": ["c", "b"]}
    # A lower bound only (sleep never returns early), so load cannot fail it; a p50 in
    # seconds instead of milliseconds would.
    assert result.p50_ms >= SEARCH_SLEEP_S * 1000


def test_lexical_eval_on_a_tiny_dataset_matches_hand_computed_values(
    beir_dataset: Path, tmp_path: Path
) -> None:
    report = run_eval(
        beir_dataset,
        beir_dataset / "qrels" / "test.tsv",
        settings=hash_settings(),
        modes=["lexical"],
        cache_root=tmp_path / "cache",
    )
    assert report.queries == 2
    lexical = report.modes["lexical"]
    assert lexical.runs["q2"] == ["d3", ODD_ID]
    assert lexical.ndcg == pytest.approx(LEXICAL_NDCG)
    assert lexical.recall == pytest.approx(LEXICAL_RECALL)
    assert lexical.mrr == pytest.approx(LEXICAL_MRR)


def test_second_run_reuses_the_cached_index_without_embedding(
    beir_dataset: Path, tmp_path: Path
) -> None:
    qrels = beir_dataset / "qrels" / "test.tsv"
    kwargs = {"settings": hash_settings(), "modes": ["hybrid"], "cache_root": tmp_path / "c"}
    first = run_eval(beir_dataset, qrels, **kwargs)
    second = run_eval(beir_dataset, qrels, **kwargs)
    assert first.index.cache_dir == second.index.cache_dir
    assert (first.index.report.files_indexed, first.index.report.vectors_new) == (4, 4)
    assert second.index.report.files_unchanged == 4
    assert (second.index.report.files_indexed, second.index.report.vectors_new) == (0, 0)
    assert second.modes["hybrid"].runs == first.modes["hybrid"].runs


def test_cache_directory_changes_with_the_chunking_settings(beir_dataset: Path) -> None:
    root = Path("/cache")
    default = beir.cache_dir_for(beir_dataset, hash_settings(), root)
    smaller = beir.cache_dir_for(
        beir_dataset, hash_settings().with_overrides(max_chunk_chars=500), root
    )
    assert default.parent == smaller.parent == root
    assert default.name.startswith("tiny-beir-")
    assert default != smaller
