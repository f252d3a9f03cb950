"""Terminal control sequences in file names and text never reach a terminal raw.

A corpus could retitle the terminal (``ESC ] 0 ; TITLE BEL``), clear it (``ESC [ 2 J``),
write the clipboard (OSC 52) or split a result line with a newline in a file name,
through ``rifflux search``, ``rifflux grep`` and ``rifflux index``'s skipped lines. The
human output shows every control character but tab escaped; ``--json`` keeps the text
exact.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from test_cli import rifflux

TITLE = "\x1b]0;PWNED\x07"
CLEAR = "\x1b[2J"
CLIPBOARD = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
CSI_C1 = "\x9b31m"
NAME = f"evil{TITLE}\nname{CLEAR}.md"
TEXT = f"# Heading {CLEAR}{TITLE}\n\nThe zebracorn {CLIPBOARD} grazes {CSI_C1} here.\n"
BAD_FRONT_MATTER = f"---\ntitle: [unclosed {TITLE}\n---\n\n# Note\n\nzebracorn\n"
RAW_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def assert_no_raw_control(result: subprocess.CompletedProcess[str]) -> list[str]:
    """Every line of stdout and stderr free of control characters (but tab); stdout's
    lines returned."""
    assert result.returncode == 0, result.stderr
    for stream in (result.stdout, result.stderr):
        for line in stream.splitlines():
            assert not RAW_CONTROL.search(line), repr(line)
    return result.stdout.splitlines()


def write_corpus(root: Path) -> None:
    (root / "docs").mkdir(parents=True)
    (root / "docs" / NAME).write_text(TEXT)
    (root / "docs" / f"bad{TITLE}\n.md").write_text(BAD_FRONT_MATTER)


def test_search_and_index_show_control_characters_escaped(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    index = rifflux(tmp_path, "index", "--in-process", "docs")
    lines = assert_no_raw_control(index)
    skipped = [line for line in lines if line.startswith("  skipped ")]
    assert skipped == [
        "  skipped docs/bad\\x1b]0;PWNED\\x07\\n.md: front matter is not valid YAML: "
        + skipped[0].split("front matter is not valid YAML: ", 1)[1]
    ]
    found = rifflux(tmp_path, "search", "zebracorn", "--mode", "lexical")
    lines = assert_no_raw_control(found)
    assert lines[0] == "2 results for 'zebracorn' (lexical)"
    # Rank, heading (the bad file has none) and snippet lines: no name split a line.
    assert len(lines) == 1 + 3 + 2, lines
    ranks = sorted(line.split("#")[0] for line in lines if re.match(r" +\d\. ", line))
    assert [rank[5:] for rank in ranks] == [
        "docs/bad\\x1b]0;PWNED\\x07\\n.md",
        "docs/evil\\x1b]0;PWNED\\x07\\nname\\x1b[2J.md",
    ]
    assert "Heading \\x1b[2J\\x1b]0;PWNED\\x07" in found.stdout
    assert "zebracorn \\x1b]52;c;ZWNobyBwd25lZA==\\x07 grazes \\x9b31m here." in found.stdout


def test_json_output_keeps_names_and_text_exact(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    assert rifflux(tmp_path, "index", "--in-process", "docs").returncode == 0
    found = rifflux(tmp_path, "search", "zebracorn", "--mode", "lexical", "--json")
    results = json.loads(found.stdout)["results"]
    evil = next(r for r in results if r["path"] == f"docs/{NAME}")
    assert evil["heading_path"] == f"Heading {CLEAR}{TITLE}"
    assert CLIPBOARD in evil["content"] and CSI_C1 in evil["content"]
    report = json.loads(
        rifflux(tmp_path, "index", "--in-process", "--force", "docs", "--json").stdout
    )
    assert [s["path"] for s in report["skipped"]] == [f"docs/bad{TITLE}\n.md"]


def test_grep_shows_control_characters_escaped(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    assert rifflux(tmp_path, "index", "--in-process", "docs").returncode == 0
    found = rifflux(tmp_path, "grep", "grazes", "--context-lines", "2")
    lines = assert_no_raw_control(found)
    assert (
        "docs/evil\\x1b]0;PWNED\\x07\\nname\\x1b[2J.md:3:40:The zebracorn "
        "\\x1b]52;c;ZWNobyBwd25lZA==\\x07 grazes \\x9b31m here."
    ) in lines
    assert (
        "docs/evil\\x1b]0;PWNED\\x07\\nname\\x1b[2J.md-1-# Heading \\x1b[2J\\x1b]0;PWNED\\x07"
        in (lines)
    )
