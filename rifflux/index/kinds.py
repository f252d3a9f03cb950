"""Document kinds: decision records, error-solution sections and notes, detected from text.

Every rule that decides a kind lives here, as pure functions of a file's path, front
matter and body; ``tests/index/test_kinds.py`` runs them over the written corpus
``tests/corpus/knowledge`` (ADRs in the MADR and Nygard formats, troubleshooting pages in
the styles of real projects' docs, and notes that look like neither), and
``tests/knowledge_corpus.py`` scores their precision and recall per kind.

Rules, in order:

* **decision** (a whole file): front matter ``type: decision`` or ``type: adr``; or an ADR
  by path (a folder ``adr``, ``adrs``, ``decisions``, ``decision-records``... or a name
  ``NNNN-*.md``) *and* shape (a status plus a Context and a Decision section); or, on any
  path, the full Nygard shape (Status, Context, Decision and Consequences sections). A
  status is front matter ``status``, a ``Status`` section's first line or a ``Status:``
  line near the top; a template's placeholder (``proposed | accepted | ...``) is none.
  Stored: title, status (proposed, accepted, rejected, deprecated, superseded; synonyms
  mapped, e.g. draft → proposed, "Superseded by ADR-5" → superseded), date, decision
  type where stated, and the Decision (or Decision Outcome) section's text.
* **error** (a section): a heading whose heading text or first lines (or its Symptom /
  Error message subsection) carry an error signature (an exception name such as
  ``psycopg2.OperationalError``, an error code such as ``ECONNREFUSED``, ``ERR_OSSL_...``,
  ``ORA-00942``, ``TS2307``, an ``Error:`` / ``fatal:`` / ``npm ERR!`` line, a quoted or
  fenced log line with an error word) and that is followed by a cause or fix (a
  Solution, Fix, Resolution, Workaround or Cause heading below it, a ``**Fix:**`` label,
  or a sentence such as "To fix this" / "This error means"). The innermost such section
  is the pair; a section whose own heading is a fix label is part of one, never one.
  Stored: the signature (the heading, or the matching line) and the solution text.
* **note**: everything else. A chunk takes its file's kind when that is decision, else
  error when it overlaps an error section, else note.

``KNOWLEDGE_VERSION`` names this rule set: bump it when a rule changes, and the next job
re-chunks every file stored under an older version (rifflux.index.changes).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import NamedTuple

from rifflux.index.chunker import MARKDOWN_SUFFIXES, push_heading
from rifflux.index.frontmatter import FrontMatter, text_value
from rifflux.store.rows import ErrorPair, FileKnowledge

KNOWLEDGE_VERSION = 1
"""The version of these rules (and of front matter parsing) a stored file was built with."""

MAX_SIGNATURE_CHARS = 300
MAX_SOLUTION_CHARS = 20_000
LEAD_CHARS = 1_500
"""How much of a section's first lines (before its first subsection) may hold a signature."""
TOP_LINES = 40
"""How many lines at the top of an ADR may hold its ``Status:`` / ``Date:`` lines."""

# -- sections --------------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_FENCE_CHARS = ("`", "~")


class LineStarts:
    """A pattern that matches only at the start of a line, found fast.

    ``^rest`` with ``re.M`` makes the regex engine try every position of the text;
    ``\nrest`` opens with a one-character literal, which it skips to directly (the first
    line is matched on its own). The same matches, in half the CPU on awesome-copilot;
    ``rest`` must not match a newline. ``tests/index/test_kinds_speed.py`` checks both
    forms agree.
    """

    def __init__(self, rest: str, flags: int = 0) -> None:
        self.anchored = re.compile(f"^(?:{rest})", flags | re.M)
        self._first = re.compile(f"(?:{rest})", flags | re.M)
        self._later = re.compile(f"\n(?:{rest})", flags | re.M)

    def matches(self, text: str) -> list[tuple[int, re.Match[str]]]:
        """``(line start, match)`` for each match of ``anchored.finditer(text)``: the same
        groups, the match of a later line opening with its newline."""
        first = self._first.match(text)
        found = [(0, first)] if first else []
        found += [(match.start() + 1, match) for match in self._later.finditer(text)]
        return found

    def starts(self, text: str) -> list[int]:
        """Where a match starts, ascending: ``[m.start() for m in anchored.finditer(text)]``."""
        found = [0] if self._first.match(text) else []
        found.extend(m.start() + 1 for m in self._later.finditer(text))
        return found


