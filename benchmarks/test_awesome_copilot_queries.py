"""The awesome-copilot query set is well-formed, and the benchmark's naive chunker is sound."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.awesome_copilot_quality import (
    DEFAULT_QUERIES,
    SPLITS,
    corpus_files,
    load_queries,
    paragraph_chunks,
    subset_files,
)
from benchmarks.harness import SHARED_CORPUS as CORPUS


def test_query_set_has_sixty_queries_in_two_fixed_halves() -> None:
    queries = load_queries(DEFAULT_QUERIES)
    assert len(queries) >= 60
    assert len({q.qid for q in queries}) == len(queries)
    assert len({q.text for q in queries}) == len(queries)
    halves = Counter(q.split for q in queries)
    assert set(halves) == set(SPLITS)
    assert all(count >= 25 for count in halves.values())
    for query in queries:
        assert query.style in {"keyword", "question", "paraphrase"}
        assert query.relevant, f"{query.qid} has no relevant file"
        assert set(query.relevant.values()) <= {1, 2}
        assert 2 in query.relevant.values(), f"{query.qid} has no primary (grade 2) file"


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpora/awesome-copilot is absent")
def test_every_judged_file_exists_in_the_corpus() -> None:
    files = set(corpus_files(CORPUS))
    missing = {path for query in load_queries(DEFAULT_QUERIES) for path in query.relevant} - files
    assert not missing


def test_subset_holds_every_judged_file_and_a_fixed_set_of_distractors() -> None:
    every = [f"dir/{n:03d}.md" for n in range(50)]
    judged = {"dir/007.md", "dir/031.md"}
    subset = subset_files(every, judged, 5)
    assert judged <= set(subset)
    assert len(subset) == 7
    assert subset == subset_files(list(reversed(every)), judged, 5)
    assert subset_files(every, judged, None) == sorted(every)


def test_paragraph_chunks_pack_paragraphs_up_to_the_limit_and_lose_no_words() -> None:
    text = "# Title\n\n" + "\n\n".join(f"para {n} " + "word " * 30 for n in range(40))
    text += "\n\n" + "x" * 50 + " " + "long " * 400
    chunks = paragraph_chunks(text, limit=300)
    assert all(len(chunk) <= 300 for chunk in chunks)
    assert " ".join(chunks).split() == text.split()
    assert chunks[0].startswith("# Title\n\npara 0")  # a heading is just another paragraph
