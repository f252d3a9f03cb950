"""grep over the index (rifflux.search.grep): the same lines as a plain scan of the files.

The reference is independent of the index: the files read from disk and searched line by
line with Python's ``re`` (ripgrep's line semantics: the text as the indexer reads it,
newlines normalised, split on ``\\n``). Grep answers from the trigram index and the stored
text, verified by RE2; both must report the same lines and columns.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rifflux_testing import AWESOME_COPILOT, make_settings

from rifflux.config import Settings
from rifflux.errors import InvalidQueryError, RiffluxError
from rifflux.index.indexer import Indexer
from rifflux.search.budget import response_tokens
from rifflux.search.deadline import Deadline
from rifflux.search.grep import (
    ENTRY_OVERHEAD_CHARS,
    MAX_LINE_CHARS,
    MAX_RESPONSE_CHARS,
    And,
    GrepRequest,
    Or,
    TextCache,
    grep,
    plan,
)
from rifflux.search.service import SearchService
from rifflux.store.connection import open_index

MAX = 1000

# -- the reference -----------------------------------------------------------------


def file_lines(path: Path) -> list[str]:
    text = path.read_bytes().decode("utf-8", "replace").removeprefix("\ufeff")
    text = re.sub(r"\r\n?", "\n", text)
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


def reference(
    files: dict[str, list[str]], pattern: str, *, regex: bool, case_sensitive: bool
) -> list[tuple[str, int, int, str]]:
    """(path, line, column, text) of every matching line, at its first match."""
    if regex:
        flags = re.ASCII | (0 if case_sensitive else re.IGNORECASE)
        compiled = re.compile(pattern, flags)
    else:
        compiled = re.compile(re.escape(pattern), 0 if case_sensitive else re.IGNORECASE)
    found = []
    for path in sorted(files):
        for number, line in enumerate(files[path], start=1):
            m = compiled.search(line)
            if m is not None:
                found.append((path, number, m.start() + 1, line))
    return found


# -- fixtures ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, dict]]:
    """The vendored awesome-copilot corpus indexed, with its files' lines from disk."""
    tmp_path = tmp_path_factory.mktemp("grep")
    corpus = tmp_path / "corpus"
    import shutil

    shutil.copytree(AWESOME_COPILOT, corpus)
    settings = make_settings(tmp_path)
    Indexer(settings).run([corpus])
    conn = open_index(settings.db_path)
    paths = [str(row[0]) for row in conn.execute("SELECT path FROM files")]
    conn.close()
    assert len(paths) > 200
    yield settings, {p: file_lines(tmp_path / p) for p in paths}


def run_grep(settings: Settings, pattern: str, **options: Any) -> dict[str, Any]:
    service = SearchService(settings)
    try:
        conn = service.connection()
        deadline = Deadline(60)
        with deadline.guarding(conn):
            return grep(conn, GrepRequest.from_arguments(pattern, **options), deadline)
    finally:
        service.close()


def rows(response: dict[str, Any]) -> list[tuple[str, int, int, str]]:
    return [(m["path"], m["line"], m["column"], m["text"]) for m in response["matches"]]


def assert_same(
    settings: Settings,
    files: dict[str, list[str]],
    pattern: str,
    *,
    regex: bool,
    case_sensitive: bool,
) -> dict[str, Any]:
    got = run_grep(settings, pattern, regex=regex, case_sensitive=case_sensitive, max_matches=MAX)
    want = reference(files, pattern, regex=regex, case_sensitive=case_sensitive)
    shown = [
        (path, line, column, text if len(text) <= MAX_LINE_CHARS else None)
        for path, line, column, text in want[:MAX]
    ]
    mine = [
        (
            path,
            line,
            column,
            text if len(text) <= MAX_LINE_CHARS and not text.endswith("…") else None,
        )
        for path, line, column, text in rows(got)
    ]
    context = f"{pattern!r} regex={regex} case_sensitive={case_sensitive}"
    # Every line up to max_matches, or fewer when the response reached its size bound;
    # truncated exactly when some matching line was left out.
    assert mine == shown[: len(mine)], context
    assert got["count"] == len(mine)
    assert got["truncated"] == (len(want) > len(mine)), context
    if len(mine) < len(shown):
        size = sum(len(p) + len(t) + 4 + ENTRY_OVERHEAD_CHARS for p, _, _, t in rows(got))
        assert size > MAX_RESPONSE_CHARS * 0.9, context
    return got


