"""Behaviour of the heading-aware markdown / plain-text chunker."""

import hashlib
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from rifflux_testing import AWESOME_COPILOT, SHARED

from rifflux.index.cap import hard_cap
from rifflux.index.chunker import (
    Chunk,
    HeadingMark,
    chunk_document,
    chunk_id_for,
    chunk_ids_for,
    chunk_markdown,
    chunk_plain_text,
    normalize_rel_path,
)

VENDORED = AWESOME_COPILOT / "agents"
SHARED_CORPUS = SHARED / "corpora" / "awesome-copilot"

# A fence opener/closer, possibly inside blockquote markers or after a list marker.
_FENCE_LINE = re.compile(r"^[ \t>]*(?:(?:[-*+]|\d+[.)])[ \t]+)?(`{3,}|~{3,})(.*)$")


def md(text: str, max_chars: int = 1200, min_chars: int = 0) -> list[Chunk]:
    return chunk_markdown(text, max_chars=max_chars, min_chars=min_chars)


def paths(chunks: list[Chunk]) -> list[str]:
    return [chunk.heading_path for chunk in chunks]


def words_in(chunks: list[Chunk]) -> list[str]:
    return " ".join(chunk.content for chunk in chunks).split()


def has_unclosed_fence(content: str) -> bool:
    opener = None
    for line in content.split("\n"):
        match = _FENCE_LINE.match(line)
        if match is None:
            continue
        run, rest = match.groups()
        if opener is None:
            if not (run[0] == "`" and "`" in rest):  # ```x``` on one line is inline code
                opener = run
        elif run[0] == opener[0] and len(run) >= len(opener) and not rest.strip():
            opener = None
    return opener is not None


def sentences(count: int, prefix: str = "Sentence") -> str:
    return " ".join(f"{prefix} number {i} is right here." for i in range(count))


# --- headings and breadcrumbs -------------------------------------------------------------


def test_breadcrumb_nests_and_a_new_sibling_pops_deeper_headings() -> None:
    doc = "# Guide\n\nIntro.\n\n## Install\n\nSteps.\n\n### Linux\n\napt.\n\n## Usage\n\nRun it.\n"
    chunks = md(doc)
    assert paths(chunks) == [
        "Guide",
        "Guide > Install",
        "Guide > Install > Linux",
        "Guide > Usage",
    ]
    assert chunks[2].content == "### Linux\n\napt."


def test_skipped_heading_levels_pop_back_to_the_right_parent() -> None:
    chunks = md("# A\n\na\n\n### C\n\nc\n\n## B\n\nb\n\n# Z\n\nz\n")
    assert paths(chunks) == ["A", "A > C", "A > B", "Z"]


def test_setext_headings_start_sections() -> None:
    chunks = md("Guide\n=====\n\nIntro.\n\nInstall\n-------\n\nSteps.\n")
    assert paths(chunks) == ["Guide", "Guide > Install"]
    assert chunks[1].content == "Install\n-------\n\nSteps."


def test_text_before_the_first_heading_has_an_empty_path() -> None:
    chunks = md("Preamble text.\n\n# Title\n\nBody.\n")
    assert paths(chunks) == ["", "Title"]


def test_crlf_input_is_chunked_like_lf_input() -> None:
    doc = "# Guide\n\nIntro.\n\n## Install\n\nSteps.\n"
    assert md(doc.replace("\n", "\r\n")) == md(doc)


# --- the headings a chunk spans (issue 20, finding 8) ----------------------------------------

FINDING_8 = (
    "# Guide\n\nAbout it.\n\n## Install\n\nGet it.\n\n### Linux\n\napt install it.\n\n"
    "### Windows\n\nRun the installer.\n\n## Usage\n\nRun it.\n"
)


def heading_at(chunk: Chunk, mark: HeadingMark) -> str:
    """The heading line at a mark of ``chunk``."""
    return chunk.content[mark.offset :].split("\n", 1)[0]


