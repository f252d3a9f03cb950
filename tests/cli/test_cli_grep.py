"""``rifflux grep``: the ``grep_rifflux`` tool's object with ``--json``, grep's lines and
exit codes without it, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from rifflux_testing import make_settings
from test_cli import rifflux

from rifflux.index.indexer import Indexer


def test_grep_prints_lines_json_and_exit_codes(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("---\ntitle: A\n---\n# A\n\nretry_count = 3\nretry_limit=5\n")
    (notes / "b.md").write_text("# B\n\nnothing here\n")
    settings = make_settings(tmp_path)
    Indexer(settings).run([notes])
    db = str(settings.db_path)

    lines = rifflux(tmp_path, "grep", r"retry_(count|limit)\s*=", "--regex", "--db", db)
    assert lines.returncode == 0, lines.stderr
    assert lines.stdout.splitlines() == [
        "notes/a.md:6:1:retry_count = 3",
        "notes/a.md:7:1:retry_limit=5",
    ]
    found = rifflux(
        tmp_path,
        "grep",
        "TITLE",
        "--context-lines",
        "1",
        "--max-matches",
        "5",
        "--json",
        "--db",
        db,
    )
    response = json.loads(found.stdout)
    assert set(response) == {"pattern", "regex", "count", "truncated", "scanned", "matches"}
    match = response["matches"][0]
    assert (match["path"], match["line"], match["column"], match["text"]) == (
        "notes/a.md",
        2,
        1,
        "title: A",
    )
    assert match["before"] == ["---"] and match["after"] == ["---"]
    none = rifflux(tmp_path, "grep", "TITLE", "--case-sensitive", "--db", db)
    assert none.returncode == 1 and none.stdout == ""
    bad = rifflux(tmp_path, "grep", "(x", "--regex", "--db", db)
    assert bad.returncode == 2 and bad.stderr.startswith("rifflux: error: pattern is not a valid")
    assert len(bad.stderr.strip().splitlines()) == 1
