"""``rifflux mcp-config``: the host entry names this interpreter and absolute paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rifflux_testing import make_settings

from rifflux.index.indexer import Indexer
from rifflux.mcp.host_config import host_config, roots_warning


def test_each_host_wraps_the_same_entry(tmp_path: Path) -> None:
    db = tmp_path / "notes" / ".rifflux" / "index.db"
    entry = {
        "command": os.path.abspath(sys.executable),
        "args": ["-m", "rifflux.cli", "serve", "--db", str(db)],
        "env": {
            "RIFFLUX_DB_PATH": str(db),
            "RIFFLUX_BASE_DIR": str(tmp_path / "notes"),
            "RIFFLUX_ALLOWED_ROOTS": str(tmp_path / "notes"),
        },
    }
    assert host_config("claude", db) == {"mcpServers": {"rifflux": entry}}
    assert host_config("vscode", db) == {"servers": {"rifflux": {"type": "stdio", **entry}}}
    assert host_config("generic", db) == {"name": "rifflux", "transport": "stdio", **entry}


def test_an_existing_index_gives_its_recorded_base_directory(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nalpha bravo charlie\n", encoding="utf-8")
    settings = make_settings(tmp_path, db_path=tmp_path / "elsewhere" / "idx.db")
    Indexer(settings).run([tmp_path / "docs"])
    env = host_config("generic", settings.db_path)["env"]
    assert env["RIFFLUX_BASE_DIR"] == env["RIFFLUX_ALLOWED_ROOTS"] == str(tmp_path)


def test_the_command_prints_the_snippet_with_a_relative_db_made_absolute(tmp_path: Path) -> None:
    host = "vscode"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RIFFLUX_", "RIFLUX_"))}
    done = subprocess.run(
        [sys.executable, "-m", "rifflux.cli", "mcp-config", "--host", host, "--db", "x/i.db"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == host_config(host, tmp_path / "x" / "i.db")
    assert done.stderr == ""


def test_an_index_in_a_home_directory_gets_its_roots_printed_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server run by a host has no default root in a home directory, so the snippet
    always names one; printing the home itself deserves a warning."""
    home = tmp_path / "me"
    monkeypatch.setenv("HOME", str(home))
    db = home / ".rifflux" / "index.db"
    assert host_config("claude", db)["mcpServers"]["rifflux"]["env"]["RIFFLUX_ALLOWED_ROOTS"] == (
        str(home)
    )
    assert roots_warning(db) == (
        f"RIFFLUX_ALLOWED_ROOTS is {home} (a home directory): the server may index and serve "
        "everything under it except the secret paths; set it to the folders you share"
    )
    assert roots_warning(home / "notes" / ".rifflux" / "index.db") is None
