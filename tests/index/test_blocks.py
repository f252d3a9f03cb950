"""The fast block scan against markdown-it: the same openers and the same chunks.

``rifflux.index.blocks`` re-implements markdown-it's block rules; these differential tests
are its reference. Each compares the scan (``FAST_BLOCK_SCAN`` on) with markdown-it's token
stream (off) on real files and on generated markdown that mixes every construct the rules
treat specially, at chunk limits small enough that oversized blocks are split along the
nested structure the scan reports.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rifflux_testing import AWESOME_COPILOT, make_settings

from rifflux.index import blocks, chunker
from rifflux.index.blocks import Opener
from rifflux.index.indexer import Indexer
from rifflux.search.service import SearchService

VENDORED = sorted((AWESOME_COPILOT / "agents").rglob("*.md"))
LIMITS = [(1200, 600), (100, 0)]  # shipped, and small enough to split most blocks


@contextmanager
def markdown_it_only() -> Iterator[None]:
    saved = chunker.FAST_BLOCK_SCAN
    chunker.FAST_BLOCK_SCAN = False
    try:
        yield
    finally:
        chunker.FAST_BLOCK_SCAN = saved


def markdown_it_fails(src: str) -> bool:
    """Whether markdown-it itself raises on ``src`` (it has index errors on some
    nestings of blockquotes, lists and HTML comments)."""
    try:
        chunker._MD.parse(src)
    except Exception:
        return True
    return False


def reference_openers(src: str) -> list[Opener]:
    """markdown-it's openers, without the text of nested headings (the scan skips it)."""
    with markdown_it_only():
        openers = chunker._openers(chunker._Lines(src), 0, 0)
    return [
        (line, level, kind, heading, text if level == 0 else "")
        for line, level, kind, heading, text in openers
    ]


def assert_same_structure(
    text: str, limits: list[tuple[int, int]], *, scanned: bool | None = True
) -> None:
    """The scan finds markdown-it's openers, and the chunks are the same either way.

    ``scanned``: True if the scan must handle ``text``, False if it must fall back, None
    for either (generated input may nest deeper than markdown-it parses).
    """
    src = chunker.normalize_text(text)
    if markdown_it_fails(src):
        # No reference to compare with: the chunker must still chunk the text.
        for max_chars, min_chars in limits:
            chunker.chunk_markdown(text, max_chars=max_chars, min_chars=min_chars)
        return
    try:
        openers = blocks.scan(src)
    except blocks.Unsure:
        assert scanned is not True, "the scan fell back"
    else:
        assert scanned is not False, "the scan should have fallen back"
        assert openers == reference_openers(src)
    for max_chars, min_chars in limits:
        fast = chunker.chunk_markdown(text, max_chars=max_chars, min_chars=min_chars)
        with markdown_it_only():
            slow = chunker.chunk_markdown(text, max_chars=max_chars, min_chars=min_chars)
        assert fast == slow, (max_chars, min_chars)


def test_the_scan_mirrors_the_installed_markdown_it() -> None:
    # A new markdown-it-py turns the scan off (chunks stay right, only slower); this test
    # says so, so that someone re-checks the rules against the new release.
    assert blocks.enabled(), "re-check blocks.py against this markdown-it-py and bump it"


def test_the_chunker_parses_with_the_configuration_the_scan_mirrors() -> None:
    parser = chunker._MD
    assert parser.block.ruler.get_active_rules() == [
        "table",
        "code",
        "fence",
        "blockquote",
        "hr",
        "list",
        "html_block",
        "heading",
        "lheading",
        "paragraph",
    ]
    assert parser.options["html"] is True
    assert parser.options["maxNesting"] == blocks.MAX_NESTING
    assert not parser.options.get("tasklists") and not parser.options.get("alerts")


@pytest.mark.parametrize("path", VENDORED, ids=lambda path: path.name)
def test_vendored_agents_give_the_same_chunks_either_way(path: Path) -> None:
    assert_same_structure(path.read_text(encoding="utf-8"), LIMITS)


def test_the_vendored_agents_are_all_there() -> None:
    assert len(VENDORED) > 200


