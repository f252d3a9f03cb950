"""``path_glob`` matching (issue 20, finding 1): the semantics of before, in bounded work.

(a) On random small patterns and paths the matcher, on both of its engines (the linear
regex shapes and the automaton), agrees with the regex translation of before, kept here
as the reference (with its one bug fixed: a set never matches ``/``).
(b) Adversarial patterns that made that translation backtrack for minutes finish on the
automaton within a linear budget of counted steps (no clock).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rifflux.errors import InvalidQueryError
from rifflux.search.globs import GlobMatcher, _class_end, compile_glob, linear_regex, tokenize
from rifflux.search.request import SearchRequest


def reference_regex(pattern: str) -> re.Pattern[str] | None:
    """The translation of before (rifflux/search/filters.py: glob_regex), None where the
    new matcher refuses the glob; a set gets ``(?!/)`` (the documented semantics)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                i += 2
                if i < n and pattern[i] == "/":
                    out.append("(?:.*/)?")
                    i += 1
                else:
                    out.append(".*")
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = _class_end(pattern, i)
            if end < 0:
                return None  # was a literal "[": now a malformed glob
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            escaped = body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
            out.append(f"(?!/)[{'^' if negate else ''}{escaped}]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return re.compile("".join(out), re.DOTALL)
    except re.error:
        return None  # a reversed range: refused now too


PATTERN_PIECES = st.sampled_from(
    ["a", "b", ".", "/", "-", "!", "]", "\\", "^", "*", "?", "**", "**/", "[a-c]", "[!a]", "["]
)
PATH_CHARS = st.sampled_from(list("ab/.-]![\\^c"))
patterns = st.lists(PATTERN_PIECES, max_size=7).map("".join)
paths = st.lists(PATH_CHARS, max_size=10).map("".join)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=patterns, path_list=st.lists(paths, min_size=1, max_size=6))
def test_the_matcher_agrees_with_the_regex_translation_of_before(
    pattern: str, path_list: list[str]
) -> None:
    reference = reference_regex(pattern)
    if reference is None:
        with pytest.raises(InvalidQueryError, match="is not a valid glob"):
            tokenize(pattern)
        return
    regex_first = GlobMatcher(pattern)
    automaton = GlobMatcher(pattern, regex=False)
    for path in path_list:
        want = reference.fullmatch(path) is not None
        assert regex_first.matches(path) == want, (pattern, path)
        assert automaton.matches(path) == want, (pattern, path)


ADVERSARIAL = [
    "**/" * 100 + "*b",
    "*" * 50 + "x",  # tokenizes as 25 × "**", then "x"
    "*?" * 40 + "x",
    "a*" * 40 + "b",
    "**a" * 60 + "/z",
    "?" * 400 + "x",
    "[ab]*" * 30 + "c",
    "[!/x]**" * 40 + "q",
    "**/[a-z]*" * 30 + ".md",
]
LONG_PATHS = [
    "a" * 3000,
    "b/" * 1500,
    ("ab/" * 1000)[:-1],
    "a/b/" + "x" * 2000 + "/q.md",
    "abababab" * 400 + "/" + "a" * 500,
]


@pytest.mark.parametrize("pattern", ADVERSARIAL)
def test_adversarial_globs_finish_in_linear_work(pattern: str) -> None:
    matcher = GlobMatcher(pattern, regex=False)
    assert matcher.automaton
    budget = 0
    for path in LONG_PATHS:
        matcher.matches(path)
        # Bounded by (tokens + 1) × (characters + 1) per path, with the constant of the
        # skip tables (at most 48 intervals per new state set).
        budget += 50 * (len(tokenize(pattern)) + 1) * (len(path) + 1)
    assert matcher.work <= budget, (matcher.work, budget)


def test_matches_agree_on_adversarial_inputs_where_the_reference_can_answer() -> None:
    # The old regex answers fast on short paths; the automaton must say the same.
    for pattern in ADVERSARIAL:
        reference = reference_regex(pattern)
        assert reference is not None
        matcher = GlobMatcher(pattern, regex=False)
        for path in ("b", "x", "a/b", "q.md", "aab/c.md"):
            assert matcher.matches(path) == (reference.fullmatch(path) is not None)


def test_the_hostile_glob_of_the_issue_runs_on_the_automaton_and_says_no() -> None:
    hostile = compile_glob("**/" * 100 + "*b")
    assert hostile.automaton
    assert not hostile.matches("agents/" * 40 + "a.md")
    assert hostile.matches("x/" * 150 + "ab")


@pytest.mark.parametrize(
    ("pattern", "automaton"),
    [
        ("**/*.md", False),
        ("docs/**", False),
        ("agents/*.agent.md", False),
        ("skills/**/*.md", False),
        ("**/README.md", False),
        ("docs/**/*.md", False),
        ("**/docs/*.md", True),  # the last part holds a "/": no single split point
        ("*/*.md", True),
        ("**/" * 100 + "*b", True),
    ],
)
def test_the_usual_globs_run_as_a_linear_regex(pattern: str, automaton: bool) -> None:
    assert (linear_regex(tokenize(pattern)) is None) == automaton
    assert compile_glob(pattern).automaton == automaton


@pytest.mark.parametrize(
    ("pattern", "path", "want"),
    [
        ("**/*.md", "a.md", True),
        ("**/*.md", "docs/x/a.md", True),
        ("docs/*", "docs/x/a.md", False),
        ("docs/**", "docs/x/a.md", True),
        ("docs/[!a]x", "docs//x", False),
        ("docs/[/]x", "docs//x", False),
        ("[]]", "]", True),
        ("[a-]", "-", True),
        ("a\\b", "a\\b", True),
        ("**.md", "a/b.md", True),
        ("x**/y", "xy", True),
        ("x**/y", "xa/b/y", True),
        ("x**/y", "xay", False),
    ],
)
def test_documented_semantics(pattern: str, path: str, want: bool) -> None:
    assert compile_glob(pattern).matches(path) == want
    assert GlobMatcher(pattern, regex=False).matches(path) == want


@pytest.mark.parametrize(
    ("glob", "message"),
    [
        ("[", "path_glob '[' is not a valid glob: the [ at character 1 is never closed"),
        ("docs/[!]", "path_glob 'docs/[!]' is not a valid glob: the [ at character 6"),
        ("docs/[z-a].md", "the range z-a is reversed; write a-z"),
    ],
)
def test_a_malformed_glob_is_one_line_naming_it(glob: str, message: str) -> None:
    with pytest.raises(InvalidQueryError) as raised:
        SearchRequest.from_arguments({"query": "x", "path_glob": ["docs/*.md", glob]})
    text = str(raised.value)
    assert message in text and "\n" not in text and len(text) < 300


def test_a_long_malformed_glob_is_quoted_short() -> None:
    with pytest.raises(InvalidQueryError) as raised:
        SearchRequest("x", path_glob="a" * 490 + "[")
    assert len(str(raised.value)) < 250


@pytest.mark.parametrize("value", ["1e308", 1e308, -1e20, "99999-01-01", "nan", "", "soon"])
def test_a_date_out_of_range_or_unparsable_is_an_error_not_a_crash(value: object) -> None:
    with pytest.raises(InvalidQueryError, match="modified_after must be an ISO 8601"):
        SearchRequest("x", modified_after=value)
