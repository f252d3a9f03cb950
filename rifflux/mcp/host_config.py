"""``rifflux mcp-config``: what an MCP host needs to start this installation's server.

Invariants:

* The command is this installation's ``rifflux`` entry point: plain ``rifflux`` when
  the ``rifflux`` found on ``PATH`` is that same file (``uv tool install``, ``pipx``,
  an activated virtualenv), else its absolute path, so a host never starts another
  installation's server; an installation without the entry point (run from a source
  tree) is started as ``python -m rifflux.cli`` by this interpreter's absolute path
  (``sys.executable`` made absolute, not resolved: a virtualenv's ``bin/python`` is a
  symlink whose target has no Rifflux). The workers the server starts run from the
  same installation.
* Every path in it is absolute: the index database, and the directory its stored paths
  are relative to (``RIFFLUX_BASE_DIR``), which is the directory the server works in
  (hosts start servers in ``/`` or the home directory, and most have no setting for the
  working directory) and the one directory it may index and serve
  (``RIFFLUX_ALLOWED_ROOTS``, always set, docs/security.md). That directory is the
  index's recorded base directory when the index exists, else the directory holding
  the ``.rifflux`` folder of the database (else the database's own directory). When it
  is ``/``, a home directory or a parent of one, it is still printed (the index's paths
  need it), with a warning to narrow it (:func:`roots_warning`).
* Each host gets its own format: VS Code's ``servers``, the ``mcpServers`` object of
  Claude Desktop, Cursor and most others (``generic``), and Claude Code's
  ``claude mcp add`` command line. Nothing is written: the output is for the user to
  paste or run.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rifflux.errors import RiffluxError
from rifflux.index.allowed import known_homes, unsafe_default_root
from rifflux.store.connection import open_index_readonly
from rifflux.store.reader import get_metadata

HOSTS = ("vscode", "claude", "claude-code", "cursor", "generic")
SERVER_NAME = "rifflux"
SCRIPT = "rifflux"
"""The console script ``[project.scripts]`` installs."""

Which = Callable[[str], str | None]


def base_dir_for(db_path: Path) -> Path:
    """The directory an index's paths are relative to (see module docstring)."""
    if db_path.is_file():
        try:
            conn = open_index_readonly(db_path)
        except RiffluxError:
            conn = None
        if conn is not None:
            try:
                recorded = get_metadata(conn, "base_dir")
            finally:
                conn.close()
            if recorded:
                return Path(recorded)
    parent = db_path.parent
    return parent.parent if parent.name == ".rifflux" else parent


def roots_warning(db_path: Path) -> str | None:
    """A one-line warning when the printed RIFFLUX_ALLOWED_ROOTS shares too much."""
    base = base_dir_for(Path(os.path.abspath(db_path)))
    why = unsafe_default_root(base, *known_homes())
    if why is None:
        return None
    return (
        f"RIFFLUX_ALLOWED_ROOTS is {base} ({why}): the server may index and serve "
        "everything under it except the secret paths; set it to the folders you share"
    )


def installed_script() -> Path | None:
    """This installation's ``rifflux`` entry point, if it has one: in the scripts
    directory of its environment (the virtualenv pip, ``uv tool`` or pipx made)."""
    script = Path(os.path.abspath(sysconfig.get_path("scripts"))) / SCRIPT
    return script if script.is_file() else None


def launcher(which: Which = shutil.which) -> list[str]:
    """The command and leading arguments that run this installation's ``rifflux``."""
    script = installed_script()
    if script is None:
        return [os.path.abspath(sys.executable), "-m", "rifflux.cli"]
    found = which(SCRIPT)
    if found is not None and os.path.samefile(found, script):
        return [SCRIPT]
    return [str(script)]


def server_entry(db_path: Path, *, command: list[str] | None = None) -> dict[str, Any]:
    """``{command, args, env}`` that start this installation's stdio server on ``db_path``
    (``command``: the launcher, default :func:`launcher`)."""
    db = Path(os.path.abspath(db_path))
    base = str(base_dir_for(db))
    program, *prefix = command or launcher()
    return {
        "command": program,
        "args": [*prefix, "serve", "--db", str(db)],
        "env": {
            "RIFFLUX_DB_PATH": str(db),
            "RIFFLUX_BASE_DIR": base,
            "RIFFLUX_ALLOWED_ROOTS": base,
        },
    }


def host_config(host: str, db_path: Path, *, command: list[str] | None = None) -> dict[str, Any]:
    """The JSON snippet for ``host``: VS Code's ``servers``, else ``mcpServers`` (Claude
    Desktop, Cursor's ``.cursor/mcp.json``, and ``generic``, the form most hosts read)."""
    entry = server_entry(db_path, command=command)
    if host == "vscode":
        return {"servers": {SERVER_NAME: {"type": "stdio", **entry}}}
    if host in ("claude", "cursor", "generic"):
        return {"mcpServers": {SERVER_NAME: entry}}
    raise RiffluxError(f"--host must be one of {', '.join(HOSTS)} (got {host!r})")


def claude_code_command(db_path: Path, *, command: list[str] | None = None) -> list[str]:
    """``claude mcp add`` arguments that register the server for every project (user
    scope). The name comes before ``--env``: that option takes several values and would
    swallow a name that followed it."""
    entry = server_entry(db_path, command=command)
    env = [arg for key, value in entry["env"].items() for arg in ("--env", f"{key}={value}")]
    return [
        "claude",
        "mcp",
        "add",
        SERVER_NAME,
        "--transport",
        "stdio",
        "--scope",
        "user",
        *env,
        "--",
        entry["command"],
        *entry["args"],
    ]


def render(host: str, db_path: Path, *, command: list[str] | None = None) -> str:
    """What ``rifflux mcp-config --host HOST`` prints: a shell line for ``claude-code``,
    indented JSON for the others."""
    if host == "claude-code":
        return shlex.join(claude_code_command(db_path, command=command))
    return json.dumps(host_config(host, db_path, command=command), indent=2, ensure_ascii=False)