# Lines built from the pieces markdown-it's block rules look at: indentation (spaces, tabs),
# container markers, and a body that may open, close or interrupt a block.
INDENTS = ["", "", "", " ", "  ", "   ", "    ", "     ", "\t", " \t", "  \t "]
MARKERS = ["", "", "", "- ", "* ", "+ ", "1. ", "2) ", "10. ", "0. ", "-", "1.", "-\t", "1.    "]
QUOTES = ["", "", "", "> ", ">", ">\t", "> > ", " >  "]
BODIES = [
    "",
    "",
    "plain words here",
    "Another sentence. And one more!",
    "# Title",
    "## Section ##",
    "### closing # ",
    "###### six",
    "####### seven",
    "#nospace",
    "#",
    "===",
    "---",
    "- - -",
    "***",
    "_ _ _",
    "--",
    "```",
    "```python",
    "``` `x`",
    "~~~",
    "~~~~ info",
    "````",
    "| a | b |",
    "|---|---|",
    "| --- | :-: |",
    "a | b",
    "--- | ---",
    ":-- | --:",
    "| \\| x | y |",
    "x \\\\| y",
    "|",
    "||",
    "<div>",
    "</div>",
    "<!-- note",
    "-->",
    "<pre>",
    "</pre>",
    "<span class='x'>",
    "<?php",
    "?>",
    "<!DOCTYPE html>",
    "<![CDATA[",
    "]]>",
    "[!NOTE]",
    "[link]: /url",
    "1 not a list",
    "2. two",
    "\u00a0nbsp",
    "trailing spaces   ",
]


@st.composite
def markdown_line(draw: st.DrawFn) -> str:
    prefix = draw(st.sampled_from(INDENTS)) + draw(st.sampled_from(QUOTES))
    prefix += draw(st.sampled_from(MARKERS)) + draw(st.sampled_from(INDENTS[:6]))
    return prefix + draw(st.sampled_from(BODIES))


# Multi-line constructs that random lines rarely line up into.
SNIPPETS = [
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "| a | b\n|---|---|\n| 1 | 2 | 3 |\n4",
    "a | b |\n--- | ---\nc | d",
    "| a |\n| - |\n",
    "| a | b |\n|---|\n| 1 |",
    "|a\\|b|c|\n|-|-|\n|x|y\\|",
    "```\ncode\n    ```\nstill code\n```",
    "~~~~\ncode\n~~~\n  ~~~~~  \nafter",
    "``` info\n\n```\n",
    "- item\n\n      indented code\n- next\n  lazy\nlazy too",
    "1. one\n1. two\n\n   para\n3) other",
    "> quote\nlazy\n> - list\n> continued\n---",
    "<div>\nhtml\n\nafter",
    "<!--\ncomment\n\n-->\ntext",
    "Title\n===\n\nSub\n---",
    "para\n    not code\n- list",
    # What may interrupt a paragraph, and what may not.
    "text\n<span class='x'>\nmore",
    "text\n<div>\nmore",
    "text\n# heading\nmore",
    "text\n```\nmore",
    "text\n> quote\nmore",
    "text\n***\nmore",
    "text\n2. two\nmore",
    "text\n1. one\nmore",
    "text\n-\nmore",
    "text\n- \nmore",
    "text\n| a |\n|---|\nmore",
]


@st.composite
def markdown_document(draw: st.DrawFn) -> str:
    piece = st.one_of(markdown_line(), markdown_line(), st.sampled_from(SNIPPETS))
    lines = draw(st.lists(piece, max_size=40))
    front = draw(st.sampled_from(["", "", "---\ntitle: Front\n---\n", "+++\ntitle = 'T'\n+++\n"]))
    ending = draw(st.sampled_from(["", "\n", "\n\n", "  "]))
    return front + "\n".join(lines) + ending


@st.composite
def chunk_limits(draw: st.DrawFn) -> tuple[int, int]:
    max_chars = draw(st.sampled_from([15, 40, 100, 250, 1200]))
    return max_chars, draw(st.integers(0, max_chars // 2))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown_document(), chunk_limits())
def test_generated_markdown_gives_the_same_chunks_either_way(
    text: str, limits: tuple[int, int]
) -> None:
    assert_same_structure(text, [limits], scanned=None)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="#>-*+_=`~|:<!?/ \t\n1.)aZ\\[]", max_size=160), chunk_limits())
