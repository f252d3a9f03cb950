"""``python -m rifflux.mcp [--transport stdio|http] [--host H] [--port N]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rifflux.errors import RiffluxError
from rifflux.mcp.cli import add_serve_arguments, cmd_serve

EXIT_ERROR = 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rifflux.mcp", description=__doc__)
    add_serve_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cmd_serve(args)
    except RiffluxError as exc:
        print(f"rifflux: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