# A line that may open or close a fence (its run of markers), be an ATX heading (its
# marker and the rest of its line, whose text ``_atx_text`` cuts out) or a setext
# underline. The lookahead fails most lines at their first character, before the
# alternatives are tried one by one.
_CANDIDATE = LineStarts(
    r" {0,3}(?=[`~#=-])"
    r"(?:(`{3,}|~{3,})|(#{1,6})(?![^ \t\n])(.*)|(=+|-+)[ \t]*$)"
)
_NOT_PARAGRAPH = re.compile(r"^ {0,3}(?:[-*+>]|\d+[.)]|#|`{3}|~{3}|\|)")


class Section(NamedTuple):
    """A heading and what it owns, as character offsets into the body.

    The root (``level`` 0) owns the whole body; its lead is the preamble, and its heading
    the front matter title when no H1 names the document (as the chunker's breadcrumb).
    A NamedTuple rather than a frozen dataclass, whose constructor sets each field through
    ``object.__setattr__``: a file makes one per heading.
    """

    level: int
    heading: str
    path: str  # the chunker's breadcrumb for text under this heading
    start: int  # the heading line's start
    body: int  # just after the heading line(s)
    lead_end: int  # the next heading of any level (or the end)
    end: int  # the next heading of this level or higher (or the end)
    label: str = ""  # the heading as a label (``heading_label``)


def sections(body: str, title: str = "", *, markdown: bool = True) -> list[Section]:
    """The root section, then every ATX or setext heading outside fenced code, in order."""
    heads: list[tuple[int, str, int, int]] = []  # (level, text, start, body)
    if markdown:
        heads = _headings(body)
    has_h1 = any(level == 1 for level, _, _, _ in heads)
    stack = [(0, title)] if title and not has_h1 else []
    root = title if stack else ""  # the front matter title, when it names the document
    out = [Section(0, root, root, 0, 0, heads[0][2] if heads else len(body), len(body), "")]
    ends = _section_ends(heads, len(body))
    for k, (level, text, start, after) in enumerate(heads):
        crumb = push_heading(stack, level, text)
        lead_end = heads[k + 1][2] if k + 1 < len(heads) else len(body)
        out.append(
            Section(level, text, crumb, start, after, lead_end, ends[k], heading_label(text))
        )
    return out


def _section_ends(heads: Sequence[tuple[int, str, int, int]], length: int) -> list[int]:
    """Where each heading's section ends: the start of the next heading of its level or
    higher, else ``length``. One pass: a heading closes every open one not above it."""
    ends = [length] * len(heads)
    open_heads: list[int] = []
    for k, (level, _text, start, _after) in enumerate(heads):
        while open_heads and heads[open_heads[-1]][0] >= level:
            ends[open_heads.pop()] = start
        open_heads.append(k)
    return ends


def _headings(body: str) -> list[tuple[int, str, int, int]]:
    """(level, text, start, body start) of each heading outside fenced code. Only the lines
    that may open or close a fence, be an ATX heading or underline a setext one are looked
    at, each matched once (``_CANDIDATE``'s groups say which)."""
    found: list[tuple[int, str, int, int]] = []
    fence = ""
    for start, match in _CANDIDATE.matches(body):
        run, hashes, rest, underline = match.groups()
        if run:
            if not fence:
                fence = run
            elif run[0] == fence[0] and len(run) >= len(fence):
                newline = body.find("\n", start)
                if not body[start : len(body) if newline < 0 else newline].strip().lstrip(run[0]):
                    fence = ""
        elif fence:
            continue
        elif hashes:
            after = min(match.end() + 1, len(body))
            found.append((len(hashes), " ".join(_atx_text(rest).split()), start, after))
        elif start > 0:
            heading = _setext_text(body, start)
            if heading is not None:
                level = 1 if underline[0] == "=" else 2
                after = min(match.end() + 1, len(body))
                found.append((level, " ".join(heading[1].split()), heading[0], after))
    return found


