"""``rifflux mcp-config``: the host entry names this installation's ``rifflux`` (bare when
``PATH`` finds that one) and absolute paths; a host that launches exactly that, from
``/``, gets a server whose paths mean what its results show."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from http_support import BOOT_TIMEOUT_S, free_port, wait_until_listening
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_support import (  # noqa: F401  (fixtures)
    DOCS,
    anyio_backend_fixture,
    build_tree,
    call_error,
    call_ok,
    write_docs,
)
from rifflux_testing import make_settings

from rifflux.index.indexer import Indexer
from rifflux.mcp.host_config import (
    claude_code_command,
    host_config,
    installed_script,
    launcher,
    render,
    roots_warning,
)
from rifflux.search.budget import estimate_tokens

SCRIPT = Path(os.path.abspath(sysconfig.get_path("scripts"))) / "rifflux"
needs_script = pytest.mark.skipif(
    not SCRIPT.is_file(), reason="the rifflux entry point is not installed (make install)"
)


def test_each_host_wraps_the_same_entry(tmp_path: Path) -> None:
    db = tmp_path / "notes" / ".rifflux" / "index.db"
    entry = {
        "command": "rifflux",
        "args": ["serve", "--db", str(db)],
        "env": {
            "RIFFLUX_DB_PATH": str(db),
            "RIFFLUX_BASE_DIR": str(tmp_path / "notes"),
            "RIFFLUX_ALLOWED_ROOTS": str(tmp_path / "notes"),
        },
    }
    command = ["rifflux"]
    assert host_config("vscode", db, command=command) == {
        "servers": {"rifflux": {"type": "stdio", **entry}}
    }
    for host in ("claude", "cursor", "generic"):
        assert host_config(host, db, command=command) == {"mcpServers": {"rifflux": entry}}


def test_claude_code_gets_the_claude_mcp_add_line_with_the_name_before_env(
    tmp_path: Path,
) -> None:
    db = tmp_path / "my notes" / ".rifflux" / "index.db"
    base = str(tmp_path / "my notes")
    argv = claude_code_command(db, command=["rifflux"])
    assert argv == [
        "claude", "mcp", "add", "rifflux", "--transport", "stdio", "--scope", "user",
        "--env", f"RIFFLUX_DB_PATH={db}",
        "--env", f"RIFFLUX_BASE_DIR={base}",
        "--env", f"RIFFLUX_ALLOWED_ROOTS={base}",
        "--", "rifflux", "serve", "--db", str(db),
    ]  # fmt: skip
    assert shlex.split(render("claude-code", db, command=["rifflux"])) == argv


@needs_script
def test_the_command_is_bare_rifflux_only_when_path_finds_this_installation(
    tmp_path: Path,
) -> None:
    assert installed_script() == SCRIPT
    assert launcher(lambda _name: str(SCRIPT)) == ["rifflux"]
    other = tmp_path / "rifflux"
    other.write_text("#!/bin/sh\n")
    assert launcher(lambda _name: str(other)) == [str(SCRIPT)]
    assert launcher(lambda _name: None) == [str(SCRIPT)]
    linked = tmp_path / "bin" / "rifflux"  # ~/.local/bin/rifflux of uv tool and pipx
    linked.parent.mkdir()
    linked.symlink_to(SCRIPT)
    assert launcher(lambda _name: str(linked)) == ["rifflux"]


def test_without_an_entry_point_this_interpreter_runs_the_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("rifflux.mcp.host_config.installed_script", lambda: None)
    assert launcher() == [os.path.abspath(sys.executable), "-m", "rifflux.cli"]


def test_an_existing_index_gives_its_recorded_base_directory(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nalpha bravo charlie\n", encoding="utf-8")
    settings = make_settings(tmp_path, db_path=tmp_path / "elsewhere" / "idx.db")
    Indexer(settings).run([tmp_path / "docs"])
    env = host_config("generic", settings.db_path)["mcpServers"]["rifflux"]["env"]
    assert env["RIFFLUX_BASE_DIR"] == env["RIFFLUX_ALLOWED_ROOTS"] == str(tmp_path)


def clean_env(path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RIFFLUX_", "RIFLUX_"))}
    env["PATH"] = path
    return env


def mcp_config(cwd: Path, path: str, *args: str) -> str:
    done = subprocess.run(
        [str(SCRIPT), "mcp-config", *args],
        cwd=cwd,
        env=clean_env(path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


@needs_script
def test_the_command_prints_the_snippet_with_a_relative_db_made_absolute(tmp_path: Path) -> None:
    db = tmp_path / "x" / "i.db"
    elsewhere = "/usr/bin:/bin"
    out = mcp_config(tmp_path, elsewhere, "--host", "vscode", "--db", "x/i.db")
    assert json.loads(out) == host_config("vscode", db, command=[str(SCRIPT)])
    on_path = f"{SCRIPT.parent}:{elsewhere}"
    out = mcp_config(tmp_path, on_path, "--host", "cursor", "--db", "x/i.db")
    assert json.loads(out)["mcpServers"]["rifflux"]["command"] == "rifflux"


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


# -- launched as a host launches it ------------------------------------------------------

TIMEOUT = 120.0
DEFAULT_RESPONSE_TOKENS = 20_000
"""RIFFLUX_MAX_RESPONSE_TOKENS when the host's configuration does not set it."""