# -- planning ----------------------------------------------------------------------


def test_plan_reads_the_literals_a_regex_requires() -> None:
    assert plan(r"retry_(count|limit)\s*=", regex=True) == Or(("retry_count", "retry_limit"))
    assert plan(r"foo.*bar\d+", regex=True) == And(("foo", "bar"))
    assert plan(r"colou?r", regex=True) == Or(("color", "colour"))
    assert plan(r"updated[0-9]+", regex=True) == Or(tuple(f"updated{d}" for d in range(10)))
    assert plan(r"(?i)ERR_[A-Z]+_REFUSED", regex=True) == And(("ERR_", "_REFUSED"))
    assert plan("CONNECTION_REF", regex=False) == "CONNECTION_REF"


def test_plan_scans_when_nothing_of_three_characters_is_required() -> None:
    assert plan(r"a+", regex=True) is None
    assert plan(r"(foo|ba)", regex=True) is None
    assert plan(r"\d{4}-\d{2}", regex=True) is None
    assert plan("->", regex=False) is None
    # RE2-only syntax Python's parser would read otherwise: no plan, never a wrong one.
    assert plan(r"[[:alpha:]]xyz", regex=True) is None
    assert plan(r"\pLabc", regex=True) is None


# -- the same lines as the reference scan --------------------------------------------


def sampled_literals(files: dict[str, list[str]], count: int) -> Iterator[str]:
    rng = random.Random(35)
    paths = sorted(files)
    made = 0
    while made < count:
        lines = [line for line in files[rng.choice(paths)] if len(line.strip()) >= 8]
        if not lines:
            continue
        line = rng.choice(lines)
        size = rng.randint(3, 24)
        start = rng.randrange(0, max(1, len(line) - size))
        literal = line[start : start + size]
        if len(literal) >= 3:
            made += 1
            yield literal


def sampled_regexes(files: dict[str, list[str]], count: int) -> Iterator[str]:
    rng = random.Random(36)
    templates = [
        lambda a, b: f"{a}.*{b}",
        lambda a, b: f"({a}|{b})",
        lambda a, b: rf"\b{a}\b",
        lambda a, b: rf"{a}\s*[:=(]",
        lambda a, b: rf"^\s*[-*] .*{a}",
        lambda a, b: rf"{a[:3]}[a-z]+{b[-2:]}",
        lambda a, b: rf"{a}$",
        lambda a, b: rf"[A-Z]{a[1:]}",
        lambda a, b: rf"{a}(ing|ed|s)?\b",
        lambda a, b: rf"`[^`]*{a}[^`]*`",
    ]
    paths = sorted(files)
    made = 0
    while made < count:
        words = [w for line in files[rng.choice(paths)] for w in re.findall(r"[A-Za-z_]{4,}", line)]
        if len(words) < 2:
            continue
        yield templates[made % len(templates)](rng.choice(words), rng.choice(words))
        made += 1


def test_literals_match_the_reference_scan(indexed: tuple[Settings, dict]) -> None:
    settings, files = indexed
    for number, literal in enumerate(sampled_literals(files, 200)):
        got = assert_same(settings, files, literal, regex=False, case_sensitive=number % 2 == 0)
        assert got["count"] >= 1 and not got["scanned"]


def test_regexes_match_the_reference_scan(indexed: tuple[Settings, dict]) -> None:
    settings, files = indexed
    for number, pattern in enumerate(sampled_regexes(files, 50)):
        assert_same(settings, files, pattern, regex=True, case_sensitive=number % 2 == 1)


@pytest.mark.parametrize(
    ("pattern", "regex"),
    [("->", False), ("e", False), ("::", False), (r"^\s*$", True), (r"[0-9]+\.[0-9]", True)],
)
def test_short_patterns_scan_every_file_and_say_so(
    indexed: tuple[Settings, dict], pattern: str, regex: bool
) -> None:
    settings, files = indexed
    got = assert_same(settings, files, pattern, regex=regex, case_sensitive=False)
    assert got["scanned"] is True


def test_front_matter_lines_are_found_with_the_files_line_numbers(
    indexed: tuple[Settings, dict],
) -> None:
    settings, files = indexed
    got = assert_same(settings, files, r"^description:", regex=True, case_sensitive=True)
    assert got["count"] > 50
    # Front matter belongs to no chunk's text: its lines point at the file's first chunk.
    assert all(m["chunk_id"] for m in got["matches"])


# -- bounds --------------------------------------------------------------------------