def test_markdown_character_soup_gives_the_same_chunks_either_way(
    text: str, limits: tuple[int, int]
) -> None:
    assert_same_structure(text, [limits], scanned=None)


# Lists of short items, where the scan takes a one-line item in one step: the item's
# text may open a block (emphasis, code, an hr, a table row), be empty, or run on.
LIST_INDENTS = ["", "", "", " ", "  ", "   ", "    ", "      ", "\t", "> ", ">"]
LIST_MARKERS = ["- ", "- ", "* ", "+ ", "1. ", "2. ", "1) ", "-", "*", "-   ", "-      ", ""]
LIST_BODIES = [
    "word",
    "**bold** x",
    "*",
    "**",
    "* * *",
    "*x*",
    "`code`",
    "```",
    "``",
    "```py",
    "| a |",
    "a | b",
    "---",
    "***",
    "x *",
    "# h",
    "<div>",
    "> q",
    "1. x",
    "",
    "",
    "=== ",
    "~~~",
    "[l](u)",
    "-",
    "* - *",
]
list_line = st.tuples(
    st.sampled_from(LIST_INDENTS), st.sampled_from(LIST_MARKERS), st.sampled_from(LIST_BODIES)
).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(list_line, list_line, st.just("")), max_size=30).map("\n".join))
def test_generated_lists_give_the_same_chunks_either_way(text: str) -> None:
    assert_same_structure(text, [(1200, 600), (40, 0)], scanned=None)


HOSTILE = ">" * 30 + " deep\n\n> - <!-- note\n> "
"""Nesting deeper than the scan follows sends the chunker to markdown-it, which raises
IndexError on the rest."""


def test_a_text_markdown_it_fails_on_is_one_block_and_its_batch_is_indexed(
    tmp_path: Path,
) -> None:
    assert markdown_it_fails(chunker.normalize_text(HOSTILE))
    for max_chars, min_chars in LIMITS:
        chunks = chunker.chunk_markdown(HOSTILE, max_chars=max_chars, min_chars=min_chars)
        assert "".join(c.content for c in chunks).replace("\n", "") == HOSTILE.rstrip().replace(
            "\n", ""
        )
    root = tmp_path / "notes"
    root.mkdir()
    (root / "hostile.md").write_text(HOSTILE + "\n\nhostile_token\n", encoding="utf-8")
    (root / "plain.md").write_text("# Plain\n\nplain_token here\n", encoding="utf-8")
    settings = make_settings(tmp_path)
    report = Indexer(settings).run([root])
    assert report.files_indexed == 2
    service = SearchService(settings)
    try:
        for token in ("hostile_token", "plain_token"):
            paths = [r["path"] for r in service.search(token, mode="lexical")]
            assert paths and paths[0].endswith(token.split("_")[0] + ".md")
    finally:
        service.close()


def test_a_nul_character_falls_back_to_markdown_it() -> None:
    text = "# Title\n\nbody with a \0 in it\n\n## Next \0\n\ntext"
    assert_same_structure(text, LIMITS, scanned=False)


def test_nesting_deeper_than_markdown_it_parses_falls_back() -> None:
    text = "".join("  " * depth + "- item\n" for depth in range(30)) + "\nafter\n"
    assert_same_structure(text, [(40, 0), (1200, 600)], scanned=False)


def test_an_oversized_list_is_split_at_the_items_the_scan_reports() -> None:
    items = "\n".join(f"- item {i} " + "word " * 12 for i in range(12))
    text = f"# List\n\n{items}\n\n  lazy continuation\n\n1. one\n2. two\n"
    assert_same_structure(text, [(120, 0), (200, 50)])
    chunks = chunker.chunk_markdown(text, max_chars=120, min_chars=0)
    assert all(chunk.content.startswith(("# List", "- item", "1. one")) for chunk in chunks)