def _atx_text(rest: str) -> str:
    r"""An ATX heading's text, from what follows its marker on its line (empty, or opening
    with a space or tab): what ``^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$``
    captures, without the lazy scan that tries the closing run at every character: the
    rest without the spaces around it, and without a closing run of "#" that follows a
    space or tab."""
    text = rest.strip(" \t")
    bare = text.rstrip("#")
    if bare != text and bare.endswith((" ", "\t")):
        return bare.rstrip(" \t")
    return text


def _setext_text(body: str, underline: int) -> tuple[int, str] | None:
    """(start, text) of the one-line paragraph a ``===``/``---`` line at ``underline``
    turns into a heading, or None (a blank line or another block before it)."""
    start = body.rfind("\n", 0, underline - 1) + 1
    text = body[start : underline - 1]
    if not text.strip() or _NOT_PARAGRAPH.match(text) or text.startswith("    "):
        return None
    if start > 0 and body[body.rfind("\n", 0, start - 1) + 1 : start - 1].strip():
        return None  # a paragraph of several lines: not modelled, not a heading here
    return start, text


def descendants(all_sections: Sequence[Section], parent: Section) -> list[Section]:
    """The headings under ``parent``, in order."""
    return [
        s
        for s in all_sections
        if s.level > parent.level and parent.start <= s.start < parent.end and s is not parent
    ]


def children(all_sections: Sequence[Section], parent: Section) -> list[Section]:
    """The headings directly under ``parent`` (the highest level present below it)."""
    inside = descendants(all_sections, parent)
    top = min((s.level for s in inside), default=0)
    return [s for s in inside if s.level == top]


# -- decisions -------------------------------------------------------------------------

_ADR_FOLDERS = frozenset(
    {
        "adr",
        "adrs",
        "decisions",
        "decision-records",
        "decision_records",
        "architecture-decisions",
        "architecture-decision-records",
        "architectural-decisions",
    }
)
_NUMBERED = re.compile(r"^\d{3,5}[-_]")
_STATUS_LINE = re.compile(
    r"^[ \t]*(?:[-*+][ \t]+)?[*_]*status[*_]*[ \t]*:[*_]*[ \t]*(.+)$", re.I | re.M
)
_DATE_LINE = re.compile(
    r"^[ \t]*(?:[-*+][ \t]+)?[*_]*(?:date|decided(?: on)?)[*_]*[ \t]*:[*_]*[ \t]*(.+)$", re.I | re.M
)
_TYPE_LINE = re.compile(
    r"^[ \t]*(?:[-*+][ \t]+)?[*_]*decision[ _-]?type[*_]*[ \t]*:[*_]*[ \t]*(.+)$", re.I | re.M
)
_STRUCK = re.compile(r"~~.*?~~")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_WORD = re.compile(r"[a-z]+")
_LABEL_NUMBERING = re.compile(r"^[\W\d_]*(?:adr[- ]?\d+[:.]?)?")
_STATUS_SYNONYMS = {
    "proposed": "proposed",
    "proposal": "proposed",
    "draft": "proposed",
    "pending": "proposed",
    "open": "proposed",
    "accepted": "accepted",
    "approved": "accepted",
    "adopted": "accepted",
    "agreed": "accepted",
    "decided": "accepted",
    "rejected": "rejected",
    "declined": "rejected",
    "deprecated": "deprecated",
    "obsolete": "deprecated",
    "retired": "deprecated",
    "superseded": "superseded",
    "superceded": "superseded",
    "replaced": "superseded",
}
_DECISION_TYPE_KEYS = ("decision_type", "decision-type", "decisiontype", "category")


def heading_label(heading: str) -> str:
    """A heading as a label: lower case, numbering, emoji and punctuation dropped."""
    text = _LINK.sub(r"\1", heading).lower() if "](" in heading else heading.lower()
    numbering = _LABEL_NUMBERING.match(text)  # always matches, if only the empty string
    return " ".join(_WORD.findall(text, numbering.end() if numbering else 0))