def test_a_merged_chunk_records_every_heading_it_spans() -> None:
    [chunk] = md(FINDING_8, min_chars=600)
    assert chunk.heading_path == "Guide"  # the contract: its first heading's breadcrumb
    assert [m.heading_path for m in chunk.headings] == [
        "Guide",
        "Guide > Install",
        "Guide > Install > Linux",
        "Guide > Install > Windows",
        "Guide > Usage",
    ]
    lines = [heading_at(chunk, m) for m in chunk.headings]
    assert lines == ["# Guide", "## Install", "### Linux", "### Windows", "## Usage"]


def test_a_chunk_that_continues_a_section_records_only_headings_starting_in_it() -> None:
    doc = f"# A\n\n{sentences(60)}\n\n## B\n\nb.\n"
    chunks = md(doc, max_chars=1200, min_chars=0)
    assert [[m.heading_path for m in c.headings] for c in chunks] == [["A"], [], ["A > B"]]
    assert heading_at(chunks[2], chunks[2].headings[0]) == "## B"


def test_heading_marks_cover_setext_indented_and_front_matter_titled_headings() -> None:
    [chunk] = md(
        "---\ntitle: Doc\n---\n\nIntro.\n\n  Install\n  -------\n\nSteps.\n", min_chars=600
    )
    assert chunk.heading_path == "Doc"
    assert chunk.headings == (HeadingMark(chunk.content.index("Install"), "Doc > Install"),)


def test_headings_after_code_over_the_cap_land_in_the_right_piece() -> None:
    fence = "```\n" + "\n".join(f"line {i}" for i in range(400)) + "\n```"
    chunks = md(f"# Code\n\n{fence}\n\n## After\n\nText.\n", max_chars=300, min_chars=0)
    marked = [(c.chunk_index, heading_at(c, m)) for c in chunks for m in c.headings]
    assert marked == [(0, "# Code"), (len(chunks) - 1, "## After")]
    assert all(len(c.content) <= hard_cap(300) for c in chunks)


def test_plain_text_records_no_headings() -> None:
    assert chunk_plain_text("# Not a heading\n\ntext", max_chars=100, min_chars=0)[0].headings == ()


# --- front matter ---------------------------------------------------------------------------


def test_yaml_front_matter_is_text_not_a_setext_heading() -> None:
    # Without front matter handling "tags: [a, b]\n---" parses as a setext H2.
    doc = "---\ntitle: My Doc\ntags: [a, b]\n---\nIntro paragraph.\n\n## Part\n\nBody.\n"
    chunks = md(doc)
    assert paths(chunks) == ["My Doc", "My Doc > Part"]
    assert chunks[0].content.startswith("---\ntitle: My Doc\ntags: [a, b]\n---")
    assert not any("tags" in path for path in paths(chunks))


def test_front_matter_title_is_ignored_when_the_document_has_an_h1() -> None:
    chunks = md("---\ntitle: Meta\n---\n\n# Real\n\nBody.\n")
    assert paths(chunks) == ["", "Real"]


def test_toml_front_matter_is_handled_like_yaml() -> None:
    chunks = md('+++\ntitle = "Toml Doc"\n+++\n\nText.\n\n## A\n\nMore.\n')
    assert paths(chunks) == ["Toml Doc", "Toml Doc > A"]
    assert chunks[0].content.startswith('+++\ntitle = "Toml Doc"\n+++')


def test_oversized_front_matter_is_split_between_lines() -> None:
    lines = [f"key{i}: value number {i}" for i in range(40)]
    doc = "---\n" + "\n".join(lines) + "\n---\n\n# Title\n\nBody.\n"
    chunks = md(doc, max_chars=200)
    assert all(len(chunk.content) <= 200 for chunk in chunks)
    assert all(any(line in chunk.content for chunk in chunks) for line in lines)
    assert paths(chunks)[-1] == "Title"


def test_front_matter_stays_out_of_a_heading_right_below_it() -> None:
    chunks = md("---\ntitle: T\n---\n# A\n\ntext one\n\n## B\n\nmore text\n", max_chars=20)
    assert [(chunk.heading_path, chunk.content) for chunk in chunks] == [
        ("", "---\ntitle: T\n---"),
        ("A", "# A\n\ntext one"),
        ("A > B", "## B\n\nmore text"),
    ]


