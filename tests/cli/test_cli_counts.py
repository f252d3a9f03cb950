"""How ``rifflux index`` and ``rifflux status`` count files for a person: "unchanged" for
files left as they were, "skipped" only for files that were not indexed, and
percentages for coverage and progress."""

from __future__ import annotations

from pathlib import Path

import pytest
from rifflux_testing import make_settings

from rifflux.cli import main
from rifflux.index.indexer import Indexer
from rifflux.store.connection import open_index, write_transaction
from rifflux.store.jobs import add_counts, create_job, update_job


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().out


def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (folder / name).write_text(f"# {name}\n\nA note about tides.\n")
    (folder / "blob.md").write_bytes(b"\x00\x01binary\x00" * 10)
    return folder


def test_index_says_unchanged_for_files_left_as_they_were_and_skipped_for_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    notes(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RIFFLUX_EMBEDDING_BACKEND", "hash")
    code, first = run(capsys, "index", "notes", "--in-process")
    assert code == 0
    assert "indexed 3 files" in first and "unchanged 0, skipped 1," in first, first
    code, again = run(capsys, "index", "notes", "--in-process")
    assert code == 0
    assert "indexed 0 files" in again and "unchanged 3, skipped 1," in again, again


def test_status_prints_percentages_and_a_jobs_unchanged_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(tmp_path)
    Indexer(settings).run([notes(tmp_path)])
    conn = open_index(settings.db_path)
    with write_transaction(conn):
        done = create_job(conn, ["notes"], {})
        update_job(conn, done, state="completed", files_total=4, files_planned=0, planned=True)
        add_counts(conn, done, files_skipped=4, files_unchanged=3)
        running = create_job(conn, ["notes"], {})
        update_job(
            conn,
            running,
            state="running",
            planned=True,
            files_total=8,
            files_planned=8,
            batches_total=2,
        )
        add_counts(
            conn, running, files_written=2, chunks_to_embed=30, chunks_embedded=10, files_done=1
        )
    conn.close()

    code, text = run(capsys, "status", "--db", str(settings.db_path))
    assert code == 0
    assert "embedded: 100% of chunks" in text, text
    assert (
        f"{done} completed 100% of 4 files: 0 indexed, 3 unchanged, 1 skipped, 0 failed; "
        "0 chunks embedded"
    ) in text, text
    assert f"{running} running   12.5% of 8 files: 1 indexed, 0 unchanged, 0 skipped" in text
    assert (
        "phase lexical: keyword-searchable 25% (2/8 files), embedded 33.3% (10/30 chunks)"
    ) in text, text
    assert "skipped/" not in text