_CONTEXT_LABELS = frozenset(
    {"context", "context and problem statement", "problem statement", "context and motivation"}
)
_DECISION_LABELS = frozenset({"decision", "decision outcome", "the decision", "decisions"})
_CONSEQUENCE_LABELS = frozenset({"consequences", "consequence"})


def canonical_status(raw: str) -> str:
    """A decision's status in one word (see the module docstring); '' for none or a
    template's placeholder."""
    text = _LINK.sub(r"\1", _STRUCK.sub(" ", raw)).lower()
    if "|" in text or "{" in text:
        return ""
    words: list[str] = _WORD.findall(text)
    if not words:
        return ""
    if words[0] in _STATUS_SYNONYMS:
        return _STATUS_SYNONYMS[words[0]]
    for word in words:
        if word in _STATUS_SYNONYMS:
            return _STATUS_SYNONYMS[word]
    return words[0]


def _top_lines(body: str) -> str:
    """The first ``TOP_LINES`` lines of the body's text (blank front matter lines skipped)."""
    text = body.lstrip("\n")
    end = -1
    for _ in range(TOP_LINES):
        end = text.find("\n", end + 1)
        if end < 0:
            return text
    return text[:end]


def _first_text_line(text: str) -> str:
    for line in text.split("\n"):
        stripped = line.strip().strip("*_>-+ \t")
        if stripped:
            return stripped
    return ""


def _is_adr_path(rel_path: str) -> bool:
    path = PurePosixPath(rel_path.lower())
    return bool(_ADR_FOLDERS & set(path.parts[:-1])) or bool(_NUMBERED.match(path.name))


@dataclass(frozen=True, slots=True)
class DecisionFields:
    title: str
    status: str
    date: str
    decision_type: str
    decision: str


def decision_fields(
    rel_path: str, front: FrontMatter, all_sections: Sequence[Section]
) -> DecisionFields | None:
    """The decision record's fields if the file is one (the decision rule), else None."""
    body = front.body
    by_label = {s.label: s for s in reversed(all_sections) if s.level}
    context = next((by_label[label] for label in _CONTEXT_LABELS if label in by_label), None)
    decision = next((by_label[label] for label in _DECISION_LABELS if label in by_label), None)
    declared = front.doc_type in ("decision", "adr")
    if not declared and (context is None or decision is None):
        return None  # most files: no status is read
    top = _top_lines(body)
    status_section = by_label.get("status")
    raw_status = front.status
    if not raw_status and status_section is not None:
        raw_status = _first_text_line(body[status_section.body : status_section.end])
    if not raw_status and (line := _STATUS_LINE.search(top)):
        raw_status = line.group(1)
    status = canonical_status(raw_status)
    consequences = any(label in by_label for label in _CONSEQUENCE_LABELS)
    if not (declared or (status and (_is_adr_path(rel_path) or consequences))):
        return None
    date = front.date
    if not date and (line := _DATE_LINE.search(top)):
        date = " ".join(line.group(1).split()).strip("*_ ")
    decision_type = next(
        (
            text_value(front.fields.get(key)).lower()
            for key in _DECISION_TYPE_KEYS
            if text_value(front.fields.get(key))
        ),
        "",
    )
    if not decision_type and (line := _TYPE_LINE.search(body)):
        decision_type = " ".join(line.group(1).split()).strip("*_ ").lower()
    return DecisionFields(
        title=_title(rel_path, front, all_sections),
        status=status,
        date=date,
        decision_type=decision_type,
        decision=_section_text(body, decision) if decision is not None else "",
    )


def _title(rel_path: str, front: FrontMatter, all_sections: Sequence[Section]) -> str:
    if front.title:
        return front.title
    h1 = next((s.heading for s in all_sections if s.level == 1), "")
    return h1 or PurePosixPath(rel_path).stem


def _section_text(body: str, section: Section) -> str:
    """A section's own text (up to its first subsection), or with its subsections when it
    has no text of its own."""
    own = body[section.body : section.lead_end].strip()
    return own or body[section.body : section.end].strip()


# -- errors ----------------------------------------------------------------------------

