"""``python -m rifflux.mcp [--transport stdio|http] [--host H] [--port N]``: the same as
``rifflux serve``.

It replaces itself with ``rifflux serve`` (exec, same process id and file descriptors, so
a stdio client notices nothing) rather than importing the CLI, which sits a layer above
this package: the one place that turns every failure into one line serves both names.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.execv(sys.executable, [sys.executable, "-m", "rifflux.cli", "serve", *sys.argv[1:]])


if __name__ == "__main__":
    main()