# --- code fences -----------------------------------------------------------------------------


def test_oversized_fence_stays_whole_and_hides_its_heading_like_lines() -> None:
    body = "\n".join(f"# not a heading {i}\nprint({i})" for i in range(30))
    fence = f"```python\n{body}\n```"
    doc = f"# Guide\n\n{sentences(3)}\n\n{fence}\n\nAfter the fence.\n"
    chunks = md(doc, max_chars=250)  # the fence is over max_chars, within the hard cap
    holders = [chunk for chunk in chunks if "print(0)" in chunk.content]
    assert len(holders) == 1
    assert fence in holders[0].content
    assert holders[0].content.count("```") == 2
    assert set(paths(chunks)) == {"Guide"}


def test_tilde_fence_inside_an_oversized_list_is_not_split() -> None:
    code = "\n".join(f"   echo step {i}" for i in range(25))
    fence = f"   ~~~bash\n{code}\n   ~~~"
    doc = f"1. {sentences(2)}\n\n{fence}\n2. {sentences(2, 'Second')}\n3. Last item.\n"
    chunks = md(doc, max_chars=150)
    assert any(fence.strip() in chunk.content for chunk in chunks)
    assert not any(has_unclosed_fence(chunk.content) for chunk in chunks)


def test_heading_stays_with_an_oversized_fence_that_follows_it() -> None:
    fence = "```\n" + "\n".join(f"line {i}" for i in range(50)) + "\n```"
    chunks = md(f"## Example\n\n{fence}\n", max_chars=120)
    assert len(chunks) == 1
    assert chunks[0].content == f"## Example\n\n{fence}"


# --- tables and lists -------------------------------------------------------------------------


def test_table_that_fits_is_kept_in_one_chunk() -> None:
    table = "| name | value |\n| --- | --- |\n" + "\n".join(f"| k{i} | v{i} |" for i in range(25))
    doc = f"# T\n\n{sentences(6)}\n\n{table}\n"
    assert len(table) <= 500 < len(doc)
    chunks = md(doc, max_chars=500)
    assert any(table in chunk.content for chunk in chunks)


def test_oversized_table_splits_between_rows_and_repeats_the_header() -> None:
    header = "| name | value |\n| --- | --- |"
    rows = [f"| key{i} | value {i} |" for i in range(60)]
    chunks = md(header + "\n" + "\n".join(rows) + "\n", max_chars=200)
    assert len(chunks) > 1
    assert all(chunk.content.startswith(header + "\n| key") for chunk in chunks)
    assert all(len(chunk.content) <= 200 for chunk in chunks)
    assert [row for chunk in chunks for row in chunk.content.split("\n")[2:]] == rows


def test_list_that_fits_is_kept_whole_after_its_heading() -> None:
    items = "\n".join(f"- item {i} with a few words" for i in range(14))
    doc = f"## Steps\n\n{items}\n"
    assert len(items) <= 400 < len(doc) + 400
    chunks = md(f"{sentences(10)}\n\n{doc}", max_chars=400)
    assert chunks[-1].content == doc.strip()


def test_oversized_list_splits_between_items() -> None:
    items = [f"- item {i} {sentences(1)}" for i in range(30)]
    chunks = md("\n".join(items) + "\n", max_chars=300)
    assert len(chunks) > 1
    assert all(chunk.content.startswith("- item") for chunk in chunks)
    assert all(len(chunk.content) <= 300 for chunk in chunks)
    assert [line for chunk in chunks for line in chunk.content.split("\n")] == items


def test_first_block_is_split_so_the_heading_is_never_alone() -> None:
    items = "\n".join(f"- item {i} with a few words" for i in range(14))
    chunks = md(f"## Steps\n\n{items}\n", max_chars=len(items) + 5)
    assert chunks[0].content.startswith("## Steps\n\n- item 0")
    assert all(len(chunk.content) <= len(items) + 5 for chunk in chunks)


# --- prose -----------------------------------------------------------------------------------