_EXCEPTION = re.compile(r"\b(?:[a-z_][\w]*\.)*[A-Z][A-Za-z0-9_]*(?:Error|Exception|Fault)\b")
_ERRNO = (
    "EACCES|EADDRINUSE|EADDRNOTAVAIL|EAGAIN|EAI_AGAIN|EBADF|EBADENGINE|EBUSY|ECONNABORTED|"
    "ECONNREFUSED|ECONNRESET|EEXIST|EHOSTUNREACH|EINTEGRITY|EINVAL|EISDIR|ELIFECYCLE|EMFILE|"
    "ENAMETOOLONG|ENETUNREACH|ENOENT|ENOMEM|ENOSPC|ENOTDIR|ENOTEMPTY|ENOTFOUND|EPERM|EPIPE|"
    "ERESOLVE|EROFS|ETIMEDOUT|ETXTBSY"
)
_CODE = re.compile(
    rf"\b(?:{_ERRNO}|ERR_[A-Z0-9_]{{3,}}|(?:ORA|PLS|TNS|IMP|EXP)-\d{{5}}"
    r"|(?:TS|CS|BC|FS|LNK|MSB|NETSDK|NU)\d{4}|E\d{4}|SQLSTATE"
    r"|CrashLoopBackOff|ImagePullBackOff|ErrImagePull|OOMKilled)\b"
    r"|\berror\[E\d{4}\]|\b0x[0-9A-Fa-f]{8}\b|\bERROR \d{3,5}\b"
    r"|\b[45]\d\d (?:Bad Request|Unauthorized|Forbidden|Not Found|Conflict|Too Many Requests"
    r"|Internal Server Error|Bad Gateway|Service Unavailable|Gateway Timeout)\b"
    r"|Traceback \(most recent call last\)|Segmentation fault|core dumped"
)
# "Error:", "fatal:", "error[E0502]:", "npm ERR!", "panic:", "FAILED:" as a line's label.
_ERROR_LABEL = re.compile(
    r"(?:^|[\s:\]>(])(?:error|fatal|panic|failure|failed|err!|uncaught|unhandled)"
    r"(?:\[[^\]\n]*\])?[*_]*[ \t]*(?:[:!]|exception\b)",
    re.I,
)
# A log line's level: after at most three leading tokens with digits (a timestamp, a pid).
_LOG_LEVEL = re.compile(
    r"^\s*(?:\S*\d\S*\s+){0,3}\[?(?:ERROR|FATAL|CRITICAL|SEVERE|PANIC)\]?(?::|\s+\S)"
)
_ERROR_WORDS = re.compile(
    r"\b(?:error|exception|fatal|failed|failure|denied|refused|panic|traceback|cannot|"
    r"can't|could not|unable to|not found|no such file|no space left|timed out|"
    r"undefined reference|unresolved|segmentation fault)\b",
    re.I,
)
# Every signature holds one of these (or a ``_CODE``): text without any is skipped whole.
# (Substring tests of the lower-cased text: one regex of these alternatives costs ~50x more.)
_SIGNAL_WORDS = (
    "error",
    "exception",
    "fault",
    "fatal",
    "panic",
    "fail",
    "err!",
    "uncaught",
    "unhandled",
    "denied",
    "refused",
    "cannot",
    "can't",
    "could not",
    "unable to",
    "not found",
    "no such file",
    "no space left",
    "timed out",
    "undefined reference",
    "unresolved",
    "segmentation",
    "traceback",
    "critical",
    "severe",
)
_MESSAGE = re.compile(r"\S:\s+\S")  # "prefix: message", the shape of most error output
_CODE_LINE = re.compile(
    r"^\s*(?:except|raise|throw|catch|class|def|import|from|return|try|if|elif|else|for|"
    r"while|new|const|let|var|func|fn|public|private|print|console|echo|//|#|/\*|\*)\b"
)
# Fences whose info string names no programming language hold output: logs, terminals.
_OUTPUT_FENCES = frozenset(
    {
        "",
        "text",
        "txt",
        "plain",
        "plaintext",
        "console",
        "terminal",
        "shell",
        "sh",
        "bash",
        "zsh",
        "powershell",
        "pwsh",
        "ps",
        "cmd",
        "bat",
        "log",
        "logs",
        "output",
        "none",
        "stderr",
    }
)
_SYMPTOM_LABELS = frozenset(
    {
        "symptom",
        "symptoms",
        "error",
        "error message",
        "error messages",
        "the error",
        "problem",
        "the problem",
        "issue",
        "what you see",
        "description",
    }
)
_FIX_HEADING = re.compile(
    r"^(?:the |possible |probable |likely |root |known |quick |suggested |recommended )?"
    r"(?:solution|fix|resolution|workaround|cause|remedy|remedies|answer)(?:s|es)?\b"
    r"|^how to (?:fix|resolve|solve|work around)\b|^what to do\b"
    r"|^(?:steps|ways) to (?:fix|resolve)\b|^(?:fix|resolve|solve) (?:it|this)\b"
)
# The lookahead (the first letters of the words below; "s" apart, as the lower-case form
# widens it) fails most lines at their first letter, before the alternatives are tried.
_FIX_LABEL_REST = (
    r"[ \t>*_+-]*(?=[prtfwch]|s)(?:possible |root |the )?(solution|fix|resolution|workaround"
    r"|cause|remedy|how to fix(?: it| this)?)s?[*_]*[ \t]*[:：][*_]*"
)
_FIX_LABELS = LineStarts(_FIX_LABEL_REST, re.I)
_FIX_LABEL = _FIX_LABELS.anchored
# The same labels in the lower-cased text, without re.I (twice as fast). Lower case maps
# every character that re.I equates with one of the pattern's to it, but for "ı" and "ſ"
# (dotless i and long s, whose upper case is "I" and "S"): hence their classes.
_FIX_LABELS_LOWER = LineStarts(_FIX_LABEL_REST.replace("i", "[iı]").replace("s", "[sſ]"))
# Sentences that give a fix or a cause, matched in the lower-cased text: one pattern per
# leading literal (so one per noun below), which the regex engine finds ~4x faster than
# one alternation with re.I.
_CAUSE_VERBS = r"(?:means|occurs|happens|is caused|indicates|appears)\b"
_FIX_SENTENCES = tuple(
    re.compile(pattern)
    for pattern in (
        r"to (?:fix|resolve|solve|work around) (?:this|it|the (?:error|issue|problem))\b",
        r"you can (?:fix|resolve|solve|work around) (?:this|it)\b",
        r"the (?:fix|solution|workaround) is\b",
        *(f"{noun} {_CAUSE_VERBS}" for noun in ("error", "issue", "problem", "message")),
        r"caused by\b",
    )
)


