"""Fuzzing the chunker with arbitrary and markdown-shaped text: never crashes, loses no
text, never exceeds the hard cap, never splits a fence within it."""

from __future__ import annotations

from collections import Counter

from fuzz_support import FUZZ
from hypothesis import given
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from rifflux.index.cap import hard_cap
from rifflux.index.chunker import Chunk, chunk_markdown, chunk_plain_text

# Fragments that mean something to a markdown parser, mixed with arbitrary text.
FRAGMENTS = [
    "#",
    "## ",
    "###### ",
    "```",
    "~~~",
    "```python",
    "````",
    "    ",
    "\t",
    "> ",
    ">> ",
    "- ",
    "* ",
    "+ ",
    "1. ",
    "1) ",
    "|",
    "| a | b |",
    "|---|---|",
    "| --- |",
    "---",
    "+++",
    "===",
    "title: T",
    "<div>",
    "</div>",
    "<!--",
    "-->",
    "[x]: http://e.org",
    "\\",
    "`",
    "**",
    "***",
    " ",
    "\u00a0",
    "\u2028",
    "\ufeff",
    "\x00",
    "é",
    "中文",
    "😀",
]
LINE = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)), max_size=5).map(
    "".join
)
MARKDOWNISH = st.tuples(
    st.lists(LINE, max_size=40), st.sampled_from(["\n", "\r\n", "\r", "\n\n"])
).map(lambda lines_sep: lines_sep[1].join(lines_sep[0]))
ANY_TEXT = st.one_of(MARKDOWNISH, st.text(max_size=1500))
LIMITS = st.integers(8, 400).flatmap(lambda high: st.tuples(st.just(high), st.integers(0, high)))


def non_space(text: str) -> Counter[str]:
    return Counter(ch for ch in text if not ch.isspace())


def normalized(text: str) -> str:
    """What the chunker slices: newlines as \\n, a leading BOM dropped."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def check(text: str, chunks: list[Chunk], max_chars: int) -> None:
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert all(c.content and c.content == c.content.strip() for c in chunks)
    assert all(len(c.content) <= hard_cap(max_chars) for c in chunks)
    lost = non_space(normalized(text)) - non_space("".join(c.content for c in chunks))
    assert not lost, lost


@FUZZ
@given(ANY_TEXT, LIMITS)
def test_markdown_chunker_never_crashes_and_loses_no_character(
    text: str, limits: tuple[int, int]
) -> None:
    chunks = chunk_markdown(text, max_chars=limits[0], min_chars=limits[1])
    check(text, chunks, limits[0])


@FUZZ
@given(ANY_TEXT, LIMITS)
def test_plain_text_chunker_never_crashes_loses_nothing_and_keeps_the_bound(
    text: str, limits: tuple[int, int]
) -> None:
    chunks = chunk_plain_text(text, max_chars=limits[0], min_chars=limits[1])
    check(text, chunks, limits[0])
    assert all(len(c.content) <= limits[0] for c in chunks)


# Long code: fences and unclosed fences of many lines, some lines longer than any cap.
CODE_LINE = st.one_of(LINE, st.text(alphabet="ab \t", min_size=50, max_size=2500))
LONG_CODE = st.tuples(
    st.sampled_from(["```", "~~~", "    ", "> ```", "- ```", "# T\n\n```"]),
    st.lists(CODE_LINE, max_size=80),
    st.sampled_from(["", "\n```", "\n~~~", "\n\nafter"]),
).map(lambda parts: parts[0] + "\n" + "\n".join(parts[1]) + parts[2])


@FUZZ
@given(st.one_of(LONG_CODE, MARKDOWNISH), LIMITS)
def test_no_chunk_exceeds_the_hard_cap(text: str, limits: tuple[int, int]) -> None:
    chunks = chunk_markdown(text, max_chars=limits[0], min_chars=limits[1])
    check(text, chunks, limits[0])
    again = chunk_markdown(text, max_chars=limits[0], min_chars=limits[1])
    assert again == chunks


@FUZZ
@given(MARKDOWNISH, LIMITS)
def test_fences_within_the_cap_are_never_split(text: str, limits: tuple[int, int]) -> None:
    # Front matter is chunked as text, not parsed: start with a paragraph so the oracle
    # parser sees the same blocks as the chunker.
    src = "intro\n\n" + normalized(text)
    chunks = chunk_markdown(src, max_chars=limits[0], min_chars=limits[1])
    lines = src.split("\n")
    for token in MarkdownIt("commonmark").enable("table").parse(src):
        if token.type == "fence" and token.map:
            fence = "\n".join(lines[token.map[0] : token.map[1]]).strip()
            if len(fence) <= hard_cap(limits[0]):
                assert any(fence in c.content for c in chunks), fence
