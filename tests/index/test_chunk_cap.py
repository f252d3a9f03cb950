"""The hard cap on chunk size (issue 20, finding 7): no chunk exceeds 4 × max_chars.

Before the cap an unclosed fence in a 2 MB file was one 2,000,007-character chunk, and
one search returned 2.2 MB.
"""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from rifflux_testing import make_settings
from test_blocks import assert_same_structure

from rifflux.index.cap import HARD_CAP_FACTOR, cap_spans, hard_cap
from rifflux.index.chunker import Chunk, chunk_document, chunk_id_for, chunk_markdown
from rifflux.index.indexer import Indexer
from rifflux.search.service import SearchService

MAX_CHARS = 1200
CAP = HARD_CAP_FACTOR * MAX_CHARS


def code_lines(count: int) -> str:
    return "".join(f"value_{i} = compute({i}, 'item {i}')  # step {i}\n" for i in range(count))


def two_megabyte_file_with_an_unclosed_fence() -> str:
    lines = code_lines(40_000)
    text = f"# Big file\n\nSome intro text.\n\n```python\n{lines}"
    assert len(text) > 2_000_000
    return text


def no_space(text: str) -> str:
    return re.sub(r"\s+", "", text)


def assert_slices_cut_at_lines(src: str, chunks: list[Chunk]) -> None:
    """Each chunk is the next slice of ``src``, and a piece of the fence ends at a line end."""
    position = 0
    for chunk in chunks:
        position = src.index(chunk.content, position)
        position += len(chunk.content)
        assert position == len(src) or src[position] == "\n"


def test_the_cap_is_four_times_max_chars() -> None:
    assert HARD_CAP_FACTOR == 4 and hard_cap(MAX_CHARS) == 4800


def test_an_unclosed_fence_in_a_2_mb_file_becomes_chunks_within_the_cap() -> None:
    text = two_megabyte_file_with_an_unclosed_fence()
    chunks = chunk_document(text, "big.md", max_chars=MAX_CHARS, min_chars=600)
    assert max(len(chunk.content) for chunk in chunks) <= CAP
    assert len(chunks) > 2_000_000 // CAP
    # Nothing lost, nothing added (no synthetic fence markers), in order, cut at lines.
    assert no_space("".join(chunk.content for chunk in chunks)) == no_space(text)
    assert_slices_cut_at_lines(text, chunks)
    # Pieces are about equal: no ragged tail, none far below half the cap.
    fence = [chunk for chunk in chunks if chunk.content.startswith(("```", "value_"))]
    assert min(len(chunk.content) for chunk in fence) > CAP // 2
    assert {chunk.heading_path for chunk in chunks} == {"Big file"}
    # Deterministic, so chunk ids (path and index) are stable across runs.
    again = chunk_document(text, "big.md", max_chars=MAX_CHARS, min_chars=600)
    assert again == chunks
    assert [chunk_id_for("big.md", c.chunk_index) for c in again] == [
        chunk_id_for("big.md", i) for i in range(len(chunks))
    ]


def test_a_search_over_the_2_mb_file_returns_chunks_within_the_cap(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "big.md").write_text(two_megabyte_file_with_an_unclosed_fence(), encoding="utf-8")
    config = make_settings(tmp_path, max_chunk_chars=MAX_CHARS, min_chunk_chars=600)
    Indexer(config).run([docs])
    service = SearchService(config)
    try:
        for mode in ("lexical", "hybrid"):
            results = service.search("compute item 31337", mode=mode, top_k=10)
            assert results and all(len(r["content"]) <= CAP for r in results), mode
        one = service.search("value_31337", mode="lexical", top_k=1)[0]
        assert "value_31337 = compute(31337" in one["content"] and len(one["content"]) <= CAP
    finally:
        service.close()


def test_fenced_code_within_the_cap_is_still_never_split() -> None:
    fence = "```\n" + code_lines(90) + "```"
    assert MAX_CHARS < len(fence) <= CAP
    chunks = chunk_markdown(
        f"# A\n\nIntro.\n\n{fence}\n\nAfter.\n", max_chars=MAX_CHARS, min_chars=0
    )
    assert [c.content for c in chunks if "compute(0," in c.content] == [fence]


def test_a_heading_parts_from_code_within_the_cap_rather_than_split_it() -> None:
    body = code_lines(100)
    fence = "```\n" + body + "#" * (CAP - len(body) - 9) + "\n```"  # CAP - 1 characters
    assert len(fence) <= CAP < len("## Example\n\n" + fence)
    chunks = chunk_markdown(f"## Example\n\n{fence}\n", max_chars=MAX_CHARS, min_chars=0)
    assert [c.content for c in chunks] == ["## Example", fence]
    assert [c.heading_path for c in chunks] == ["Example", "Example"]


def test_a_heading_keeps_the_first_piece_of_code_over_the_cap() -> None:
    fence = "```\n" + code_lines(300) + "```"
    chunks = chunk_markdown(f"## Example\n\n{fence}\n", max_chars=MAX_CHARS, min_chars=0)
    assert chunks[0].content.startswith("## Example\n\n```\nvalue_0")
    assert chunks[-1].content.endswith("```") and len(chunks) == 3
    assert all(len(c.content) <= CAP for c in chunks)


def test_a_line_longer_than_the_cap_is_cut_at_whitespace_else_hard() -> None:
    words = " ".join(f"w{i:05}" for i in range(3000))  # one 20,999-character line
    solid = "x" * (3 * CAP + 7)
    for body in (words, solid):
        chunks = chunk_markdown(f"```\n{body}\n```\n", max_chars=MAX_CHARS, min_chars=0)
        assert all(len(c.content) <= CAP for c in chunks)
        assert no_space("".join(c.content for c in chunks)) == no_space(f"```\n{body}\n```")
    pieces = chunk_markdown(f"```\n{words}\n```\n", max_chars=MAX_CHARS, min_chars=0)
    assert all(re.fullmatch(r"(```\n)?w\d{5}( w\d{5})*(\n```)?", c.content) for c in pieces)


def test_both_block_parsers_give_the_same_capped_chunks() -> None:
    text = "# T\n\n- item\n\n  ```sh\n" + code_lines(400) + "\n> ~~~\n> " + "q " * 9000
    assert_same_structure(text, [(MAX_CHARS, 600), (100, 0)])


def test_cap_spans_leaves_a_span_within_the_cap_alone() -> None:
    src = "  one\ntwo  "
    assert cap_spans(src, 2, 9, 7) == [(2, 9)]


def test_cap_spans_cuts_equal_shares_at_line_breaks() -> None:
    src = "\n".join(["aaaa"] * 10)  # 49 characters
    pieces = [src[start:end] for start, end in cap_spans(src, 0, len(src), 20)]
    assert pieces == ["aaaa\naaaa\naaaa\naaaa", "aaaa\naaaa\naaaa", "aaaa\naaaa\naaaa"]


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from("ab \n\t\u00a0é😀"), max_size=600),
    st.integers(1, 80),
)
def test_cap_spans_pieces_are_stripped_ordered_within_the_cap_and_lose_nothing(
    text: str, cap: int
) -> None:
    stripped = text.strip()
    if not stripped:
        return
    start = text.index(stripped[0])
    end = start + len(stripped)
    pieces = cap_spans(text, start, end, cap)
    assert pieces[0][0] == start and pieces[-1][1] == end
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in pairwise(pieces))
    for first, last in pieces:
        piece = text[first:last]
        assert piece and piece == piece.strip() and len(piece) <= cap
    assert no_space("".join(text[a:b] for a, b in pieces)) == no_space(stripped)