def fix_labels(text: str, low: str) -> list[int]:
    """Where a line of ``text`` opens with a fix label ("Fix:", "**Root cause**:"), sorted;
    ``low`` is ``text.lower()``, searched instead when each character lowered to one (its
    offsets are then those of ``text``)."""
    if len(low) == len(text):
        return _FIX_LABELS_LOWER.starts(low)
    return _FIX_LABELS.starts(text)


def fix_sentences(text: str, low: str | None = None) -> list[int]:
    """Where ``text`` gives a fix or a cause in a sentence ("To fix this", "This error
    means", "caused by"), sorted; [] without one of ``_FIX_SENTENCE_WORDS``. ``low``:
    ``text.lower()`` if the caller has it. (The patterns open with their literal, which
    the regex engine finds fast; the word boundary before it is checked here.)"""
    if low is None:
        low = text.lower()
    if not any(words in low for words in _FIX_SENTENCE_WORDS):
        return []
    return sorted(
        m.start()
        for pattern in _FIX_SENTENCES
        for m in pattern.finditer(low)
        if m.start() == 0 or not (low[m.start() - 1].isalnum() or low[m.start() - 1] == "_")
    )


def _clean_line(line: str) -> str:
    """A signature line without its quoting, list marker, prompt or wrapping markup."""
    text = line.strip().lstrip(">").strip()
    text = re.sub(r"^(?:[-*+]|\d+[.)])\s+", "", text)
    text = re.sub(r"^\$\s+", "", text)
    while len(text) > 1 and text[0] == text[-1] and text[0] in "`*_\"'":
        text = text[1:-1].strip()
    return " ".join(text.split())


