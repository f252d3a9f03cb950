"""Front matter: parsed safely, stored as fields, never in a chunk's content or embedding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rifflux.index.changes import FileWork
from rifflux.index.chunker import normalize_text
from rifflux.index.frontmatter import (
    MAX_FRONT_MATTER_CHARS,
    MAX_KEY_PARTS,
    split_front_matter,
    tag_list,
    toml_key_parts,
)
from rifflux.index.prepare import chunk_file, embedding_input, text_sha256

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "knowledge"


def chunked(text: str, rel_path: str = "docs/a.md"):
    work = FileWork(rel_path, 0, len(text), "", text)
    return chunk_file(work, max_chars=1200, min_chars=600)


def test_yaml_fields_are_parsed_into_their_columns_and_the_rest_as_json() -> None:
    text = (
        "---\ntitle: 'Use PostgreSQL'\ntags: [Database, persistence]\ntype: ADR\n"
        "status: accepted\ndate: 2024-01-15\ndeciders: [maria, tom]\nweight: 3\n---\n\n# Body\n"
    )
    front = split_front_matter(text, "docs/adr/0005.md")
    assert front.present and front.problem is None
    assert (front.title, front.tags, front.doc_type, front.status, front.date) == (
        "Use PostgreSQL",
        ("database", "persistence"),
        "adr",
        "accepted",
        "2024-01-15",
    )
    assert json.loads(front.extra_json()) == {"deciders": ["maria", "tom"], "weight": 3}


def test_toml_front_matter_is_parsed_too() -> None:
    front = split_front_matter('+++\ntitle = "Config"\ntags = ["a", "b"]\n+++\nbody\n', "x.md")
    assert (front.title, front.tags, front.problem) == ("Config", ("a", "b"), None)


@pytest.mark.parametrize(
    ("value", "tags"),
    [
        (["Databases", " #Ops ", "databases", ""], ("databases", "ops")),
        ("caching, sessions ,, Caching", ("caching", "sessions")),
        (["multi  word tag"], ("multi word tag",)),
        (42, ()),
        ({"not": "a list"}, ()),
    ],
)
def test_tags_are_a_list_or_a_comma_string_normalised(value: object, tags: tuple[str]) -> None:
    assert tag_list(value) == tags


def test_the_body_keeps_the_file_s_line_numbers_and_loses_the_block() -> None:
    text = "---\r\ntitle: T\r\ntags: a\r\n---\r\nline one\r\nline two\r\n"
    front = split_front_matter(text, "a.md")
    assert front.body == "\n\n\n\nline one\nline two\n"
    assert front.body.count("\n") == normalize_text(text).count("\n")


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ("title: [unclosed\ntags: a\n", "front matter is not valid YAML: "),
        ("- a list\n- not a mapping\n", "front matter is not a YAML mapping of keys"),
        ("just a sentence between two rules\n", "front matter is not a YAML mapping of keys"),
        ("date: 2024-13-45\n", "front matter is not valid YAML: month must be in 1..12"),
        (
            "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
            "d: [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
            "front matter holds more than 10000 values",
        ),
        ("x: " + "y" * MAX_FRONT_MATTER_CHARS + "\n", "front matter longer than 64000"),
        ("!!python/object/apply:os.system ['true']\n", "front matter is not valid YAML: "),
    ],
)
def test_a_malformed_block_is_kept_as_text_with_the_reason(block: str, problem: str) -> None:
    text = f"---\n{block}---\n\n# Note\n\nBody text.\n"
    front = split_front_matter(text, "notes/n.md")
    assert front.problem is not None and front.problem.startswith(problem)
    assert not front.present and front.fields == {} and front.body == text
    prepared = chunked(text, "notes/n.md")
    assert prepared.front_matter_problem == front.problem
    assert prepared.chunks[0].content.startswith("---\n")  # indexed as text, as before


DEEP_TOML_KEY = "a." * 31_000 + "b = 1\n"
"""The adversarial block: one dotted key of 31,001 parts, 62 KB, under the size limit."""


def test_a_toml_key_with_too_many_parts_is_refused_before_parsing() -> None:
    assert len(DEEP_TOML_KEY) < MAX_FRONT_MATTER_CHARS
    text = f"+++\n{DEEP_TOML_KEY}+++\n\n# Note\n\nBody text.\n"
    front = split_front_matter(text, "notes/n.md")
    assert front.problem == f"front matter has a dotted key of more than {MAX_KEY_PARTS} parts"
    assert not front.present and front.body == text
    assert chunked(text, "notes/n.md").front_matter_problem == front.problem


@pytest.mark.parametrize(
    ("line", "parts"),
    [
        ('title = "Config"', 1),
        ('site.params.author = "x.y.z = w"', 5),
        ('"a.b" = 1', 2),
        ("[servers.alpha]", 0),
        ("no key here. none.", 0),
    ],
)
def test_toml_key_parts_bounds_the_deepest_key_from_above(line: str, parts: int) -> None:
    assert toml_key_parts(line + "\n") == parts


def test_a_toml_key_at_the_limit_is_parsed() -> None:
    key = ".".join(["k"] * MAX_KEY_PARTS)
    front = split_front_matter(f"+++\n{key} = 1\ntitle = 'T'\n+++\nbody\n", "x.md")
    assert (front.problem, front.title) == (None, "T")


def test_only_markdown_files_have_front_matter() -> None:
    text = "---\ntitle: T\n---\nplain text\n"
    assert split_front_matter(text, "notes/a.txt").body == text
    assert not split_front_matter(text, "notes/a.txt").present
    assert split_front_matter(text, "notes/a.mdx").present


def test_a_title_without_h1_still_names_the_document_in_breadcrumbs() -> None:
    prepared = chunked("---\ntitle: Release notes\ntags: [x]\n---\nIntro.\n\n## Fixes\n\nMore.\n")
    assert prepared.chunks[0].heading_path == "Release notes"
    assert "title:" not in prepared.chunks[0].content


def front_matter_lines(text: str) -> list[str]:
    """The non-blank lines of a file's front matter block ('' when it has none)."""
    lines = normalize_text(text).split("\n")
    if lines[0] not in ("---", "+++"):
        return []
    end = lines.index(lines[0], 1)
    return [line for line in lines[1:end] if line.strip()]


@pytest.mark.parametrize(
    "path",
    sorted(
        p.relative_to(CORPUS).as_posix()
        for p in CORPUS.rglob("*.md")
        if split_front_matter(p.read_text(), p.name).present
    ),
)
def test_front_matter_never_reaches_a_chunk_s_content_or_embedding(path: str) -> None:
    text = (CORPUS / path).read_text()
    prepared = chunked(text, path)
    block = front_matter_lines(text)
    assert block and prepared.chunks
    for chunk in prepared.chunks:
        embedded = embedding_input(chunk.heading_path, chunk.content)
        assert chunk.embed_sha256 == text_sha256(embedded)
        for line in block:
            assert line not in chunk.content
            assert line not in embedded


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(["-", "+", "\n", "\r", "a", ":", " ", "[", "#", "t"])),
)
def test_splitting_never_fails_and_keeps_every_line(text: str) -> None:
    front = split_front_matter(text, "a.md")
    normal = normalize_text(text)
    assert front.body.count("\n") == normal.count("\n")
    if not front.present:
        assert front.body == normal
    else:
        assert normal.endswith(front.body.lstrip("\n"))
