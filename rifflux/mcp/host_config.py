"""``rifflux mcp-config``: the JSON an MCP host needs to start this installation's server.

Invariants:

* ``command`` is this installation's interpreter (``sys.executable`` made absolute, not
  resolved: a virtualenv's ``bin/python`` is a symlink whose target has no Rifflux), run
  as ``python -m rifflux.cli serve --db DB``, so the snippet works whatever the host's
  ``PATH`` and working directory are, and the workers the server starts run from the
  same installation.
* Every path in it is absolute: the index database, and the directory its stored paths
  are relative to (``RIFFLUX_BASE_DIR``), which is also the one directory the server may
  index and serve (``RIFFLUX_ALLOWED_ROOTS``, always set, docs/security.md): hosts start
  servers in ``/`` or the home directory, where the server has no default root. That
  directory is the index's recorded base directory when the index exists, else the
  directory holding the ``.rifflux`` folder of the database (else the database's own
  directory). When it is ``/``, a home directory or a parent of one, it is still printed
  (the index's paths need it), with a warning to narrow it (:func:`roots_warning`).
* Nothing is written: the snippet is printed for the user to paste.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from rifflux.errors import RiffluxError
from rifflux.index.allowed import known_homes, unsafe_default_root
from rifflux.store.connection import open_index_readonly
from rifflux.store.reader import get_metadata

HOSTS = ("vscode", "claude", "generic")
SERVER_NAME = "rifflux"


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


def server_entry(db_path: Path) -> dict[str, Any]:
    """``{command, args, env}`` that start this installation's stdio server on ``db_path``."""
    db = Path(os.path.abspath(db_path))
    base = str(base_dir_for(db))
    return {
        "command": os.path.abspath(sys.executable),
        "args": ["-m", "rifflux.cli", "serve", "--db", str(db)],
        "env": {
            "RIFFLUX_DB_PATH": str(db),
            "RIFFLUX_BASE_DIR": base,
            "RIFFLUX_ALLOWED_ROOTS": base,
        },
    }


def host_config(host: str, db_path: Path) -> dict[str, Any]:
    """The snippet for ``host``: VS Code's ``servers``, Claude's ``mcpServers``, or one
    server entry with its name and transport (``generic``)."""
    entry = server_entry(db_path)
    if host == "vscode":
        return {"servers": {SERVER_NAME: {"type": "stdio", **entry}}}
    if host == "claude":
        return {"mcpServers": {SERVER_NAME: entry}}
    if host == "generic":
        return {"name": SERVER_NAME, "transport": "stdio", **entry}
    raise RiffluxError(f"--host must be one of {', '.join(HOSTS)} (got {host!r})")
