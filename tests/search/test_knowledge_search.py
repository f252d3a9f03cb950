"""Search by kind and metadata, and the knowledge searches, on real indexes of the written
corpus (tests/corpus/knowledge) built by the real pipeline with hash embeddings.

Expectations come from the corpus's judgements (``expected.json``), from chunks named by
hand, or from the files' own text, never from the code under test.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from knowledge_corpus import CORPUS, load_expected
from rifflux_testing import make_settings

from rifflux.cli import build_parser
from rifflux.errors import IndexMissingError, InvalidQueryError, NotFoundError
from rifflux.index.indexer import Indexer
from rifflux.search import knowledge
from rifflux.search.budget import estimate_tokens, response_tokens
from rifflux.search.multi_get import expand, read_files
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService
from rifflux.status import context_stats
from rifflux.store.reader import IndexReader

EXPECTED = load_expected()
DECISION_KEYS = {
    "title",
    "path",
    "status",
    "date",
    "decision_type",
    "decision",
    "score_breakdown",
    "chunk_id",
}
ERROR_KEYS = {"signature", "solution", "path", "heading_path", "score_breakdown", "chunk_id"}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> SearchService:
    tmp = tmp_path_factory.mktemp("knowledge")
    shutil.copytree(CORPUS, tmp / "kb", ignore=shutil.ignore_patterns("expected.json"))
    # The real model: the decisions must be found by meaning (the hash embedder's ranks
    # are arbitrary and tie the fused scores of the two best decisions).
    settings = make_settings(tmp, base_dir=tmp / "kb", embedding_backend="onnx")
    Indexer(settings).run([tmp / "kb"])
    return SearchService(settings)


# A troubleshooting page whose sections are chunks of their own (min_chunk_chars=0):
# chunk 0 the intro, 1 an install note, 2-3 an error section and its fix, 4 an FAQ note.
MIXED = (
    "# Troubleshooting the importer\n\nThe importer reads CSV files into the orders table.\n\n"
    "## Installing the importer\n\nInstall it with pip and run it from the repository root.\n\n"
    "## Error: EACCES: permission denied, open '/data/orders.csv'\n\n"
    "The importer runs as a user that cannot read the data folder.\n\n"
    "### Fix\n\nRun `chmod o+r /data/orders.csv`, or run the importer as the data owner.\n\n"
    "## Can the importer read Excel files?\n\nNo, export the sheet as CSV first.\n"
)
ADR = (
    "---\nstatus: accepted\ntags: [importer]\n---\n\n# Use CSV for imports\n\n"
    "## Context\n\nPartners send spreadsheets.\n\n## Decision\n\nThe importer reads CSV only.\n"
)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> SearchService:
    tmp = tmp_path_factory.mktemp("mixed")
    (tmp / "docs" / "adr").mkdir(parents=True)
    (tmp / "docs" / "importer.md").write_text(MIXED)
    (tmp / "docs" / "adr" / "0001-csv-imports.md").write_text(ADR)
    (tmp / "docs" / "notes.txt").write_text("The importer was written in 2023.\n")
    settings = make_settings(tmp, min_chunk_chars=0)
    Indexer(settings).run([tmp / "docs"])
    return SearchService(settings)


def found(service: SearchService, **arguments: Any) -> set[tuple[str, int]]:
    request = SearchRequest(**{"query": "importer", "top_k": 100, **arguments})
    return {(r["path"], r["chunk_index"]) for r in service.search_response(request)["results"]}


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_kinds_admit_exactly_the_chunks_of_those_kinds(mixed: SearchService, mode: str) -> None:
    importer = "docs/importer.md"
    assert [c["heading_path"] for c in mixed.get_file(importer)["chunks"]] == [
        "Troubleshooting the importer",
        "Troubleshooting the importer > Installing the importer",
        "Troubleshooting the importer > Error: EACCES: permission denied, open '/data/orders.csv'",
        "Troubleshooting the importer > Error: EACCES: permission denied, open '/data/orders.csv'"
        " > Fix",
        "Troubleshooting the importer > Can the importer read Excel files?",
    ]
    adr = {("docs/adr/0001-csv-imports.md", i) for i in range(3)}
    errors = {(importer, 2), (importer, 3)}
    notes = {(importer, 0), (importer, 1), (importer, 4), ("docs/notes.txt", 0)}
    assert len(mixed.get_file("docs/adr/0001-csv-imports.md")["chunks"]) == 3
    assert found(mixed, mode=mode, kinds=["decision"]) == adr
    assert found(mixed, mode=mode, kinds="error") == errors
    assert found(mixed, mode=mode, kinds=["note"]) == notes
    assert found(mixed, mode=mode, kinds=["error", "note"]) == errors | notes
    assert found(mixed, mode=mode, kinds=["decision", "error", "note"]) == adr | errors | notes
    assert found(mixed, mode=mode, kinds=["error"], path_glob="docs/adr/**") == set()


def test_tags_must_all_be_present_case_insensitively(service: SearchService) -> None:
    def files(**arguments: Any) -> set[str]:
        request = SearchRequest(query="database", top_k=100, mode="semantic", **arguments)
        return {r["path"] for r in service.search_response(request)["results"]}

    # The corpus's files with a `database` tag (broken-front-matter.md's block is text).
    tagged = {
        "docs/adr/0005-use-postgresql-as-the-primary-database.md",
        "docs/troubleshooting/database-connections.md",
        "notes/2024-03-01-planning.md",
    }
    assert files(tags=["Database"]) == tagged
    assert files(tags=["database", "#persistence"]) == {
        "docs/adr/0005-use-postgresql-as-the-primary-database.md"
    }
    assert files(tags="no-such-tag") == set()


def test_status_admits_files_with_that_status(service: SearchService) -> None:
    request = SearchRequest(query="decision", top_k=100, mode="semantic", status="Accepted")
    paths = {r["path"] for r in service.search_response(request)["results"]}
    judged = {p for p, j in EXPECTED.items() if j.get("status") == "accepted"}
    assert paths == judged
    proposed = SearchRequest(
        query="tracing", top_k=100, mode="semantic", status="proposed", kinds=["decision"]
    )
    assert {r["path"] for r in service.search_response(proposed)["results"]} == {
        "docs/adr/0006-adopt-opentelemetry-for-tracing.md"
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"kinds": ["decision", "bug"]}, "kinds must be one of decision, error, note, or a list"),
        ({"kinds": []}, "kinds must be one of decision, error, note, or a list of them (got [])"),
        ({"kinds": 3}, "kinds must be one of decision, error, note, or a list of them (got 3)"),
        ({"tags": ["  "]}, "tags must be a tag such as database, or a list of 1 to 100"),
        ({"status": ""}, "status must be a non-empty string such as accepted (got '')"),
    ],
)
def test_bad_values_are_one_line_errors(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidQueryError) as raised:
        SearchRequest(query="q", **arguments)
    assert str(raised.value).startswith(message)


def test_the_cli_flags_are_kind_tag_and_status() -> None:
    args = build_parser().parse_args(
        [
            "search",
            "q",
            "--kind",
            "decision",
            "--kind",
            "Error",
            "--tag",
            "DB",
            "--tag",
            "ops",
            "--status",
            "Accepted",
        ]
    )
    request = SearchRequest.from_arguments(vars(args))
    assert (request.kinds, request.tags, request.status) == (
        ("decision", "error"),
        ("db", "ops"),
        "accepted",
    )


def test_search_decisions_finds_the_accepted_database_decision(service: SearchService) -> None:
    accepted = knowledge.search_decisions(
        service, "which database did we choose", status="accepted"
    )
    first = accepted["results"][0]
    assert set(accepted) == {"query", "count", "embedding_model", "results"}
    assert set(first) == DECISION_KEYS
    assert first["path"] == "docs/adr/0005-use-postgresql-as-the-primary-database.md"
    assert (first["status"], first["date"], first["decision_type"]) == (
        "accepted",
        "2024-01-15",
        "architectural",
    )
    assert first["decision"].startswith('Chosen option: "PostgreSQL"')
    paths = [r["path"] for r in accepted["results"]]
    assert "docs/adr/0002-use-mongodb-for-persistence.md" not in paths
    assert all(r["status"] == "accepted" for r in accepted["results"])
    assert accepted["count"] == len(paths) == len(set(paths))  # one result per record

    every = knowledge.search_decisions(service, "which database did we choose", limit=100)
    statuses = {r["path"]: r["status"] for r in every["results"]}
    assert statuses["docs/adr/0002-use-mongodb-for-persistence.md"] == "superseded"
    assert set(statuses) == {p for p, j in EXPECTED.items() if j["kind"] == "decision"}


def test_search_decisions_filters_by_decision_type(service: SearchService) -> None:
    technical = knowledge.search_decisions(service, "decision", decision_type="Technical")
    assert {r["path"] for r in technical["results"]} == {
        "docs/adr/0006-adopt-opentelemetry-for-tracing.md",
        "docs/decisions/use-redis-for-session-storage.md",
    }
    with pytest.raises(InvalidQueryError, match=r"^limit must be an integer between 1 and 100"):
        knowledge.search_decisions(service, "x", limit=0)


@pytest.mark.parametrize(
    ("pasted", "path", "fix"),
    [
        (
            "psycopg2.OperationalError: could not connect to server: Connection refused\n"
            '\tIs the server running on host "db" (10.0.0.5) and accepting',
            "docs/troubleshooting/database-connections.md",
            "docker compose up -d postgres",
        ),
        (
            'FATAL:  password authentication failed for user "orders"',
            "docs/troubleshooting/database-connections.md",
            "ALTER ROLE orders PASSWORD",
        ),
        ("npm ERR! code ERESOLVE", "docs/troubleshooting/npm-install.md", "--legacy-peer-deps"),
        (
            "Error: error:0308010C:digital envelope routines::unsupported",
            "docs/troubleshooting/node-openssl.md",
            "--openssl-legacy-provider",
        ),
        (
            "ModuleNotFoundError: No module named 'orders'",
            "docs/troubleshooting/python-imports.md",
            "pip install -e .",
        ),
    ],
)
def test_search_errors_answers_a_pasted_error_line_with_its_fix(
    service: SearchService, pasted: str, path: str, fix: str
) -> None:
    response = knowledge.search_errors(service, pasted, limit=3)
    first = response["results"][0]
    assert set(first) == ERROR_KEYS
    assert first["path"] == path
    assert fix in first["solution"]
    assert first["heading_path"] in EXPECTED[path]["errors"]
    pairs = [(r["path"], r["heading_path"]) for r in response["results"]]
    assert len(pairs) == len(set(pairs)) <= 3


def test_knowledge_searches_fit_max_tokens(service: SearchService) -> None:
    response = knowledge.search_errors(service, "error permission denied", limit=10, max_tokens=300)
    budget = response["budget"]
    assert budget["max_tokens"] == 300
    # The budget is the whole answer's: its compact JSON, metadata included.
    assert budget["used_tokens"] == response_tokens(response) <= 300
    assert sum(r["tokens"] for r in response["results"]) < budget["used_tokens"]
    assert response["count"] == len(response["results"]) >= 1
    for result in response["results"]:
        assert estimate_tokens(result["solution"]) == result["tokens"]
    decisions = knowledge.search_decisions(service, "database", max_tokens=200)
    assert response_tokens(decisions) == decisions["budget"]["used_tokens"] <= 200


def test_multi_get_returns_files_in_the_order_asked_under_one_budget(
    service: SearchService,
) -> None:
    reader = IndexReader(service.connection())
    wanted = expand(
        reader, ["docs/faq.md", "docs/adr/000[1-3]-*.md", "docs/faq.md", "nothing/**/*.md"]
    )
    assert [w.path for w in wanted] == [
        "docs/faq.md",
        "docs/adr/0001-record-architecture-decisions.md",
        "docs/adr/0002-use-mongodb-for-persistence.md",
        "docs/adr/0003-use-react-for-the-web-frontend.md",
    ]
    assert [w.by_glob for w in wanted] == [False, True, True, True]
    paths = [w.path for w in wanted]
    whole = read_files(reader, paths, None)
    assert whole["count"] == 4 and whole["not_included"] == []
    for entry in whole["files"]:
        indexed = service.get_file(entry["path"])["chunks"]
        assert entry["content"] == "\n\n".join(c["content"] for c in indexed)
        assert entry["tokens"] == estimate_tokens(entry["content"]) and not entry["truncated"]
    # Room for the first file whole, a cut of the second and the answer around them.
    one = {**whole, "files": whole["files"][:1], "not_included": paths[1:]}
    budget = response_tokens(one) + 90
    fitted = read_files(reader, paths, budget)
    assert [f["path"] for f in fitted["files"]] == paths[:2]
    assert [f["truncated"] for f in fitted["files"]] == [False, True]
    assert response_tokens(fitted) == fitted["budget"]["used_tokens"] <= budget
    assert fitted["not_included"] == paths[2:] and fitted["budget"]["dropped"] == 2
    assert fitted["count"] == 2
    with pytest.raises(NotFoundError, match=r"^'docs/nope\.md' is not an indexed file"):
        expand(reader, ["docs/nope.md"])


def test_context_stats_counts_each_knowledge_base(service: SearchService) -> None:
    stats = context_stats(service)
    assert set(stats) == {
        "files",
        "chunks",
        "embeddings",
        "embedding_coverage",
        "embedding_model",
        "generation",
        "db_path",
        "knowledge",
    }
    block = stats["knowledge"]
    judged = [j for j in EXPECTED.values()]
    by_status: dict[str, int] = {}
    for j in judged:
        if j["kind"] == "decision":
            by_status[j["status"]] = by_status.get(j["status"], 0) + 1
    assert block["decisions"] == {"total": sum(by_status.values()), "by_status": by_status}
    assert block["error_pairs"] == sum(len(j.get("errors", [])) for j in judged)
    assert block["error_files"] == sum(j["kind"] == "error" for j in judged)
    assert block["notes"] == sum(j["kind"] == "note" for j in judged)
    assert {"tag": "database", "files": 3} in block["tags"]
    assert sum(block["chunks_by_kind"].values()) == stats["chunks"]
    assert stats["embedding_coverage"] == 1.0


def test_the_knowledge_reads_create_nothing_without_an_index(tmp_path: Path) -> None:
    service = SearchService(make_settings(tmp_path / "none"))
    calls = [
        lambda: knowledge.search_decisions(service, "database"),
        lambda: knowledge.search_errors(service, "Error: x"),
        lambda: context_stats(service),
    ]
    for call in calls:
        with pytest.raises(IndexMissingError, match=r"^no index at "):
            call()
    assert not (tmp_path / "none").exists()


def test_an_index_without_the_knowledge_tables_reads_as_notes(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("---\ntitle: Alpha\ntags: [x]\n---\n# Alpha\n\nThe importer.\n")
    (docs / "b.md").write_text("# Beta\n\nThe importer again.\n")
    settings = make_settings(tmp_path)
    Indexer(settings).run([docs])
    conn = sqlite3.connect(settings.db_path)
    for table in ("file_knowledge", "file_tags", "error_pairs", "chunks_about"):
        conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.close()
    service = SearchService(settings)  # read-only: nothing is created
    assert found(service, kinds=["note"]) == {("docs/a.md", 0), ("docs/b.md", 0)}
    assert found(service, kinds=["decision", "error"]) == set()
    assert found(service, tags=["x"]) == found(service, status="accepted") == set()
    assert found(service, mode="lexical") == {("docs/a.md", 0), ("docs/b.md", 0)}
    assert knowledge.search_decisions(service, "importer")["count"] == 0
    assert knowledge.search_errors(service, "importer")["count"] == 0
    stats = context_stats(service)["knowledge"]
    assert stats["chunks_by_kind"] == {"decision": 0, "error": 0, "note": 2}
    assert stats["notes"] == 2
