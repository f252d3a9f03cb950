"""``grep_rifflux`` over real MCP sessions: its answers, its one-line errors, the allowed
roots, and worst-case patterns that leave another client served meanwhile."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from http_support import HttpServer, http_session, start_http_server
from mcp_support import (  # noqa: F401
    IndexedTree,
    anyio_backend_fixture,
    build_tree,
    call_error,
    call_ok,
    shared_tree_fixture,
    stdio_session,
)

from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.search.budget import response_tokens

pytestmark = pytest.mark.anyio

CALL_TIMEOUT_S = 60


async def test_grep_finds_exact_text_with_lines_columns_and_chunks(
    shared_tree: IndexedTree,
) -> None:
    async with stdio_session(shared_tree) as session:
        found = await call_ok(
            session,
            "grep_rifflux",
            timeout=CALL_TIMEOUT_S,
            pattern="rifflux index docs/",
            context_lines=1,
        )
        chunk = await call_ok(
            session, "get_chunk", timeout=CALL_TIMEOUT_S, chunk_id=found["matches"][0]["chunk_id"]
        )
        regex = await call_ok(
            session,
            "grep_rifflux",
            timeout=CALL_TIMEOUT_S,
            pattern=r"^On (Linux|Windows)",
            regex=True,
            case_sensitive=True,
        )
    assert found["count"] == 1 and found["truncated"] is False and found["scanned"] is False
    match = found["matches"][0]
    assert (match["path"], match["line"], match["column"]) == ("docs/install.md", 9, 24)
    assert match["text"].startswith("Create the index with `rifflux index docs/`")
    assert match["before"] == [match["before"][0]] and match["after"] == [""]
    assert match["heading_path"] == "Installing Rifflux > Linux"
    assert "rifflux index docs/" in chunk["chunk"]["content"]
    assert [(m["path"], m["line"]) for m in regex["matches"]] == [
        ("docs/install.md", 8),
        ("docs/install.md", 13),
    ]


async def test_grep_errors_are_one_line(shared_tree: IndexedTree) -> None:
    async with stdio_session(shared_tree) as session:
        invalid = await call_error(
            session, "grep_rifflux", timeout=CALL_TIMEOUT_S, pattern="(oops", regex=True
        )
        context = await call_error(
            session, "grep_rifflux", timeout=CALL_TIMEOUT_S, pattern="x", context_lines=500
        )
    assert invalid.startswith("pattern is not a valid regex: missing ")
    assert context == "context_lines must be an integer between 0 and 10 (got 500)"


async def test_grep_leaves_out_files_outside_the_clients_roots(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "work")
    async with stdio_session(tree, client_roots=[tree.root / "docs"]) as session:
        found = await call_ok(
            session, "grep_rifflux", timeout=CALL_TIMEOUT_S, pattern="s", max_matches=1000
        )
    paths = {m["path"] for m in found["matches"]}
    assert paths == {"docs/install.md", "docs/search.md"}  # not notes/gardening.txt


async def test_an_edited_file_is_grepable_after_the_reindex_tool(tmp_path: Path) -> None:
    """The queue's job (worker processes) writes the grep rows with the chunks."""
    tree = build_tree(tmp_path / "work")
    notes = tree.root / "notes" / "gardening.txt"
    async with stdio_session(tree) as session:
        before = await call_ok(session, "grep_rifflux", timeout=CALL_TIMEOUT_S, pattern="pH 6.5")
        notes.write_text(notes.read_text() + "Keep the soil at pH 6.5 for basil.\n")
        await call_ok(session, "reindex", timeout=CALL_TIMEOUT_S * 3, path="notes")
        after = await call_ok(session, "grep_rifflux", timeout=CALL_TIMEOUT_S, pattern="pH 6.5")
    assert before["count"] == 0
    assert [(m["path"], m["line"], m["column"]) for m in after["matches"]] == [
        ("notes/gardening.txt", 4, 18)
    ]


# -- worst cases while another client is served ------------------------------------------

FILES = 600
LINES = 40


