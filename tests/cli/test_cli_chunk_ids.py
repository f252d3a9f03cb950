"""``rifflux search`` shows each result's chunk id as a short unique prefix, and
``rifflux get-chunk`` takes it back (or the full id)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rifflux_testing import make_settings

from rifflux.cli import main
from rifflux.index.chunker import chunk_id_for
from rifflux.index.indexer import Indexer

# Two file names whose first chunks' ids share their first 8 hex digits ("2683cd90"),
# found by a birthday search over "notes/n<i>.md"; they differ at the 9th.
TWINS = ("n72235.md", "n88547.md")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    notes.mkdir()
    for name in TWINS:
        (notes / name).write_text(f"# Twin {name}\n\nA note about lighthouse keepers.\n")
    (notes / "other.md").write_text("# Other\n\nA note about lighthouse lamps and oil.\n")
    settings = make_settings(tmp_path)
    Indexer(settings).run([notes])
    return settings.db_path


def test_search_text_shows_a_unique_short_id_that_get_chunk_takes(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert chunk_id_for("notes/" + TWINS[0], 0)[:8] == chunk_id_for("notes/" + TWINS[1], 0)[:8]
    code, out, _ = run(capsys, "search", "lighthouse", "--mode", "lexical", "--db", str(db))
    assert code == 0
    shown = dict(re.findall(r"^\s*\d+\. (\S+)#0  ([0-9a-f]+)  \[", out, re.MULTILINE))
    assert set(shown) == {"notes/n72235.md", "notes/n88547.md", "notes/other.md"}, out
    for path, short in shown.items():
        full = chunk_id_for(path, 0)
        assert full.startswith(short)
        # The twins need a 9th digit to be told apart; the other file needs only 8.
        assert len(short) == (9 if path != "notes/other.md" else 8), (path, short)
        code, out, _ = run(capsys, "get-chunk", short, "--db", str(db))
        assert code == 0
        assert json.loads(out)["chunk"]["chunk_id"] == full
    full = chunk_id_for("notes/other.md", 0)
    code, out, _ = run(capsys, "get-chunk", full.upper(), "--db", str(db))
    assert code == 0 and json.loads(out)["chunk"]["chunk_id"] == full


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("2683cd90", "chunk id prefix '2683cd90' matches 2 chunks; give more of its hex digits"),
        (
            "2683cd9",
            "'2683cd9' is not a chunk id; give the id, or at least its first 8 hex digits, "
            "as search results show it",
        ),
        ("not-an-id-at-all", "'not-an-id-at-all' is not a chunk id"),
        ("00000000", "no chunk with id '00000000' in the index"),
    ],
)
def test_get_chunk_refuses_an_ambiguous_short_or_unknown_id_in_one_line(
    db: Path, capsys: pytest.CaptureFixture[str], given: str, message: str
) -> None:
    code, out, err = run(capsys, "get-chunk", given, "--db", str(db))
    assert code == 1 and out == ""
    assert err.startswith(f"rifflux: error: {message}") and err.count("\n") == 1, err