def test_long_paragraph_splits_on_sentence_boundaries() -> None:
    chunks = md(f"# T\n\n{sentences(60)}\n", max_chars=200)
    assert len(chunks) > 1
    assert all(len(chunk.content) <= 200 for chunk in chunks)
    assert all(chunk.content.endswith("here.") for chunk in chunks)
    assert all(chunk.content.startswith(("# T", "Sentence")) for chunk in chunks)


def test_sentence_longer_than_max_splits_on_whitespace() -> None:
    text = " ".join(f"word{i}" for i in range(300))
    chunks = md(text, max_chars=100)
    assert all(len(chunk.content) <= 100 for chunk in chunks)
    assert words_in(chunks) == text.split()


def test_word_longer_than_max_is_cut_at_max() -> None:
    chunks = md("x" * 250, max_chars=100)
    assert [len(chunk.content) for chunk in chunks] == [100, 100, 50]


# --- small pieces and merging ----------------------------------------------------------------


def test_short_file_yields_one_chunk() -> None:
    doc = "# Title\n\nSome text.\n- item\n"
    chunks = md(doc, min_chars=150)
    assert chunks == [Chunk(0, "Title", doc.strip(), (HeadingMark(0, "Title"),))]


def test_empty_or_blank_input_yields_no_chunks() -> None:
    for text in ("", "  \n\n\t \n"):
        assert md(text) == []
        assert chunk_plain_text(text, max_chars=100, min_chars=10) == []


def test_small_section_merges_into_the_preceding_chunk() -> None:
    doc = f"# A\n\n{sentences(10)}\n\n## B\n\nTiny.\n"
    chunks = md(doc, min_chars=150)
    marks = (HeadingMark(0, "A"), HeadingMark(doc.index("## B"), "A > B"))
    assert chunks == [Chunk(0, "A", doc.strip(), marks)]


def test_small_section_merges_forward_when_the_preceding_chunk_is_full() -> None:
    first = f"# A\n\n{sentences(35)}"
    tiny = "## B\n\nA short section, under min_chars."
    rest = f"{tiny}\n\n### C\n\n{sentences(10)}"
    assert len(first) <= 1200 < len(first) + len(tiny)
    chunks = md(f"{first}\n\n{rest}\n", min_chars=150)
    assert chunks == [
        Chunk(0, "A", first, (HeadingMark(0, "A"),)),
        Chunk(1, "A > B", rest, (HeadingMark(0, "A > B"), HeadingMark(len(tiny) + 2, "A > B > C"))),
    ]


def test_runs_of_small_sections_cascade_into_one_chunk() -> None:
    doc = "".join(f"## S{i}\n\nShort {i}.\n\n" for i in range(6))
    chunks = md(doc, min_chars=150)
    marks = tuple(HeadingMark(doc.index(f"## S{i}"), f"S{i}") for i in range(6))
    assert chunks == [Chunk(0, "S0", doc.strip(), marks)]


def test_small_chunk_that_cannot_merge_is_kept() -> None:
    big = sentences(35)
    tiny = "## B\n\nA short section, under min_chars."
    doc = f"# A\n\n{big}\n\n{tiny}\n\n## C\n\n{big}\n"
    chunks = md(doc, min_chars=150)
    assert paths(chunks) == ["A", "A > B", "A > C"]
    assert chunks[1].content == tiny


def test_link_reference_definitions_are_kept() -> None:
    doc = "# Links\n\n[docs]: https://example.com/docs\n\nSee [docs].\n"
    assert "https://example.com/docs" in md(doc)[0].content


def test_invalid_limits_are_rejected_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match="max_chars must be at least 1"):
        md("text", max_chars=0)
    with pytest.raises(ValueError, match="min_chars must be between 0 and max_chars"):
        md("text", max_chars=10, min_chars=11)


# --- properties over generated documents ----------------------------------------------------