def journal(day: int) -> str:
    """A note whose sections all hold "tide": 100 of them, whole, are ~40k tokens."""
    words = " ".join(f"log{day}w{j}" for j in range(60))
    parts = [
        f"## Watch {i}\n\nThe tide turned at watch {i} of day {day}: {words}." for i in range(3)
    ]
    return f"# Day {day}\n\n" + "\n\n".join(parts) + "\n"


JOURNAL = {f"journal/day{day:02d}.md": journal(day) for day in range(40)}


@needs_script
@pytest.mark.anyio
async def test_a_host_launching_the_printed_entry_from_the_root_gets_paths_as_results_show(
    tmp_path: Path,
) -> None:
    """Claude Desktop starts a stdio server in ``/`` with the configured command, args and
    env: ``reindex`` with no path and with a result path, ``get_file`` and ``multi_get``
    with absolute paths, ``db_path`` relative, all read against the notes folder; a
    ``search_rifflux`` of ``top_k`` 100 whose whole answer is ~40k tokens comes within
    the default response budget."""
    notes = tmp_path / "notes"
    write_docs(notes)
    write_docs(notes, JOURNAL)
    host_path = f"{SCRIPT.parent}:/usr/bin:/bin"
    entry: dict[str, Any] = json.loads(
        mcp_config(notes, host_path, "--host", "claude", "--db", ".rifflux/index.db")
    )["mcpServers"]["rifflux"]
    assert entry["command"] == "rifflux"
    env = {
        **clean_env(host_path),
        **entry["env"],
        # Quick to start and to embed; the printed entry is used as is.
        "RIFFLUX_EMBEDDING_BACKEND": "hash",
        "RIFFLUX_WORKERS": "1",
        "RIFFLUX_STARTUP_WORKER_GRACE_SECONDS": "1",
    }
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env, cwd="/")
    with (tmp_path / "server.err").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as s,
        ):
            with anyio.fail_after(TIMEOUT):
                await s.initialize()
            everything = await call_ok(s, "reindex", timeout=TIMEOUT)
            assert everything["indexed_paths"] == [str(notes)]
            assert everything["indexed_files"] == len(DOCS) + len(JOURNAL)

            hits = await call_ok(s, "search_rifflux", timeout=TIMEOUT, query="basil", top_k=100)
            assert hits["results"][0]["path"] == "notes/gardening.txt"
            folder = hits["results"][0]["path"].split("/")[0]
            again = await call_ok(s, "reindex", timeout=TIMEOUT, path=folder)
            assert again["indexed_paths"] == [str(notes / folder)]
            assert again["skipped_files"] == 1

            absolute = str(notes / "docs" / "install.md")
            found = await call_ok(s, "get_file", timeout=TIMEOUT, path=absolute)
            assert found["file"]["path"] == "docs/install.md"
            files = await call_ok(s, "multi_get", timeout=TIMEOUT, paths=[absolute, "docs/*.md"])
            assert [f["path"] for f in files["files"]] == ["docs/install.md", "docs/search.md"]
            # Its largest search fits the host by default: trimmed, and saying so.
            result = await s.call_tool("search_rifflux", {"query": "tide", "top_k": 100})
            assert not result.is_error, result.content
            text = result.content[0].text  # type: ignore[union-attr]
            assert estimate_tokens(text) <= DEFAULT_RESPONSE_TOKENS
            tide = json.loads(text)
            assert tide["budget"]["dropped"] > 0 and tide["count"] == len(tide["results"]) > 0
            own = await call_ok(
                s,
                "search_rifflux",
                timeout=TIMEOUT,
                query="basil",
                top_k=100,
                db_path=".rifflux/index.db",
            )
            assert own["count"] == hits["count"]

            refusal = await call_error(s, "reindex", timeout=TIMEOUT, path="../elsewhere")
            assert refusal == (
                f"'../elsewhere' (resolves to {tmp_path / 'elsewhere'}) is outside the allowed "
                f"roots ({notes}); paths are relative to {notes}"
            )


# -- the line `make run` shows a person ----------------------------------------------------


@needs_script
@pytest.mark.parametrize("http_workers", ["1", "2"])
def test_an_http_server_prints_where_it_is_and_a_command_that_works(
    tmp_path: Path, http_workers: str
) -> None:
    tree = build_tree(tmp_path / "notes")
    port = free_port()
    env = tree.env(PATH="/usr/bin:/bin", RIFFLUX_HTTP_WORKERS=http_workers)
    env["RIFFLUX_DB_PATH"] = ".rifflux/index.db"  # As in a clone: the default, relative.
    err = tmp_path / "server.err"
    with err.open("w") as errlog:
        proc = subprocess.Popen(
            [str(SCRIPT), "serve", "--transport", "http", "--port", str(port)],
            cwd=tree.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
        )
    try:
        wait_until_listening(proc, port)
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        lines: list[str] = []
        while not lines and time.monotonic() < deadline:
            lines = [ln for ln in err.read_text().splitlines() if ln.startswith("rifflux: ")]
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert lines == [
        f"rifflux: MCP server at http://127.0.0.1:{port}/mcp; try: {SCRIPT} search "
        f"'how are files indexed' (connect a host: {SCRIPT} mcp-config --host vscode)"
    ]
    suggested = shlex.split(lines[0].split("try: ", 1)[1].split(" (", 1)[0])
    done = subprocess.run(
        suggested, cwd=tree.root, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "docs/" in done.stdout