def _line_signature(line: str, where: str) -> bool:
    """Whether one line carries an error signature. ``where``: ``prose``, ``inline``
    (code spans), ``output`` (a blockquote or an output fence: logs and terminals) or
    ``code`` (a fence in a programming language, where only codes and tracebacks count)."""
    if _CODE.search(line):
        return True
    exception = _EXCEPTION.search(line)
    if where == "code":
        return bool(exception and exception.start() == len(line) - len(line.lstrip()))
    if _ERROR_LABEL.search(line):
        return True
    if where != "output":
        return bool(exception)
    if _CODE_LINE.match(line):
        return False
    if exception or _LOG_LEVEL.match(line):
        return True
    return bool(_ERROR_WORDS.search(line) and _MESSAGE.search(line))


def has_signal(text: str) -> bool:
    """Whether ``text`` could hold a signature at all (cheap: substring tests, then one
    search for an error code)."""
    low = text.lower()
    return any(word in low for word in _SIGNAL_WORDS) or bool(_CODE.search(text))


def signature_in(text: str) -> str:
    """The first line of ``text`` (markdown) carrying an error signature, cleaned; ''."""
    if not has_signal(text):
        return ""
    fence, language = "", ""
    for line in text.split("\n"):
        opener = _FENCE.match(line) if line.lstrip()[:1] in _FENCE_CHARS else None
        if opener:
            if fence:
                fence = ""
            else:
                fence = opener.group(1)
                info = line.strip().lstrip(fence[0]).strip().split()
                language = info[0].lower() if info else ""
            continue
        if not line.strip() or not has_signal(line):
            continue
        if fence:
            where = "output" if language in _OUTPUT_FENCES else "code"
        else:
            where = "output" if line.lstrip().startswith(">") else "prose"
        inline = re.findall(r"`([^`\n]+)`", line) if where == "prose" else []
        if _line_signature(line, where) or any(_line_signature(c, "inline") for c in inline):
            return _clean_line(line)[:MAX_SIGNATURE_CHARS]
    return ""


def heading_signature(heading: str) -> bool:
    return bool(heading) and (
        bool(_CODE.search(heading))
        or bool(_ERROR_LABEL.search(heading))
        or bool(_EXCEPTION.search(heading))
    )


def is_fix_label(label: str) -> bool:
    """Whether a heading (as a label) names a fix or a cause: Solution, Fix, How to fix it..."""
    return bool(_FIX_HEADING.match(label))


def _is_cause_label(label: str) -> bool:
    return bool({"cause", "causes"} & set(label.split()))


@dataclass(frozen=True, slots=True)
class ErrorSection:
    """An error-solution pair found in the body: the section, its signature, its solution."""

    section: Section
    signature: str
    solution: str


# One of these is in every match of ``_FIX_SENTENCES`` (lower case): a file without any
# skips the regexes, which cost ~10x these substring tests.
_FIX_SENTENCE_WORDS = (
    "fix",
    "resolv",
    "solv",
    "solution",
    "work around",
    "workaround",
    "caused",
    "means",
    "occurs",
    "happens",
    "indicates",
    "appears",
)


def error_sections(body: str, all_sections: Sequence[Section]) -> list[ErrorSection]:
    """Every innermost section that is an error-solution pair (see the module docstring).

    The fixes are found first, in one pass over the body (fix headings, ``Fix:`` labels,
    "to fix this" sentences): only a section with one below it is searched for a
    signature, so a file without any costs two regex passes.
    """
    low = body.lower()
    fixes = sorted(
        [s.start for s in all_sections if s.level and is_fix_label(s.label)]
        + fix_labels(body, low)
        + fix_sentences(body, low)
    )
    if not fixes:
        return []  # most files: no section is searched for a signature
    found: list[ErrorSection] = []
    for section in all_sections:
        if section.level and is_fix_label(section.label):
            continue
        first_fix = bisect.bisect_left(fixes, section.body)
        if first_fix == len(fixes) or fixes[first_fix] >= section.end:
            continue
        signature = _signature(body, all_sections, section)
        if signature:
            found.append(ErrorSection(section, signature, _solution(body, all_sections, section)))
    return [
        pair
        for pair in found
        if not any(
            other is not pair
            and pair.section.start <= other.section.start < pair.section.end
            and other.section.level > pair.section.level
            for other in found
        )
    ]