_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=14)
_SENTENCE = st.lists(_WORDS, min_size=1, max_size=30).map(
    lambda ws: " ".join(ws).capitalize() + "."
)
_PARAGRAPH = st.lists(_SENTENCE, min_size=1, max_size=20).map(" ".join)
_HEADING = st.builds(
    lambda level, ws: "#" * level + " " + " ".join(ws),
    st.integers(1, 4),
    st.lists(_WORDS, min_size=1, max_size=4),
)
_LIST = st.lists(_SENTENCE, min_size=1, max_size=12).map(
    lambda items: "\n".join(f"- {item}" for item in items)
)
_FENCE = st.lists(st.lists(_WORDS, max_size=8).map(" ".join), min_size=1, max_size=30).map(
    lambda lines: "```text\n" + "\n".join(lines) + "\n```"
)
_TABLE = st.lists(st.tuples(_WORDS, _WORDS), min_size=1, max_size=30).map(
    lambda rows: "| key | value |\n| --- | --- |\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
)
_LIMITS = st.integers(40, 800).flatmap(lambda high: st.tuples(st.just(high), st.integers(0, high)))


def check_invariants(doc: str, blocks: list[str], max_chars: int, min_chars: int) -> list[Chunk]:
    chunks = md(doc, max_chars, min_chars)
    assert chunks == md(doc, max_chars, min_chars)
    assert [chunk.chunk_index for chunk in chunks] == list(range(len(chunks)))
    assert all(chunk.content == chunk.content.strip() and chunk.content for chunk in chunks)
    cap = hard_cap(max_chars)
    fences = [block for block in blocks if block.startswith("```")]
    for chunk in chunks:
        # Only code exceeds max_chars: a whole fence, or a piece of one over the cap.
        code = "```" in chunk.content or any(chunk.content in fence for fence in fences)
        assert len(chunk.content) <= max_chars or code
        assert len(chunk.content) <= cap
        # Only a fence over the hard cap is cut, and then its pieces open or close it.
        if all(len(fence) <= cap for fence in fences):
            assert not has_unclosed_fence(chunk.content)
    for fence in fences:
        if len(fence) <= cap:
            assert any(fence in chunk.content for chunk in chunks)
    assert not Counter(doc.split()) - Counter(words_in(chunks))
    # Every heading is recorded once, at its line, in the chunk it starts in.
    marks = [(chunk, mark) for chunk in chunks for mark in chunk.headings]
    assert len(marks) == sum(block.startswith("#") for block in blocks)
    assert all(chunk.content[mark.offset] == "#" for chunk, mark in marks)
    return chunks


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_HEADING, _PARAGRAPH, _LIST, _FENCE), max_size=12), _LIMITS)
def test_markdown_chunks_keep_every_word_in_order_within_bounds(
    blocks: list[str], limits: tuple[int, int]
) -> None:
    doc = "\n\n".join(blocks)
    chunks = check_invariants(doc, blocks, *limits)
    assert words_in(chunks) == doc.split()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(_HEADING, _PARAGRAPH, _TABLE, _FENCE), max_size=10), _LIMITS)
def test_markdown_chunks_with_tables_lose_nothing(
    blocks: list[str], limits: tuple[int, int]
) -> None:
    check_invariants("\n\n".join(blocks), blocks, *limits)


@settings(max_examples=100, deadline=None)
@given(st.lists(_PARAGRAPH, max_size=10), _LIMITS)
def test_plain_text_chunks_keep_every_word_in_order_within_bounds(
    paragraphs: list[str], limits: tuple[int, int]
) -> None:
    text = "\n\n \n".join(paragraphs)
    chunks = chunk_plain_text(text, max_chars=limits[0], min_chars=limits[1])
    assert all(len(chunk.content) <= limits[0] for chunk in chunks)
    assert words_in(chunks) == text.split()
    assert {chunk.heading_path for chunk in chunks} <= {""}


# --- plain text and dispatch -------------------------------------------------------------------


def test_plain_text_groups_blank_line_paragraphs_up_to_max() -> None:
    paragraphs = [f"Paragraph {i}. " + "word " * 18 for i in range(3)]
    text = "\r\n\r\n".join(p.strip() for p in paragraphs)
    chunks = chunk_plain_text(text, max_chars=250, min_chars=0)
    assert [chunk.content for chunk in chunks] == [
        paragraphs[0].strip() + "\n\n" + paragraphs[1].strip(),
        paragraphs[2].strip(),
    ]


