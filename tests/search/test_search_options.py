"""The optional search arguments of issue 12, on real indexes built by the real pipeline.

Expectations are independent of the code under test: chunks named by hand, the other
modes' rankings, file contents read back with ``get_file``, mtimes set with ``os.utime``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from rifflux_testing import copy_corpus, make_settings

from rifflux.errors import InvalidQueryError
from rifflux.index.indexer import Indexer
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService

DAY = 86_400
T0 = 1_700_000_000  # 2023-11-14T22:13:20Z

DOCS = {
    # The exact phrase once; its words again only in other chunks.
    "phrase.md": "# Phrase\n\nThe quick brown fox jumps over the lazy dog.\n",
    # The phrase's words many times, never in order: a better bm25 without the phrase.
    "scattered.md": "# Scattered\n\nquick dogs, brown cats and fox dens. The fox is quick; "
    "brown leaves. A brown fox and a quick fox. quick quick brown.\n",
    "guide.md": "# Guide\n\n## Install\n\nInstall the package with apt on Linux.\n\n"
    "## Usage\n\nRun the search command with a query about the fox.\n",
    "cooking.md": "# Cooking\n\nThe recipe needs two eggs, flour and sugar for the cake.\n",
    "twin-a.md": "# Twin\n\nzebra quokka identical text\n",
    "twin-b.md": "# Twin\n\nzebra quokka identical text\n",
    "notes/plants.txt": "Tomatoes want full sun. Basil grows well next to tomatoes.\n",
    "notes/deep/more.md": "# More\n\nA Basil pesto RECIPE with pine nuts and garlic.\n",
}
MTIMES = {name: T0 + i * DAY for i, name in enumerate(sorted(DOCS))}
KEYS = ("path", "chunk_index")


def build(root: Path, docs: dict[str, str], **overrides: Any) -> SearchService:
    docs_dir = root / "docs"
    for name, text in docs.items():
        target = docs_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        os.utime(target, (MTIMES.get(name, T0), MTIMES.get(name, T0)))
    settings = make_settings(root, **{"min_chunk_chars": 0, **overrides})
    Indexer(settings).run([docs_dir])
    return SearchService(settings)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> SearchService:
    return build(tmp_path_factory.mktemp("options"), DOCS)


@pytest.fixture(scope="module")
def corpus_service(tmp_path_factory: pytest.TempPathFactory) -> SearchService:
    """40 real markdown files (about 600 chunks) plus the hand-made ones."""
    root = tmp_path_factory.mktemp("corpus")
    copy_corpus(root / "docs" / "agents", limit=40)
    return build(root, DOCS)


def keys(results: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(r["path"], r["chunk_index"]) for r in results]


def search(service: SearchService, query: str, **arguments: Any) -> list[dict[str, Any]]:
    return service.search_response(SearchRequest.from_arguments({"query": query, **arguments}))[
        "results"
    ]


# -- minmax: the Context Harness spec's five validation tests ---------------------------

MINMAX_KEYS = {"minmax", "lexical_norm", "semantic_norm", "lexical_rank", "semantic_rank"}
QUERIES = ("quick brown fox", "basil tomatoes recipe", "install package", "zebra text")


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 1.0])
def test_minmax_scores_lie_in_the_unit_interval_with_the_exact_breakdown(
    corpus_service: SearchService, query: str, alpha: float
) -> None:
    results = search(corpus_service, query, fusion="minmax", alpha=alpha, top_k=50)
    assert results
    for r in results:
        breakdown = r["score_breakdown"]
        assert set(breakdown) == MINMAX_KEYS
        for name in ("minmax", "lexical_norm", "semantic_norm"):
            assert 0.0 <= breakdown[name] <= 1.0
        if breakdown["lexical_rank"] is None:
            assert breakdown["lexical_norm"] == 0.0
        if breakdown["semantic_rank"] is None:
            assert breakdown["semantic_norm"] == 0.0
        want = (1 - alpha) * breakdown["lexical_norm"] + alpha * breakdown["semantic_norm"]
        assert breakdown["minmax"] == pytest.approx(want)


def side_ranked(fused: list[dict[str, Any]], side: str) -> list[tuple[str, int]]:
    """The fused results the ``side`` found, in fused order."""
    return [k for k, r in zip(keys(fused), fused, strict=True) if r["score_breakdown"][side]]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize(
    ("alpha", "mode", "side"),
    [(1.0, "semantic", "semantic_rank"), (0.0, "lexical", "lexical_rank")],
)
def test_minmax_alpha_one_orders_like_the_vector_side_and_zero_like_the_keyword_side(
    corpus_service: SearchService, query: str, alpha: float, mode: str, side: str
) -> None:
    alone = keys(search(corpus_service, query, mode=mode, top_k=20))
    fused = search(corpus_service, query, fusion="minmax", alpha=alpha, candidate_k=20, top_k=20)
    found = side_ranked(fused, side)
    assert found == alone[: len(found)]
    # Only the side's weakest candidate (normalised to 0.0) may tie with chunks it did
    # not return; every other one comes first, in the side's order.
    assert keys(fused)[: len(alone) - 1] == alone[:-1]


def test_minmax_tie_breaking_is_stable_across_runs(tmp_path: Path) -> None:
    first = build(tmp_path / "a", DOCS)
    second = build(tmp_path / "b", DOCS)
    runs = [search(s, "zebra quokka", fusion="minmax", top_k=10) for s in (first, second, first)]
    assert keys(runs[0]) == keys(runs[1]) == keys(runs[2])
    # The twins tie on both sides: by path.
    assert keys(runs[0])[:2] == [("docs/twin-a.md", 0), ("docs/twin-b.md", 0)]
    tied = ("minmax", "lexical_norm", "semantic_norm")
    assert [runs[0][0]["score_breakdown"][k] for k in tied] == [
        runs[0][1]["score_breakdown"][k] for k in tied
    ]


def test_minmax_a_chunk_found_by_one_side_only_surfaces(corpus_service: SearchService) -> None:
    # No admitted chunk has the word "deploy": the keyword side finds nothing, the vector
    # side still ranks the admitted chunks, and they come back.
    results = search(corpus_service, "deploy", fusion="minmax", path_glob="docs/notes/**", top_k=5)
    assert {r["path"] for r in results} == {"docs/notes/plants.txt", "docs/notes/deep/more.md"}
    assert all(r["score_breakdown"]["lexical_rank"] is None for r in results)
    assert results[0]["score_breakdown"]["minmax"] > 0


def test_minmax_takes_80_candidates_per_side_and_never_fewer_than_top_k(
    corpus_service: SearchService,
) -> None:
    def deepest(results: list[dict[str, Any]]) -> int:
        breakdowns = [r["score_breakdown"] for r in results]
        return max(b[side] or 0 for b in breakdowns for side in ("lexical_rank", "semantic_rank"))

    query = "review code security"
    minmax = search(corpus_service, query, fusion="minmax", alpha=0.5, top_k=80)
    assert len(minmax) == 80 and deepest(minmax) <= 80
    vector_first = search(corpus_service, query, fusion="minmax", alpha=1, top_k=80)
    assert [r["score_breakdown"]["semantic_rank"] for r in vector_first][:79] == list(range(1, 80))
    # RRF takes top_k x 2 = 160 per side by default: deeper.
    assert deepest(search(corpus_service, query, top_k=80)) > 80
    # alpha 1: the vector side's candidates first, in their order; candidate_k 3 < top_k 7.
    few = search(corpus_service, "review code", fusion="minmax", alpha=1, candidate_k=3, top_k=7)
    assert [r["score_breakdown"]["semantic_rank"] for r in few][:6] == list(range(1, 7))


# -- RRF weights and min_cosine ------------------------------------------------------------


def test_lexical_weight_zero_orders_like_the_semantic_side(
    corpus_service: SearchService,
) -> None:
    semantic = keys(search(corpus_service, "code review security", mode="semantic", top_k=10))
    fused = search(corpus_service, "code review security", lexical_weight=0, top_k=10)
    assert keys(fused) == semantic


def test_per_call_weights_change_the_rrf_scores(service: SearchService) -> None:
    default = search(service, "quick fox", top_k=3)
    weighted = search(service, "quick fox", lexical_weight=0.4, semantic_weight=0.6, top_k=3)
    top = weighted[0]["score_breakdown"]
    want = 0.0
    if top["lexical_rank"] is not None:
        want += 0.4 / (60 + top["lexical_rank"])
    if top["semantic_rank"] is not None:
        want += 0.6 / (60 + top["semantic_rank"])
    assert top["rrf"] == pytest.approx(want)
    assert default[0]["score_breakdown"]["rrf"] != top["rrf"]


def test_min_cosine_drops_weak_semantic_candidates_before_truncation(
    corpus_service: SearchService,
) -> None:
    everything = search(corpus_service, "security review", mode="semantic", top_k=100)
    threshold = everything[5]["score_breakdown"]["cosine"]
    strong = keys([r for r in everything if r["score_breakdown"]["cosine"] >= threshold])
    got = search(corpus_service, "security review", mode="semantic", min_cosine=threshold)
    assert keys(got) == strong[:10]
    hybrid = search(corpus_service, "security review", min_cosine=threshold, top_k=100)
    assert set(side_ranked(hybrid, "semantic_rank")) == set(strong)


# -- filters -------------------------------------------------------------------------------


def test_a_glob_admitting_three_chunks_returns_those_three(
    corpus_service: SearchService,
) -> None:
    # The agents' files dominate "review"; the filter admits only guide.md (3 chunks).
    want = {
        (c["path"], c["chunk_index"]) for c in corpus_service.get_file("docs/guide.md")["chunks"]
    }
    assert len(want) == 3
    for mode in ("semantic", "hybrid"):
        got = search(corpus_service, "code review security", mode=mode, path_glob="**/guide.md")
        assert set(keys(got)) == want, mode
    lexical = search(corpus_service, "install fox", mode="lexical", path_glob="docs/gu?de.*")
    assert set(keys(lexical)) == want - {("docs/guide.md", 0)}


@pytest.mark.parametrize(
    ("glob", "paths"),
    [
        ("docs/*.txt", set()),
        ("docs/**/*.txt", {"docs/notes/plants.txt"}),
        ("docs/notes/*", {"docs/notes/plants.txt"}),
        ("docs/notes/**", {"docs/notes/plants.txt", "docs/notes/deep/more.md"}),
        (
            ["docs/twin-[ab].md", "docs/cook*"],
            {"docs/twin-a.md", "docs/twin-b.md", "docs/cooking.md"},
        ),
    ],
)
def test_path_glob_double_star_crosses_folders_and_star_does_not(
    service: SearchService, glob: str | list[str], paths: set[str]
) -> None:
    got = search(service, "basil zebra eggs tomatoes", mode="semantic", path_glob=glob, top_k=50)
    assert {r["path"] for r in got} == paths


def test_modified_window_file_types_and_content_filters(service: SearchService) -> None:
    by_time = sorted(DOCS, key=MTIMES.__getitem__)
    after, before = MTIMES[by_time[2]], MTIMES[by_time[5]]
    want = {f"docs/{name}" for name in by_time[2:5]}
    for window in (
        {"modified_after": after, "modified_before": before},
        {"modified_after": str(after), "modified_before": str(before)},
        {"modified_after": "2023-11-16T22:13:20Z", "modified_before": "2023-11-19T23:13:20+01:00"},
    ):
        got = search(service, "the quick fox eggs zebra", mode="semantic", top_k=50, **window)
        assert {r["path"] for r in got} == want, window
    assert {r["path"] for r in search(service, "basil", mode="semantic", file_types=["TXT"])} == {
        "docs/notes/plants.txt"
    }
    got = search(service, "basil", mode="semantic", content_contains="basil PESTO recipe")
    assert keys(got) == [("docs/notes/deep/more.md", 0)]


def test_content_contains_admits_exactly_the_chunks_that_hold_the_text(
    corpus_service: SearchService,
) -> None:
    base = corpus_service.settings.base_dir
    assert base is not None
    want = set()
    for path in sorted((base / "docs").rglob("*.*")):
        file = corpus_service.get_file(path.relative_to(base).as_posix())
        want |= {
            (file["path"], c["chunk_index"])
            for c in file["chunks"]
            if "terraform" in c["content"].casefold()
        }
    assert 5 < len(want) < 100
    got = search(corpus_service, "plan", mode="semantic", content_contains="TerraForm", top_k=100)
    assert set(keys(got)) == want


def test_a_filter_admitting_nothing_returns_nothing(service: SearchService) -> None:
    assert search(service, "fox", path_glob="nowhere/**") == []
    assert search(service, "fox", modified_after="2100-01-01") == []


# -- phrases -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_a_quoted_phrase_beats_a_chunk_with_the_words_scattered(
    service: SearchService, mode: str
) -> None:
    plain = search(service, "quick brown fox", mode="lexical")
    assert plain[0]["path"] == "docs/scattered.md"  # More of the words: a better bm25.
    quoted = search(service, 'find "quick brown fox" please', mode=mode)
    assert quoted[0]["path"] == "docs/phrase.md"
    assert {r["path"] for r in quoted} >= {"docs/scattered.md", "docs/phrase.md"}


@pytest.mark.parametrize(
    "query", ['"quick brown fox', 'quick "brown fox', 'quick" brown" fox"', '"" quick brown fox']
)
def test_unbalanced_empty_or_one_word_quotes_are_plain_text(
    service: SearchService, query: str
) -> None:
    # 'quick" brown" fox"': '" brown"' pairs into a one-word span (a term), the last
    # quote is unpaired: no phrase, the plain words' ranking.
    words = search(service, "quick brown fox", mode="lexical")
    assert search(service, query, mode="lexical") == words


# -- group_by ------------------------------------------------------------------------------


def test_group_by_file_returns_each_files_best_chunk(corpus_service: SearchService) -> None:
    query = "security review checklist"
    chunks = search(corpus_service, query, candidate_k=200, top_k=100)
    best: dict[str, tuple[str, int]] = {}
    for r in chunks:
        best.setdefault(r["path"], (r["path"], r["chunk_index"]))
    for fusion in ("rrf", "minmax"):
        files = search(corpus_service, query, fusion=fusion, group_by="file", top_k=10)
        assert len({r["path"] for r in files}) == len(files) == 10
        scores = [r["score_breakdown"][fusion] for r in files]
        assert scores == sorted(scores, reverse=True)
        assert set(files[0]) == {
            "chunk_id",
            "path",
            "heading_path",
            "chunk_index",
            "content",
            "score_breakdown",
        }
    files = search(corpus_service, query, group_by="file", candidate_k=200, top_k=10)
    assert all(best[r["path"]] == (r["path"], r["chunk_index"]) for r in files)


def test_group_by_file_ties_break_newer_file_first(tmp_path: Path) -> None:
    service = build(tmp_path, DOCS)
    # Same score; the later path is the newer file.
    for name, mtime in {"twin-a.md": T0, "twin-b.md": T0 + DAY}.items():
        os.utime(tmp_path / "docs" / name, (mtime, mtime))
    Indexer(service.settings).run([tmp_path / "docs"])
    got = search(service, "zebra quokka", group_by="file", mode="lexical", top_k=2)
    assert keys(got) == [("docs/twin-b.md", 0), ("docs/twin-a.md", 0)]
    chunks = search(service, "zebra quokka", mode="lexical", top_k=2)
    assert keys(chunks) == [("docs/twin-a.md", 0), ("docs/twin-b.md", 0)]


def test_group_by_file_searches_deeper_until_top_k_files(tmp_path: Path) -> None:
    # One file holds the 30 best chunks; the other files only come after them.
    big = "\n\n".join(f"## Part {i}\n\nalpha beta gamma {i}" for i in range(30))
    docs = {
        "big.md": f"# Big\n\n{big}\n",
        **{f"f{i}.md": f"# F{i}\n\nalpha {i}\n" for i in range(5)},
    }
    service = build(tmp_path, docs)
    got = search(service, "alpha beta gamma", mode="lexical", group_by="file", top_k=6)
    assert {r["path"] for r in got} == {"docs/big.md", *(f"docs/f{i}.md" for i in range(5))}


# -- bad values ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"alpha": 2}, "alpha must be a number from 0 to 1"),
        ({"group_by": "page"}, "group_by must be one of chunk, file (got 'page')"),
        ({"modified_after": "last tuesday"}, "modified_after must be an ISO 8601 date"),
        ({"modified_before": "2024-13-01"}, "modified_before must be an ISO 8601 date"),
        ({"path_glob": ["*.md"] * 10_000}, "path_glob must be a POSIX glob"),
        ({"lexical_weight": -0.5}, "lexical_weight must be a number >= 0 (got -0.5)"),
        ({"semantic_weight": "heavy"}, "semantic_weight must be a number >= 0"),
        ({"lexical_weight": 0, "semantic_weight": 0.0}, "lexical_weight and semantic_weight"),
        ({"fusion": "maxnorm"}, "fusion must be one of rrf, minmax (got 'maxnorm')"),
        ({"candidate_k": 0}, "candidate_k must be an integer between 1 and 1000"),
        ({"min_cosine": -2}, "min_cosine must be a number from -1 to 1 (got -2)"),
        ({"file_types": ["md", ""]}, "file_types must be an extension"),
        ({"content_contains": ""}, "content_contains must be a non-empty string"),
    ],
)
def test_each_bad_value_is_one_line_naming_the_argument(
    arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidQueryError) as raised:
        SearchRequest.from_arguments({"query": "x", **arguments})
    text = str(raised.value)
    assert text.startswith(message) and "\n" not in text
    assert len(text) < 300


def test_both_weights_zero_through_the_settings_is_refused(tmp_path: Path) -> None:
    service = build(tmp_path, {"a.md": "# A\n\nfox\n"}, semantic_weight=0.0)
    with pytest.raises(InvalidQueryError, match="must not both be 0"):
        search(service, "fox", lexical_weight=0)