def _signature(body: str, all_sections: Sequence[Section], section: Section) -> str:
    if heading_signature(section.heading):
        return section.heading[:MAX_SIGNATURE_CHARS]
    lead = body[section.body : min(section.lead_end, section.body + LEAD_CHARS)]
    found = signature_in(lead)
    if found:
        return found
    for child in children(all_sections, section):
        if child.label in _SYMPTOM_LABELS:
            found = signature_in(body[child.body : min(child.end, child.body + LEAD_CHARS)])
            if found:
                return found
    return ""


def _solution(body: str, all_sections: Sequence[Section], section: Section) -> str:
    fixes = [s for s in descendants(all_sections, section) if is_fix_label(s.label)]
    preferred = [s for s in fixes if not _is_cause_label(s.label)] or fixes
    if preferred:
        text = "\n\n".join(body[s.body : s.end].strip() for s in _outermost(preferred))
        return text[:MAX_SOLUTION_CHARS]
    own = body[section.body : section.end]
    labels = list(_FIX_LABEL.finditer(own))
    if labels:
        fix = next((m for m in labels if m.group(1).lower() != "cause"), labels[0])
        return own[fix.start() :].strip()[:MAX_SOLUTION_CHARS]
    sentences = fix_sentences(own)
    start = own.rfind("\n\n", 0, sentences[0]) + 1 if sentences else 0
    return own[start:].strip()[:MAX_SOLUTION_CHARS]


def _outermost(found: Sequence[Section]) -> list[Section]:
    return [s for s in found if not any(o.start < s.start < o.end for o in found if o is not s)]


# -- a file ----------------------------------------------------------------------------


def chunk_spans(body: str, contents: Sequence[str]) -> list[tuple[int, int]]:
    """Each chunk's ``[start, end)`` in ``body``: chunks are slices of it, in order; a
    split table's chunk repeats the header first (its remaining lines are the slice)."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for content in contents:
        at = body.find(content, pos)
        if at < 0:
            content = content.split("\n", 2)[-1]
            at = body.find(content, pos)
        if at < 0:
            spans.append((pos, pos))
            continue
        spans.append((at, at + len(content)))
        pos = at + len(content)
    return spans


def _chunks_over(spans: Sequence[tuple[int, int]], start: int, end: int) -> list[int]:
    return [i for i, (lo, hi) in enumerate(spans) if lo < end and hi > start]


def classify(rel_path: str, front: FrontMatter, chunk_contents: Sequence[str]) -> FileKnowledge:
    """The knowledge row of a file: its front matter fields and its kind, with its error
    pairs mapped onto its chunks (``chunk_contents``, the chunker's output for ``front.body``)."""
    markdown = PurePosixPath(rel_path).suffix.lower() in MARKDOWN_SUFFIXES
    found = sections(front.body, front.title, markdown=markdown)
    decision = decision_fields(rel_path, front, found) if markdown else None
    if decision is not None:
        return FileKnowledge(
            version=KNOWLEDGE_VERSION,
            kind="decision",
            title=decision.title,
            about=front.about,
            tags=front.tags,
            doc_type=front.doc_type,
            status=decision.status,
            date=decision.date,
            decision_type=decision.decision_type,
            decision=decision.decision,
            extra=front.extra_json(),
        )
    pairs = []
    found_pairs = error_sections(front.body, found)
    # Most files have no error section: their chunks are not located.
    spans = chunk_spans(front.body, chunk_contents) if found_pairs else []
    for pair in found_pairs:
        over = _chunks_over(spans, pair.section.start, pair.section.end)
        if over:
            pairs.append(
                ErrorPair(pair.section.path, pair.signature, pair.solution, over[0], over[-1])
            )
    return FileKnowledge(
        version=KNOWLEDGE_VERSION,
        kind="error" if pairs else "note",
        title=front.title or next((s.heading for s in found if s.level == 1), ""),
        about=front.about,
        tags=front.tags,
        doc_type=front.doc_type,
        status=front.status.lower(),
        date=front.date,
        extra=front.extra_json(),
        errors=tuple(pairs),
    )