@pytest.mark.parametrize("name", ["notes.md", "NOTES.MD", "a/b.markdown", "page.mdx"])
def test_markdown_suffixes_are_chunked_as_markdown(name: str) -> None:
    chunks = chunk_document("# Title\n\nBody.\n", name, max_chars=100, min_chars=0)
    assert paths(chunks) == ["Title"]


@pytest.mark.parametrize("name", ["notes.txt", "README", "md.txt", "dir.md/file"])
def test_other_files_are_chunked_as_plain_text(name: str) -> None:
    chunks = chunk_document("# Title\n\nBody.\n", name, max_chars=100, min_chars=0)
    assert chunks == [Chunk(0, "", "# Title\n\nBody.")]


# --- paths and ids -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("./a\\b.md", "a/b.md"),
        ("a//b///c.md", "a/b/c.md"),
        ("././docs/./Guide.MD", "docs/Guide.MD"),
        ("a/b.md", "a/b.md"),
    ],
)
def test_normalize_rel_path(raw: str, expected: str) -> None:
    assert normalize_rel_path(raw) == expected


def test_chunk_id_is_sha256_of_normalised_path_and_index() -> None:
    expected = hashlib.sha256(b"a/b.md::3").hexdigest()
    assert chunk_id_for("a/b.md", 3) == expected
    assert chunk_id_for("./a\\b.md", 3) == expected
    assert chunk_id_for("a/b.md", 4) != expected
    assert chunk_id_for("A/b.md", 3) != expected


def test_chunk_ids_for_a_file_are_its_chunk_ids_in_order() -> None:
    assert chunk_ids_for("./a\\b.md", 4) == [chunk_id_for("a/b.md", i) for i in range(4)]
    assert chunk_ids_for("a/b.md", 0) == []


# --- the real corpus ------------------------------------------------------------------------------


def markdown_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in {".md", ".markdown"})


def shared_sample() -> list[object]:
    """Every 12th markdown file of the full shared corpus, plus the 3 largest (skip if absent)."""
    if not SHARED_CORPUS.is_dir():
        reason = f"{SHARED_CORPUS} missing: only the vendored agents/ are checked"
        return [pytest.param(None, id="no-shared-corpus", marks=pytest.mark.skip(reason=reason))]
    files = markdown_files(SHARED_CORPUS)
    largest = sorted(files, key=lambda p: p.stat().st_size)[-3:]
    return [
        pytest.param(p, id=str(p.relative_to(SHARED_CORPUS)))
        for p in sorted(set(files[::12] + largest))
    ]


def assert_loses_no_word_and_never_splits_a_fence(path: Path) -> None:
    """Every fence within the hard cap is whole in one chunk, and no chunk exceeds it."""
    text = path.read_text(encoding="utf-8").replace("\r\n", "\n").removeprefix("\ufeff")
    chunks = chunk_document(text, str(path), max_chars=1200, min_chars=150)
    cap = hard_cap(1200)
    assert all(len(chunk.content) <= cap for chunk in chunks)
    assert not Counter(text.split()) - Counter(words_in(chunks))
    lines = text.split("\n")
    fences = [
        "\n".join(lines[token.map[0] : token.map[1]]).strip()
        for token in MarkdownIt("commonmark").enable("table").parse(text)
        if token.type == "fence" and token.map
    ]
    for source in fences:
        if len(source) <= cap:
            assert any(source in chunk.content for chunk in chunks)
    if not has_unclosed_fence(text) and all(len(source) <= cap for source in fences):
        assert not any(has_unclosed_fence(chunk.content) for chunk in chunks)


def test_vendored_corpus_is_present() -> None:
    assert len(markdown_files(VENDORED)) == 224


@pytest.mark.parametrize("path", markdown_files(VENDORED), ids=lambda p: p.name)
def test_vendored_corpus_file_loses_no_word_and_never_splits_a_fence(path: Path) -> None:
    assert_loses_no_word_and_never_splits_a_fence(path)


@pytest.mark.parametrize("path", shared_sample())
def test_shared_corpus_file_loses_no_word_and_never_splits_a_fence(path: Path) -> None:
    assert_loses_no_word_and_never_splits_a_fence(path)