def test_max_matches_and_max_tokens_bound_the_output(indexed: tuple[Settings, dict]) -> None:
    settings, files = indexed
    got = run_grep(settings, "e", max_matches=7, context_lines=10)
    assert got["count"] == 7 and got["truncated"] is True
    assert all(len(m["before"]) <= 10 and len(m["after"]) <= 10 for m in got["matches"])
    budgeted = run_grep(settings, "e", max_matches=1000, max_tokens=200)
    assert budgeted["truncated"] is True and 0 < budgeted["count"] < 1000
    wanted = reference(files, "e", regex=False, case_sensitive=False)
    assert [r[:3] for r in rows(budgeted)] == [r[:3] for r in wanted[: budgeted["count"]]]


@pytest.mark.parametrize("max_tokens", [50, 200, 1000, 5000])
def test_max_tokens_is_the_size_of_the_whole_answer(
    indexed: tuple[Settings, dict], max_tokens: int
) -> None:
    """As search_rifflux's: the answer as sent (keys, echoed pattern, context lines) is
    within max_tokens, and holds the most matches that keep it so."""
    settings, _files = indexed
    options: dict[str, Any] = {"max_matches": 1000, "context_lines": 2}
    budgeted = run_grep(settings, "the", max_tokens=max_tokens, **options)
    assert budgeted["truncated"] is True
    assert response_tokens(budgeted) <= max_tokens
    whole = run_grep(settings, "the", **options)
    one_more = {
        **budgeted,
        "count": budgeted["count"] + 1,
        "matches": whole["matches"][: budgeted["count"] + 1],
    }
    assert budgeted["matches"] == whole["matches"][: budgeted["count"]]
    assert response_tokens(one_more) > max_tokens


def test_catastrophic_regexes_answer(indexed: tuple[Settings, dict], tmp_path: Path) -> None:
    """Patterns that make a backtracking matcher run for ages finish (RE2 is linear)."""
    settings, files = indexed
    # Each beside a pattern that matches the same lines without nested repetition: the
    # reference scan (Python's backtracking re) could not run the first in a lifetime.
    equivalents = {
        r"(a+)+$": r"a$",
        r"(x+x+)+y": r"xx+y",
        r"(\w+\s?)+$": r"\w\s?$",
        "(" + "a?" * 30 + ")" + "a" * 30: "a{30}",
    }
    for pattern, same in equivalents.items():
        got = run_grep(settings, pattern, regex=True, max_matches=MAX)
        want = reference(files, same, regex=True, case_sensitive=False)
        mine = [(p, n) for p, n, _, _ in rows(got)]
        assert mine == [(p, n) for p, n, _, _ in want[: len(mine)]]
        assert got["truncated"] == (len(want) > len(mine))
    deep = "(abc(def|" * 300 + "x" + "))" * 300  # deeper than Python's parser goes
    got = run_grep(settings, deep, regex=True)
    assert got["count"] == 0 and got["scanned"] is True
    huge = "|".join(f"w{i:05d}xyz" for i in range(1300))  # 13 kB of alternatives
    assert len(huge) > 10_000
    got = run_grep(settings, huge, regex=True)
    assert got["count"] == 0


def test_bad_arguments_fail_in_one_line(indexed: tuple[Settings, dict]) -> None:
    settings, _ = indexed
    cases = [
        ("(unclosed", {"regex": True}, "pattern is not a valid regex"),
        ("(?<=a)b", {"regex": True}, "without look-around or backreferences"),
        ("x", {"context_lines": 11}, "context_lines must be an integer between 0 and 10"),
        ("x", {"max_matches": 0}, "max_matches must be an integer between 1 and 1000"),
        ("", {}, "pattern must be a non-empty string"),
        ("x" * 20_000, {}, "pattern is 20000 characters"),
    ]
    for pattern, options, message in cases:
        with pytest.raises(InvalidQueryError) as caught:
            run_grep(settings, pattern, **options)
        assert message in str(caught.value) and "\n" not in str(caught.value)


def test_path_glob_narrows_the_files(indexed: tuple[Settings, dict]) -> None:
    settings, files = indexed
    got = run_grep(settings, "agent", path_glob="corpus/agents/a*.md", max_matches=1000)
    assert got["count"] > 0
    assert all(m["path"].startswith("corpus/agents/a") for m in got["matches"])
    want = [
        r
        for r in reference(files, "agent", regex=False, case_sensitive=False)
        if r[0].startswith("corpus/agents/a")
    ]
    assert [(p, n) for p, n, _, _ in rows(got)] == [(p, n) for p, n, _, _ in want]


