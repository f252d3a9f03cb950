"""The fast forms of the kind rules' text scans find exactly what the plain forms find.

``LineStarts`` replaces ``^rest`` (``re.M``) with ``\\nrest``, a heading is found by one
match of its line (not a search for candidate lines, then a match of each), fix labels
are found in the lower-cased text without ``re.I``, the fix-sentence nouns have one
pattern each instead of one alternation, and section ends come from one pass instead of a
search after each heading: each is checked here against the plain form, on the vendored
corpora and on generated markdown made of the characters the patterns care about.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rifflux.index import kinds

CORPORA = Path(__file__).resolve().parents[1] / "corpus"

# The plain forms (as the rules were written before the fast ones).
PLAIN_CANDIDATE = re.compile(r"^ {0,3}(?:#|`{3,}|~{3,}|=+[ \t]*$|-+[ \t]*$)", re.M)
PLAIN_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
PLAIN_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
PLAIN_FIX_LABEL = re.compile(
    r"^[ \t>*_+-]*(?:possible |root |the )?(solution|fix|resolution|workaround|cause|remedy"
    r"|how to fix(?: it| this)?)s?[*_]*[ \t]*[:：][*_]*",
    re.I | re.M,
)
PLAIN_FIX_SENTENCE = re.compile(
    r"(?:error|issue|problem|message) (?:means|occurs|happens|is caused|indicates|appears)\b"
)

PIECES = [
    "\n",
    "\n\n",
    " ",
    "   ",
    "\t",
    "#",
    "## ",
    "```",
    "~~~",
    "===",
    "---",
    "> ",
    "* ",
    "- ",
    "_",
    ":",
    "：",
    "Fix",
    "solution",
    "Root cause",
    "how to fix it",
    "Workarounds",
    "s",
    "word",
    "error means",
    "Problem occurs",
    "message is caused",
    "the issue appears",
    "terror happens",
    "İ",
    # Characters re.I equates with a letter of the patterns: dotless i, long s, Kelvin.
    "fıx",
    "ſolution",
    "worKaround",
    "ΣΣ ",
]
markdown = st.lists(st.sampled_from(PIECES), max_size=60).map("".join)


def _plain_fix_sentences(text: str) -> list[int]:
    low = text.lower()
    if not any(words in low for words in kinds._FIX_SENTENCE_WORDS):
        return []
    patterns = [p for p in kinds._FIX_SENTENCES if not p.pattern.startswith(tuple("eipm"))]
    return sorted(
        m.start()
        for pattern in (*patterns, PLAIN_FIX_SENTENCE)
        for m in pattern.finditer(low)
        if m.start() == 0 or not (low[m.start() - 1].isalnum() or low[m.start() - 1] == "_")
    )


def _plain_headings(body: str) -> list[tuple[int, str, int, int]]:
    """Each candidate line sliced out and matched again by the pattern of its marker."""
    found: list[tuple[int, str, int, int]] = []
    fence = ""
    for start in (m.start() for m in PLAIN_CANDIDATE.finditer(body)):
        newline = body.find("\n", start)
        end = len(body) if newline < 0 else newline
        line = body[start:end]
        after = min(end + 1, len(body))
        marker = line.lstrip()[:1]
        if marker in ("`", "~"):
            opener = PLAIN_FENCE.match(line)
            assert opener is not None
            if not fence:
                fence = opener.group(1)
            elif (
                opener.group(1)[0] == fence[0]
                and len(opener.group(1)) >= len(fence)
                and not line.strip().lstrip(fence[0])
            ):
                fence = ""
        elif fence:
            continue
        elif marker == "#":
            atx = PLAIN_ATX.match(line)
            if atx:
                found.append(
                    (len(atx.group(1)), " ".join((atx.group(2) or "").split()), start, after)
                )
        elif start > 0:
            heading = kinds._setext_text(body, start)
            if heading is not None:
                level = 1 if marker == "=" else 2
                found.append((level, " ".join(heading[1].split()), heading[0], after))
    return found


def _plain_section_ends(heads: list[tuple[int, str, int, int]], length: int) -> list[int]:
    return [
        next((h[2] for h in heads[k + 1 :] if h[0] <= level), length)
        for k, (level, _text, _start, _after) in enumerate(heads)
    ]


def _check(text: str) -> None:
    candidates = [(m.start(), m.groups()) for m in kinds._CANDIDATE.anchored.finditer(text)]
    assert [(start, m.groups()) for start, m in kinds._CANDIDATE.matches(text)] == candidates
    assert kinds._headings(text) == _plain_headings(text)
    labels = [m.start() for m in PLAIN_FIX_LABEL.finditer(text)]
    assert kinds._FIX_LABELS.starts(text) == labels
    assert kinds.fix_labels(text, text.lower()) == labels
    assert kinds.fix_sentences(text) == _plain_fix_sentences(text)
    heads = kinds._headings(text)
    assert kinds._section_ends(heads, len(text)) == _plain_section_ends(heads, len(text))


def test_fast_scans_match_the_plain_patterns_on_the_vendored_corpora() -> None:
    files = sorted(CORPORA.rglob("*.md"))
    assert len(files) > 100
    for path in files:
        _check(path.read_text(encoding="utf-8"))


@settings(max_examples=300, deadline=None)
@given(markdown)
def test_fast_scans_match_the_plain_patterns_on_generated_markdown(text: str) -> None:
    _check(text)


LOWER_CASE_LEAVES = [
    "fıx: it",
    "ſolution: it",
    "> Root cauſe: it",
    "worKaround: it",
    "x\n**Fıx**: it",
    "FİX: it",
]


@pytest.mark.parametrize("text", LOWER_CASE_LEAVES)
def test_fix_labels_in_lower_case_match_re_i_on_characters_lower_case_leaves(text: str) -> None:
    # Dotless i and long s match "i" and "s" under re.I; lower case leaves them as they are
    # (the Kelvin sign it maps to "k"; "İ" it lengthens, and the text is searched itself).
    expected = [m.start() for m in PLAIN_FIX_LABEL.finditer(text)]
    assert expected
    assert kinds.fix_labels(text, text.lower()) == expected
