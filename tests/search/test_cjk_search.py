"""Chinese, Japanese and Korean words inside running text are found lexically and in
hybrid mode, through the bigram side table; Latin-script search is untouched."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from cjk_docs import CJK_DOCS, CJK_WORDS
from rifflux_testing import make_settings

from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.search.lexical import (
    CONTENT_WEIGHT,
    HEADING_WEIGHT,
    lexical_search,
)
from rifflux.search.query import build_match_query
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService
from rifflux.store.connection import open_index, open_index_readonly


def write(root: Path, docs: dict[str, str]) -> None:
    for rel, text in docs.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tmp = tmp_path_factory.mktemp("cjk")
    write(tmp / "docs", CJK_DOCS)
    settings = make_settings(tmp)
    Indexer(settings).run([tmp / "docs"])
    return settings


@pytest.fixture(scope="module")
def service(indexed: Settings) -> Iterator[SearchService]:
    svc = SearchService(indexed)
    yield svc
    svc.close()


@pytest.mark.parametrize("word", sorted(CJK_WORDS))
@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_a_cjk_word_inside_running_text_is_found(
    service: SearchService, word: str, mode: str
) -> None:
    # The word is a substring of one document only: its file must rank first.
    assert [rel for rel, text in CJK_DOCS.items() if word in text] == [CJK_WORDS[word]]
    response = service.search_response(SearchRequest(query=word, mode=mode, top_k=3))
    top = response["results"][0]
    assert top["path"] == f"docs/{CJK_WORDS[word]}"
    assert word in top["content"] or word in top["heading_path"]
    if mode == "lexical":
        assert set(top["score_breakdown"]) == {"bm25"}
        assert top["score_breakdown"]["bm25"] < 0
        scores = [r["score_breakdown"]["bm25"] for r in response["results"]]
        assert scores == sorted(scores)
    else:
        assert top["score_breakdown"]["lexical_rank"] == 1


def test_a_word_absent_from_every_document_finds_nothing_lexically(
    service: SearchService,
) -> None:
    # 图书馆 (library): neither it nor any of its bigrams is in any document.
    assert not any(b in t for t in CJK_DOCS.values() for b in ("图书", "书馆"))
    assert service.search_response(SearchRequest(query="图书馆", mode="lexical"))["count"] == 0


def test_a_single_character_finds_the_words_that_start_with_it(service: SearchService) -> None:
    # 茶 starts 茶叶 (zh/garden.md) and 茶の in 抹茶の (ja/travel.md); 饭 is in no document.
    assert [rel for rel, text in CJK_DOCS.items() if "茶" in text] == [
        "zh/garden.md",
        "ja/travel.md",
    ]
    found = service.search_response(SearchRequest(query="茶", mode="lexical"))
    assert {r["path"] for r in found["results"]} == {"docs/zh/garden.md", "docs/ja/travel.md"}
    assert service.search_response(SearchRequest(query="饭", mode="lexical"))["count"] == 0


def test_a_mixed_query_ranks_by_its_latin_words_and_its_cjk_words(
    service: SearchService,
) -> None:
    response = service.search_response(
        SearchRequest(query="Docker 配置文件", mode="lexical", top_k=5)
    )
    assert response["results"][0]["path"] == "docs/mixed/deploy.md"
    assert "配置文件" in response["results"][0]["content"]


def test_a_mixed_query_also_finds_chunks_without_cjk_text_by_its_latin_words(
    service: SearchService,
) -> None:
    response = service.search_response(
        SearchRequest(query="upstream port 部署", mode="lexical", top_k=5)
    )
    paths = [r["path"] for r in response["results"]]
    # en/notes.md has no CJK text: it is ranked in chunks_fts, the others in chunks_cjk.
    assert "docs/en/notes.md" in paths and "docs/mixed/deploy.md" in paths
    scores = [r["score_breakdown"]["bm25"] for r in response["results"]]
    assert scores == sorted(scores)


def test_without_cjk_text_a_cjk_query_ranks_as_it_did_before_the_side_table(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    write(docs, {"en.md": CJK_DOCS["en/notes.md"], "b.md": "# Proxy\n\nA reverse proxy.\n"})
    settings = make_settings(tmp_path)
    Indexer(settings).run([docs])
    conn = open_index_readonly(settings.db_path)
    query = "reverse proxy 部署"
    # The reference: chunks_fts alone with the same MATCH text, as before the side table.
    expected = conn.execute(
        f"SELECT rowid, bm25(chunks_fts, {HEADING_WEIGHT}, {CONTENT_WEIGHT}) FROM chunks_fts "
        "WHERE chunks_fts MATCH ? ORDER BY 2",
        (build_match_query(query),),
    ).fetchall()
    hits = lexical_search(conn, query, 10)
    assert [(h.row_id, h.bm25) for h in hits] == [(r[0], r[1]) for r in expected]
    assert len(hits) == 2
    conn.close()


def test_latin_queries_take_the_unchanged_path(indexed: Settings) -> None:
    conn = open_index_readonly(indexed.db_path)
    # The same MATCH text as before the side table, against chunks_fts.
    assert build_match_query("reverse proxy") == '"reverse" OR "proxy"'
    paths = {h.key[0] for h in lexical_search(conn, "reverse proxy", 10)}
    assert paths == {"docs/mixed/deploy.md", "docs/en/notes.md"}


def side_rows(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM chunks_cjk").fetchone()[0])
    finally:
        conn.close()


def test_only_chunks_with_cjk_text_have_side_rows_and_they_follow_deletes(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    write(docs, {"en.md": CJK_DOCS["en/notes.md"], "zh.md": CJK_DOCS["zh/garden.md"]})
    settings = make_settings(tmp_path)
    Indexer(settings).run([docs])
    conn = open_index(settings.db_path)
    zh_chunks = conn.execute(
        "SELECT COUNT(*) FROM chunks c JOIN files f ON f.id = c.file_id WHERE f.path LIKE '%zh.md'"
    ).fetchone()[0]
    assert side_rows(settings.db_path) == zh_chunks > 0
    (docs / "zh.md").unlink()
    Indexer(settings).run([docs])
    assert side_rows(settings.db_path) == 0
    conn.execute("INSERT INTO chunks_cjk(chunks_cjk) VALUES ('integrity-check')")
    conn.close()


def test_an_index_from_before_the_side_table_gets_it_filled_by_the_next_writer(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    write(docs, {"ko.md": CJK_DOCS["ko/cooking.md"]})
    settings = make_settings(tmp_path)
    Indexer(settings).run([docs])
    conn = open_index(settings.db_path)
    expected = side_rows(settings.db_path)
    conn.executescript(
        "DROP TRIGGER chunks_cjk_delete; DROP TRIGGER chunks_cjk_update; DROP TABLE chunks_cjk;"
    )
    conn.close()
    # A reader of such an index still answers a CJK query (from chunks_fts), never fails.
    old = SearchService(settings)
    assert old.search_response(SearchRequest(query="배추", mode="lexical"))["count"] == 0
    old.close()
    open_index(settings.db_path).close()
    assert side_rows(settings.db_path) == expected > 0
    svc = SearchService(settings)
    found = svc.search_response(SearchRequest(query="배추", mode="lexical"))
    svc.close()
    assert [r["path"] for r in found["results"]][:1] == ["docs/ko.md"]
