"""``python -m rifflux.mcp [--transport stdio|http] [--host H] [--port N]``: the same as
``rifflux serve``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rifflux.cli import main as rifflux_main


def main(argv: Sequence[str] | None = None) -> int:
    return rifflux_main(["serve", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