# -- kept in step with the index ------------------------------------------------------


def index_one(tmp_path: Path, docs: dict[str, str], **overrides: object) -> Settings:
    root = tmp_path / "notes"
    for name, text in docs.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    settings = make_settings(tmp_path, **overrides)
    Indexer(settings).run([root])
    return settings


def test_a_match_across_a_chunk_boundary_is_found(tmp_path: Path) -> None:
    sentences = [f"Sentence {i} talks at some length about topic{i}." for i in range(60)]
    settings = index_one(
        tmp_path,
        {"long.md": "# Title\n\n" + " ".join(sentences) + "\n"},
        max_chunk_chars=200,
        min_chunk_chars=50,
    )
    conn = open_index(settings.db_path)
    contents = [str(r[0]) for r in conn.execute("SELECT content FROM chunks ORDER BY chunk_index")]
    conn.close()
    assert len(contents) > 3
    # The end of one chunk and the start of the next: one line of the file, two chunks.
    literal = contents[2][-12:] + " " + contents[3][:12]
    assert all(literal not in c for c in contents)
    got = run_grep(settings, literal, case_sensitive=True)
    assert rows(got)[0][:2] == ("notes/long.md", 3) and got["count"] == 1


def test_lines_and_context_cross_block_boundaries(tmp_path: Path) -> None:
    """A file of many blocks (rifflux.store.grep_text): every line is found at its own
    line number, and context lines reach into the blocks before and after a match's."""
    lines = [f"row {i:04d} " + "x" * (i % 37) for i in range(400)]
    settings = index_one(tmp_path, {"many.md": "\n".join(lines) + "\n"})
    conn = open_index(settings.db_path)
    starts = json.loads(conn.execute("SELECT block_lines FROM grep_files").fetchone()[0])
    conn.close()
    assert len(starts) > 4
    edges = {n for start in starts[1:] for n in (start - 1, start, start + 1)}
    for line in sorted(edges | {1, 2, 399, 400}):
        for context in (0, 3, 10):
            got = run_grep(settings, f"row {line - 1:04d} ", context_lines=context)
            (match,) = got["matches"]
            assert (match["line"], match["column"]) == (line, 1)
            assert match["before"] == lines[max(0, line - 1 - context) : line - 1]
            assert match["after"] == lines[line : line + context]
    assert run_grep(settings, "row 0", max_matches=1000)["count"] == 400


def test_an_edited_file_is_grepable_after_the_reindex(tmp_path: Path) -> None:
    settings = index_one(tmp_path, {"a.md": "# A\n\nold_token_here = 1\n", "b.md": "# B\n\nkeep\n"})
    assert run_grep(settings, "old_token_here")["count"] == 1
    (tmp_path / "notes" / "a.md").write_text("# A\n\nintro\n\nnew_token_here = 2\n")
    Indexer(settings).run([tmp_path / "notes"])
    assert run_grep(settings, "old_token_here")["count"] == 0
    assert rows(run_grep(settings, "new_token_here"))[0][:3] == ("notes/a.md", 5, 1)
    (tmp_path / "notes" / "a.md").unlink()
    Indexer(settings).run([tmp_path / "notes"])
    assert run_grep(settings, "new_token_here")["count"] == 0
    conn = open_index(settings.db_path)
    assert conn.execute("SELECT count(*) FROM grep_files").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM grep_blocks").fetchone()[0] == 1
    # The contentless trigram table was told exactly what it holds: nothing of a.md is left.
    hits = conn.execute(
        "SELECT rowid FROM grep_block_trigrams WHERE grep_block_trigrams MATCH '\"tok\"'"
    )
    assert hits.fetchall() == []
    conn.close()


def test_an_index_without_grep_rows_gets_them_from_the_next_job(tmp_path: Path) -> None:
    settings = index_one(tmp_path, {"a.md": "---\ntitle: A\n---\n# A\n\nneedle_x here\n"})
    conn = sqlite3.connect(settings.db_path)
    conn.executescript(
        "DROP TABLE grep_files; DROP TABLE grep_blocks; DROP TABLE grep_dictionaries; "
        "DROP TABLE grep_block_trigrams;"
    )
    conn.close()
    with pytest.raises(RiffluxError, match="no text for grep yet"):
        run_grep(settings, "needle_x")
    Indexer(settings).run([tmp_path / "notes"])  # the file itself is unchanged
    assert rows(run_grep(settings, "needle_x"))[0][:2] == ("notes/a.md", 6)
    assert rows(run_grep(settings, "title: A"))[0][:2] == ("notes/a.md", 2)


