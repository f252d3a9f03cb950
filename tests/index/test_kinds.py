"""The document kind rules, table-driven over the written corpus ``tests/corpus/knowledge``.

``expected.json`` holds each file's judged kind, its error sections (by heading path) and a
decision's fields; ``knowledge_corpus.evaluate`` scores the same comparison as precision
and recall per kind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from knowledge_corpus import CORPUS, DECISION_FIELDS, detect, evaluate, load_expected

from rifflux.index.changes import FileWork
from rifflux.index.kinds import canonical_status, signature_in
from rifflux.index.prepare import chunk_file

EXPECTED = load_expected()


def test_the_judged_corpus_covers_every_kind_in_both_halves() -> None:
    files = {p.relative_to(CORPUS).as_posix() for p in CORPUS.rglob("*") if p.is_file()}
    assert set(EXPECTED) == files - {"expected.json"}
    for half in (True, False):
        kinds = {j["kind"] for p, j in EXPECTED.items() if p.startswith("heldout/") is half}
        assert kinds == {"decision", "error", "note"}


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_each_file_gets_its_judged_kind_sections_and_fields(path: str) -> None:
    judged = EXPECTED[path]
    found = detect(CORPUS, path)
    assert found.kind == judged["kind"]
    assert [e.heading_path for e in found.errors] == judged.get("errors", [])
    for name in DECISION_FIELDS:
        if name in judged:
            assert getattr(found, name) == judged[name]
    if found.kind == "decision":
        assert found.decision  # the Decision (Outcome) section's text
    for pair in found.errors:
        assert pair.signature and pair.solution


def test_precision_and_recall_are_reported_per_kind() -> None:
    report = evaluate(CORPUS, EXPECTED, EXPECTED)
    assert report.files == len(EXPECTED)
    assert {kind: (s.precision, s.recall) for kind, s in report.kinds.items()} == {
        "decision": (1.0, 1.0),
        "error": (1.0, 1.0),
        "note": (1.0, 1.0),
    }
    assert not report.mistakes


def test_a_decision_stores_the_decision_section_and_its_type() -> None:
    found = detect(CORPUS, "docs/adr/0005-use-postgresql-as-the-primary-database.md")
    assert found.title == "Use PostgreSQL as the primary database"
    assert found.decision.startswith('Chosen option: "PostgreSQL"')
    assert "Consequences" not in found.decision
    assert found.decision_type == "architectural"
    assert found.tags == ("database", "persistence")


def test_an_error_pair_stores_the_signature_and_the_fix_not_the_cause() -> None:
    found = detect(CORPUS, "docs/troubleshooting/database-connections.md")
    first = found.errors[0]
    assert first.signature.startswith("psycopg2.OperationalError: could not connect to server")
    assert first.solution.startswith("Start the database with `docker compose up -d postgres`")
    assert "is not running" not in first.solution  # the Cause section


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ("Accepted", "accepted"),
        ("accepted (2024-01-15)", "accepted"),
        ("Superseded by [5. Use PostgreSQL](0005-use-postgresql.md)", "superseded"),
        ("~~Accepted~~ Superseded by ADR-0015", "superseded"),
        ("Accepted. Supersedes ADR-0012.", "accepted"),
        ("Draft", "proposed"),
        ("**Rejected**", "rejected"),
        ("Obsolete", "deprecated"),
        ("[proposed | rejected | accepted | deprecated | superseded by ADR-0005]", ""),
        ("{proposed | rejected | accepted}", ""),
        ("WIP", "wip"),
        ("", ""),
    ],
)
def test_decision_statuses_are_one_canonical_word(raw: str, status: str) -> None:
    assert canonical_status(raw) == status


@pytest.mark.parametrize(
    ("text", "signature"),
    [
        ("Error: EACCES: permission denied", "Error: EACCES: permission denied"),
        ("```\nKeyError: 'orders'\n```", "KeyError: 'orders'"),
        ("> fatal: not a git repository", "fatal: not a git repository"),
        ("```console\n$ make\nmake: *** [build] Error 2\n```", "make: *** [build] Error 2"),
        (
            "```\n2024-01-01T00:00:00Z ERROR api timeout\n```",
            "2024-01-01T00:00:00Z ERROR api timeout",
        ),
        (
            "The import fails with `ModuleNotFoundError`.",
            "The import fails with `ModuleNotFoundError`.",
        ),
        (
            "Set NODE_OPTIONS if you see ERR_OSSL_EVP_UNSUPPORTED.",
            "Set NODE_OPTIONS if you see ERR_OSSL_EVP_UNSUPPORTED.",
        ),
        # Casual mentions and source code are not signatures.
        ("If you see an error, check the logs.", ""),
        ("Error handling is described below.", ""),
        ("```python\ntry:\n    load()\nexcept KeyError:\n    pass\n```", ""),
        ('```python\nprint("Authentication failed. Check credentials.")\n```', ""),
        ('```json\n{"error": {"code": "not_found"}}\n```', ""),
        ("If `ax` is installed (not `command not found`), run it.", ""),
        ("```\nFindings: 3 (1 CRITICAL, 1 HIGH)\n```", ""),
    ],
)
def test_error_signatures_are_error_lines_not_mentions(text: str, signature: str) -> None:
    assert signature_in(text) == signature


def test_an_error_section_spanning_chunks_maps_to_those_chunks() -> None:
    text = (
        "# Runbook\n\nIntro about the service.\n\n"
        "## Note on deploys\n\n" + "Deploys happen on Tuesdays. " * 20 + "\n\n"
        "## Error: connect ECONNREFUSED 127.0.0.1:5432\n\n" + "The database is down. " * 30 + "\n\n"
        "### Fix\n\nStart it with `docker compose up -d postgres`.\n\n"
        "## Scaling\n\n" + "Add replicas. " * 40 + "\n"
    )
    prepared = chunk_file(
        FileWork("ops/runbook.md", 0, len(text), "", text), max_chars=400, min_chars=0
    )
    assert prepared.knowledge is not None
    (pair,) = prepared.knowledge.errors
    inside = [c for c in prepared.chunks if pair.first_chunk <= c.chunk_index <= pair.last_chunk]
    assert pair.last_chunk > pair.first_chunk
    assert "ECONNREFUSED" in inside[0].content and "docker compose" in inside[-1].content
    outside = [c.content for c in prepared.chunks if c not in inside]
    assert not any("ECONNREFUSED" in c or "docker compose" in c for c in outside)
    assert pair.solution == "Start it with `docker compose up -d postgres`."


def test_plain_text_has_no_headings_but_may_hold_one_error_pair(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Error: something broke\n\nTo fix this, restart.\n")
    found = detect(tmp_path, "a.txt")
    assert found.kind == "error"
    assert [(e.heading_path, e.signature) for e in found.errors] == [("", "Error: something broke")]
    assert detect(CORPUS, "notes/recipes.txt").kind == "note"
