"""``rifflux status --check`` and ``rifflux index --repair`` as a user runs them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from cache_damage import DAMAGES
from rifflux_testing import copy_corpus
from test_cli import rifflux

from rifflux.store.connection import PAGE_SIZE

QUERY = "kubernetes deployment best practices"


def indexed(tmp_path: Path, name: str = "") -> Path:
    """A real corpus indexed in-process; returns the directory the CLI runs in."""
    home = tmp_path / name if name else tmp_path
    copy_corpus(home / "docs", limit=60)
    done = rifflux(home, "index", "docs", "--in-process")
    assert done.returncode == 0, done.stderr
    return home


def db_of(home: Path) -> Path:
    return home / ".rifflux" / "index.db"


def search_json(home: Path, mode: str) -> tuple[dict, str]:
    found = rifflux(home, "search", QUERY, "--mode", mode, "--json")
    assert found.returncode == 0, found.stderr
    return json.loads(found.stdout), found.stderr


def without_query_independent(response: dict) -> list[tuple]:
    return [(r["path"], r["chunk_index"], r["score_breakdown"]) for r in response["results"]]


def sqlite_quick_check(db: Path) -> str:
    """quick_check's first complaint, straight from SQLite (its first line after the header)."""
    conn = sqlite3.connect(db)
    try:
        report = conn.execute("PRAGMA quick_check(5)").fetchone()[0]
    finally:
        conn.close()
    return next(line for line in report.splitlines() if not line.startswith("***"))


def test_status_check_passes_on_a_sound_index(tmp_path: Path) -> None:
    home = indexed(tmp_path)

    text = rifflux(home, "status", "--check")
    as_json = rifflux(home, "status", "--check", "--json")

    assert text.returncode == 0, text.stderr
    assert "check database: ok" in text.stdout and "check vectors: ok (fresh)" in text.stdout
    assert as_json.returncode == 0
    check = json.loads(as_json.stdout)["check"]
    assert check["ok"] is True and check["database"]["problems"] == []
    assert check["vector_cache"] == {"ok": True, "state": "fresh", "problems": []}


def test_garbage_over_database_pages_fails_status_check_with_quick_checks_complaint(
    tmp_path: Path,
) -> None:
    home = indexed(tmp_path)
    db = db_of(home)
    pristine = db.read_bytes()
    pages = len(pristine) // PAGE_SIZE
    assert pages > 40, "precondition: a database larger than the damage"
    garbage = np.random.default_rng(4).integers(0, 256, 30 * PAGE_SIZE, dtype=np.uint8)
    # 30 pages past the schema pages, at the first of a few fixed places this search does
    # not read (where that is depends on the index's layout, e.g. the chunk sizes).
    for fraction in (0.5, 0.6, 0.4, 0.7, 0.8):
        db.write_bytes(pristine)
        with db.open("r+b") as fh:
            fh.seek(int(pages * fraction) * PAGE_SIZE)
            fh.write(garbage.tobytes())
        found = rifflux(home, "search", "kubernetes", "--mode", "lexical")
        if found.returncode == 0:
            break
    assert found.returncode == 0, "precondition: damage that searches do not notice"
    complaint = sqlite_quick_check(db)
    assert complaint != "ok", "precondition: SQLite itself sees the damage"

    text = rifflux(home, "status", "--check")
    as_json = rifflux(home, "status", "--check", "--json")

    assert text.returncode == 1
    lines = text.stderr.strip().splitlines()
    assert f"rifflux: check failed: index database: {complaint}" in lines
    assert "Traceback" not in text.stderr
    assert as_json.returncode == 1
    check = json.loads(as_json.stdout)["check"]
    assert check["ok"] is False and check["database"]["problems"][0] == complaint
    assert len(check["database"]["problems"]) > 1


def test_repair_refuses_a_damaged_database_and_names_the_rebuild(tmp_path: Path) -> None:
    home = indexed(tmp_path)
    with db_of(home).open("r+b") as fh:
        fh.seek(4 * PAGE_SIZE)
        fh.write(b"\xa5" * 30 * PAGE_SIZE)

    repaired = rifflux(home, "index", "--repair")

    assert repaired.returncode == 1
    assert repaired.stderr.startswith("rifflux: error: index database is damaged (")
    assert "rifflux index --rebuild DIR" in repaired.stderr
    assert len(repaired.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_cache_fails_check_warns_on_search_and_index_repair_restores_it(
    tmp_path: Path, damage: str
) -> None:
    home = indexed(tmp_path, "damaged")
    reference = indexed(tmp_path, "reference")
    want = {m: search_json(reference, m)[0] for m in ("semantic", "hybrid")}
    lexical = search_json(home, "lexical")[0]

    damaged = DAMAGES[damage](db_of(home))

    check = rifflux(home, "status", "--check")
    assert check.returncode == 1
    failures = [ln for ln in check.stderr.splitlines() if ln.startswith("rifflux: check failed")]
    assert failures == [
        f"rifflux: check failed: vector cache: {damaged} does not match its sha256 checksum; "
        "repair it with `rifflux index --repair` (any index job also republishes it)"
    ]
    for mode in ("semantic", "hybrid"):
        response, _ = search_json(home, mode)
        assert damaged in response["warning"]
        assert without_query_independent(response) == without_query_independent(lexical)
    text = rifflux(home, "search", QUERY, "--mode", "semantic")
    assert "rifflux: warning: the vector cache is corrupt" in text.stderr

    repaired = rifflux(home, "index", "--repair")

    assert repaired.returncode == 0, repaired.stderr
    assert repaired.stdout.startswith("vector cache republished at generation ")
    assert rifflux(home, "status", "--check").returncode == 0
    for mode in ("semantic", "hybrid"):
        assert search_json(home, mode)[0] == want[mode]


def test_repair_without_an_index_creates_nothing(tmp_path: Path) -> None:
    repaired = rifflux(tmp_path, "index", "--repair")

    assert repaired.returncode == 1
    assert "no index at" in repaired.stderr
    assert not (tmp_path / ".rifflux").exists()