@pytest.fixture(scope="module")
def busy_tree(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    """Files whose every line matches ``e``, one with a line that makes a backtracking
    matcher run for ages on ``(a+)+$``."""
    root = tmp_path_factory.mktemp("grep-busy") / "work"
    (root / "many").mkdir(parents=True)
    for i in range(FILES):
        body = "\n".join(f"line {n} of note {i}: every line here matches e" for n in range(LINES))
        (root / "many" / f"n{i:04d}.md").write_text(f"# Note {i}\n\n{body}\n")
    (root / "hostile.md").write_text("# Hostile\n\n" + "a" * 50_000 + "b\n")
    (root / "docs").mkdir()
    (root / "docs" / "garden.md").write_text("# Garden\n\nbasil grows next to tomatoes\n")
    tree = IndexedTree(root=root, db_path=root / ".rifflux" / "index.db")
    Indexer(tree.settings()).run([root])
    return tree


@pytest.fixture(scope="module")
def busy_server(busy_tree: IndexedTree) -> Iterator[HttpServer]:
    yield from start_http_server(busy_tree)


DEFAULT_RESPONSE_TOKENS = Settings().max_response_tokens

WORST_CASES = [
    {"pattern": "e", "context_lines": 10, "max_matches": 1000},
    {"pattern": "e", "max_matches": 1000, "max_tokens": 2000},
    {"pattern": "(a+)+$", "regex": True},
    {"pattern": r"(x+x+)+y|(\w+\s?)+$", "regex": True, "max_matches": 1000},
    {"pattern": "|".join(f"w{i:05d}xyz" for i in range(1300)), "regex": True},
    {"pattern": ".", "regex": True, "max_matches": 1000, "context_lines": 10},
]


async def test_worst_case_greps_are_bounded_and_another_client_stays_served(
    busy_server: HttpServer,
) -> None:
    """One session fires the worst cases back to back until the other has made its calls;
    every worst case answers, bounded, and the other client's calls all answer, right,
    meanwhile (a server held by one call would fail the outer time bound instead)."""
    results: list[dict] = []
    done = anyio.Event()

    async def attack() -> None:
        async with http_session(busy_server.url) as session:
            while not done.is_set() or len(results) < len(WORST_CASES):
                case = WORST_CASES[len(results) % len(WORST_CASES)]
                results.append(
                    await call_ok(session, "grep_rifflux", timeout=CALL_TIMEOUT_S, **case)
                )

    answers = []
    with anyio.fail_after(CALL_TIMEOUT_S * 4):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(attack)
            async with http_session(busy_server.url) as other:
                for _ in range(5):
                    status = await call_ok(other, "index_status", timeout=CALL_TIMEOUT_S)
                    found = await call_ok(
                        other, "grep_rifflux", timeout=CALL_TIMEOUT_S, pattern="basil grows"
                    )
                    answers.append((status["files"], [m["path"] for m in found["matches"]]))
            done.set()
    assert answers == [(FILES + 2, ["docs/garden.md"])] * 5
    by_case = dict(zip(range(len(WORST_CASES)), results, strict=False))
    every_line, budgeted, catastrophic, nested, huge, dot = (by_case[i] for i in range(6))
    # 1,000 lines with 20 lines of context each would be ~1 MB: cut to the server's
    # default response budget.
    assert 0 < every_line["count"] < 1000 and every_line["truncated"] is True
    assert all(len(m["before"]) <= 10 for m in every_line["matches"])
    assert budgeted["truncated"] is True and 0 < budgeted["count"] < 1000
    assert response_tokens(budgeted) <= WORST_CASES[1]["max_tokens"]
    assert catastrophic["count"] == 0 and catastrophic["scanned"] is True
    assert 0 < nested["count"] <= 1000 and nested["truncated"] is True
    assert huge["count"] == 0
    assert 0 < dot["count"] < 1000 and dot["truncated"] is True and dot["scanned"] is True
    assert all(len(m["text"]) <= 502 for r in results for m in r["matches"])
    # Those without max_tokens keep to the server's default budget of the whole answer.
    unbudgeted = [r for i, r in enumerate(results) if "max_tokens" not in WORST_CASES[i % 6]]
    assert all(response_tokens(r) <= DEFAULT_RESPONSE_TOKENS for r in unbudgeted)
