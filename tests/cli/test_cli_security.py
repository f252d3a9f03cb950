"""Findings 5-7 of the security issue, through the rifflux command as a user runs it.

5. read commands must not create an index, its directory or a queue;
6. one line on stderr and a non-zero exit, never a traceback, for every listed failure;
7. a submit whose broker call fails must not leave a job ``queued`` forever.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from rifflux_testing import copy_corpus
from test_cli import rifflux

from rifflux.config import Settings
from rifflux.index.indexer import Indexer

UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"
WRONG_RABBIT_PASSWORD = "amqp://guest:wrong@127.0.0.1:5672/"


def assert_one_line_error(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    assert result.returncode != 0, result
    line = result.stderr.strip()
    assert "Traceback" not in result.stderr, result.stderr
    assert line.count("\n") == 0, result.stderr
    assert line.startswith("rifflux: error: "), line
    for text in expected:
        assert text in line, line
    return line


def tree_entries(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def indexed(tmp_path: Path) -> Path:
    """``tmp_path`` with docs/ indexed in-process into .rifflux/index.db."""
    copy_corpus(tmp_path / "docs", limit=4)
    settings = Settings(db_path=tmp_path / ".rifflux" / "index.db", embedding_backend="hash")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        Indexer(settings).run([tmp_path / "docs"])
    finally:
        os.chdir(cwd)
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("status", "--json"),
        ("search", "agents"),
        ("get-chunk", "abc"),
        ("get-file", "docs/a.md"),
    ],
)
def test_read_commands_report_a_missing_index_and_create_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    db = tmp_path / "nonexistent" / "x.db"
    result = rifflux(tmp_path, *args, "--db", str(db))
    assert_one_line_error(result, f"no index at {db}; create it with `rifflux index DIR`")
    assert tree_entries(tmp_path) == []


def test_reads_with_the_default_index_create_no_state_directory(tmp_path: Path) -> None:
    assert_one_line_error(rifflux(tmp_path, "status"), "no index at .rifflux/index.db")
    assert_one_line_error(rifflux(tmp_path, "search", "x"), "no index at")
    assert tree_entries(tmp_path) == []


def test_a_search_against_a_deleted_index_is_an_error_not_zero_results(indexed: Path) -> None:
    assert rifflux(indexed, "search", "agent").returncode == 0
    for suffix in ("", "-wal", "-shm"):
        Path(f"{indexed / '.rifflux' / 'index.db'}{suffix}").unlink(missing_ok=True)
    assert_one_line_error(rifflux(indexed, "search", "agent"), "no index at")
    assert not (indexed / ".rifflux" / "index.db").exists()


def test_search_with_a_text_file_as_db_is_one_line_and_leaves_it_unchanged(
    tmp_path: Path,
) -> None:
    copy = tmp_path / "passwd"
    shutil.copyfile("/etc/passwd", copy)
    digest = sha256(copy)
    for db in ("/etc/passwd", str(copy)):
        result = rifflux(tmp_path, "search", "x", "--db", db)
        assert_one_line_error(result, "is not a Rifflux index: it is not an SQLite database")
    assert sha256(copy) == digest


def test_search_with_an_empty_file_or_another_apps_database_changes_neither(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    other = tmp_path / "app.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE things(x)")
    conn.commit()
    conn.close()
    digests = {p: sha256(p) for p in (empty, other)}
    for db in (empty, other):
        assert_one_line_error(rifflux(tmp_path, "search", "x", "--db", str(db)), "not a Rifflux")
        assert_one_line_error(rifflux(tmp_path, "status", "--db", str(db)), "not a Rifflux")
    assert {p: sha256(p) for p in (empty, other)} == digests
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sqlite", "empty.db"]


def test_index_refuses_to_write_its_schema_into_another_apps_database(tmp_path: Path) -> None:
    other = tmp_path / "app.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE things(x)")
    conn.commit()
    conn.close()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nwords\n")
    digest = sha256(other)
    result = rifflux(tmp_path, "index", "docs", "--in-process", "--db", str(other))
    assert_one_line_error(result, "is an SQLite database but not a Rifflux index")
    assert sha256(other) == digest


def test_db_naming_a_directory_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(rifflux(tmp_path, "search", "x", "--db", str(tmp_path)), "is a directory")


def test_a_corrupt_database_is_one_line_naming_the_rebuild(indexed: Path) -> None:
    db = indexed / ".rifflux" / "index.db"
    data = bytearray(db.read_bytes())
    page = 4096
    for offset in range(page, len(data), page):
        data[offset : offset + page] = b"\xa5" * page
    db.write_bytes(bytes(data))
    for args in (("search", "agent"), ("status",), ("get-file", "docs/x.md")):
        line = assert_one_line_error(rifflux(indexed, *args), "index database is damaged (")
        assert line.endswith("rebuild with `rifflux index --rebuild DIR`"), line


def test_serve_with_an_impossible_port_is_one_line(tmp_path: Path) -> None:
    result = rifflux(tmp_path, "serve", "--transport", "http", "--port", "99999")
    assert_one_line_error(result, "--port must be from 1 to 65535 (got 99999)")
    result = rifflux(tmp_path, "serve", "--transport", "http", RIFFLUX_HTTP_PORT="99999")
    assert_one_line_error(result, "RIFFLUX_HTTP_PORT='99999' is invalid")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (UNREACHABLE_REDIS, "redis://127.0.0.1:1/0"),
        (WRONG_RABBIT_PASSWORD, "amqp://guest:***@127.0.0.1:5672/"),
    ],
)
def test_an_unusable_broker_is_one_line_and_leaves_no_queued_job(
    indexed: Path, url: str, shown: str
) -> None:
    for args in (("index", "docs", "--no-wait"), ("index", "docs")):
        result = rifflux(indexed, *args, RIFFLUX_BROKER_URL=url)
        line = assert_one_line_error(result, f"cannot use the broker at {shown}")
        assert "wrong" not in line
    conn = sqlite3.connect(indexed / ".rifflux" / "index.db")
    assert conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 0
    conn.close()


def test_status_with_an_unreachable_redis_is_one_line(indexed: Path) -> None:
    result = rifflux(indexed, "status", RIFFLUX_BROKER_URL=UNREACHABLE_REDIS)
    assert_one_line_error(result, "cannot use the broker at redis://127.0.0.1:1/0")


def test_get_file_into_a_closed_pipe_exits_quietly(indexed: Path) -> None:
    stored = sorted(p.relative_to(indexed).as_posix() for p in (indexed / "docs").glob("*.md"))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")}
    environ["RIFFLUX_EMBEDDING_BACKEND"] = "hash"
    command = f"{sys.executable} -m rifflux.cli get-file {stored[0]} | head -c 10"
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=indexed,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert len(result.stdout) == 10
    assert result.stderr == "", result.stderr
    assert result.returncode in (0, 141)


def test_rebuild_never_deletes_a_file_that_is_not_an_index(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nwords\n")
    text = tmp_path / "passwd"
    shutil.copyfile("/etc/passwd", text)
    other = tmp_path / "app.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE things(x)")
    conn.commit()
    conn.close()
    for db, message in ((text, "is not an SQLite database"), (other, "not a Rifflux index")):
        digest = sha256(db)
        result = rifflux(tmp_path, "index", "docs", "--rebuild", "--in-process", "--db", str(db))
        assert_one_line_error(result, message, "not deleting it")
        assert sha256(db) == digest


def test_rebuild_replaces_a_damaged_index(indexed: Path) -> None:
    db = indexed / ".rifflux" / "index.db"
    data = bytearray(db.read_bytes())
    data[4096:] = b"\xa5" * (len(data) - 4096)
    db.write_bytes(bytes(data))
    assert_one_line_error(rifflux(indexed, "search", "agent"), "index database is damaged")
    rebuilt = rifflux(indexed, "index", "docs", "--rebuild", "--in-process")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rifflux(indexed, "search", "agent").returncode == 0


def test_serve_refuses_to_watch_or_reindex_outside_the_allowed_roots(tmp_path: Path) -> None:
    served, outside = tmp_path / "served", tmp_path / "outside"
    served.mkdir()
    outside.mkdir()
    for flags in (("--watch", str(outside)), ("--reindex-on-start", str(outside))):
        result = rifflux(served, "serve", *flags)
        assert_one_line_error(result, f"{outside} is outside the allowed roots ({served})")
    result = rifflux(served, "serve", RIFFLUX_FILE_WATCHER="1", RIFFLUX_FILE_WATCHER_PATHS="..")
    assert_one_line_error(result, "is outside the allowed roots", "RIFFLUX_ALLOWED_ROOTS")
    assert tree_entries(served) == []


def test_serve_in_a_home_directory_refuses_startup_paths_until_roots_are_set(
    tmp_path: Path,
) -> None:
    """``--reindex-on-start``/``--watch`` are the operator's choice, but a server in a home
    directory has no default root: the one line says which RIFFLUX_ALLOWED_ROOTS to set."""
    home = tmp_path / "me"
    (home / "notes").mkdir(parents=True)
    notes = str(home / "notes")
    result = rifflux(home, "serve", "--reindex-on-start", "notes", HOME=str(home))
    line = assert_one_line_error(result, f"--reindex-on-start {notes}: no allowed roots")
    assert line.endswith(
        f"the server runs in {home} (a home directory), so nothing is shared by default; "
        f"set RIFFLUX_ALLOWED_ROOTS={notes}"
    )
    result = rifflux(
        home, "serve", HOME=str(home), RIFFLUX_FILE_WATCHER="1", RIFFLUX_FILE_WATCHER_PATHS="notes"
    )
    assert_one_line_error(result, f"RIFFLUX_FILE_WATCHER_PATHS {notes}: no allowed roots")
    assert tree_entries(home) == ["notes"]