def test_grep_index_off_removes_the_rows_and_on_again_writes_them(tmp_path: Path) -> None:
    """``RIFFLUX_GREP_INDEX=0``: the next job leaves no grep row (the trigram table
    included) and grep says it is off, search still answers; ``1`` again: the next job
    writes the rows of every file, unchanged ones included."""
    settings = index_one(tmp_path, {"a.md": "# A\n\nneedle_q here\n", "b.md": "# B\n\nother\n"})
    assert rows(run_grep(settings, "needle_q"))[0][:2] == ("notes/a.md", 3)
    Indexer(replace(settings, grep_index=False)).run([tmp_path / "notes"])
    conn = open_index(settings.db_path)
    for table in ("grep_files", "grep_blocks", "grep_dictionaries"):
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table
    hits = "SELECT rowid FROM grep_block_trigrams WHERE grep_block_trigrams MATCH '\"edl\"'"
    assert conn.execute(hits).fetchall() == []
    conn.close()
    with pytest.raises(RiffluxError, match="grep is off for this index"):
        run_grep(settings, "needle_q")
    service = SearchService(settings)
    try:
        assert service.search("needle_q", mode="lexical")[0]["path"] == "notes/a.md"
    finally:
        service.close()
    Indexer(replace(settings, grep_index=False)).run([tmp_path / "notes"])  # still off
    with pytest.raises(RiffluxError, match="grep is off"):
        run_grep(settings, "needle_q")
    Indexer(settings).run([tmp_path / "notes"])  # on: both files rewritten
    assert rows(run_grep(settings, "needle_q"))[0][:2] == ("notes/a.md", 3)
    assert rows(run_grep(settings, "other"))[0][:2] == ("notes/b.md", 3)


def test_case_insensitive_matches_letters_that_fold_to_ascii(tmp_path: Path) -> None:
    """The Kelvin sign matches k ignoring case (RE2, ripgrep, Python alike): a text
    holding one is searched without the ASCII-lowered line prefilter, which would miss it."""
    settings = index_one(tmp_path, {"t.md": "# T\n\nheat in \u212aelvin units\nkelvin again\n"})
    for options in ({}, {"regex": True}):
        got = run_grep(settings, "kelvin", **options)
        assert [(p, n) for p, n, _, _ in rows(got)] == [("notes/t.md", 3), ("notes/t.md", 4)]
    assert run_grep(settings, "kelvin", case_sensitive=True)["count"] == 1


def test_the_text_cache_is_bounded_and_keeps_hits_when_scans_outgrow_it() -> None:
    cache = TextCache(max_bytes=1000, seed=1)
    loads: list[str] = []

    def load(key: str) -> bytes:
        loads.append(key)
        return key.encode() * (100 // len(key))

    keys = [f"k{i:03d}" for i in range(20)]  # 2,000 bytes in all: twice the bound
    for _ in range(2):
        for key in keys:
            assert cache.get(key, lambda key=key: load(key)).data.startswith(key.encode())
    # Least-recently-used would load all 20 again on the second pass (each dropped just
    # before it is asked for); random eviction keeps some.
    assert 20 < len(loads) < 40
    assert len(cache) * 100 <= 1000
    big = cache.get("big", lambda: b"x" * 200)  # over an eighth of the bound: not kept
    assert big.data == b"x" * 200 and len(cache) * 100 <= 1000


def test_a_passed_deadline_returns_the_matches_found_so_far(
    indexed: tuple[Settings, dict],
) -> None:
    """A clock that advances one second per reading: the deadline passes after a few files
    and the scan stops there, with what it found, truncated and a warning."""
    settings, files = indexed
    ticks = iter(range(1_000_000))
    deadline = Deadline(20, clock=lambda: float(next(ticks)))
    service = SearchService(settings)
    try:
        conn = service.connection()
        got = grep(conn, GrepRequest.from_arguments("->", max_matches=1000), deadline)
    finally:
        service.close()
    assert got["truncated"] is True and "deadline" in got["warning"]
    want = reference(files, "->", regex=False, case_sensitive=False)
    assert 0 < got["count"] < len(want)
    assert [r[:3] for r in rows(got)] == [r[:3] for r in want[: got["count"]]]
