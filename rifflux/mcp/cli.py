"""``rifflux serve`` (and ``python -m rifflux.mcp``): parse arguments, run the server."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rifflux.config import MAX_PORT, command_settings
from rifflux.errors import ConfigError
from rifflux.logs import configure_logging

TRANSPORTS = ("stdio", "http")


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="stdio",
        help="stdio for an MCP host that starts the server; http for streamable HTTP",
    )
    parser.add_argument(
        "--host", help="HTTP address to bind (default: $RIFFLUX_HTTP_HOST or 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, help="HTTP port (default: $RIFFLUX_HTTP_PORT or 8765)")
    parser.add_argument(
        "--http-workers",
        type=int,
        metavar="N",
        help="HTTP front processes accepting on the port, stateless when N > 1 "
        "(default: $RIFFLUX_HTTP_WORKERS or the CPU count)",
    )
    parser.add_argument("--db", type=Path, help="index database (default: $RIFFLUX_DB_PATH)")
    parser.add_argument(
        "--reindex-on-start",
        nargs="+",
        type=Path,
        default=[],
        metavar="PATH",
        help="submit a background reindex of these paths at startup (does not wait)",
    )
    parser.add_argument(
        "--watch",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="watch PATH and keep it indexed (repeatable; or RIFFLUX_FILE_WATCHER=1)",
    )


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``serve`` on the ``rifflux`` command's subparsers."""
    serve = subparsers.add_parser("serve", help="run the MCP server (stdio or HTTP)")
    add_serve_arguments(serve)
    serve.set_defaults(handler=cmd_serve)
    return serve


def add_mcp_config_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``mcp-config`` on the ``rifflux`` command's subparsers."""
    from rifflux.mcp.host_config import HOSTS

    config = subparsers.add_parser(
        "mcp-config",
        help="print what an MCP host needs to start this installation's server",
    )
    config.add_argument(
        "--host",
        choices=HOSTS,
        default="generic",
        help="vscode: .vscode/mcp.json; claude: claude_desktop_config.json; cursor: "
        ".cursor/mcp.json; claude-code: the `claude mcp add` command to run; generic "
        "(default): the mcpServers JSON most hosts read",
    )
    config.add_argument(
        "--db", type=Path, help="index database (default: $RIFFLUX_DB_PATH or .rifflux/index.db)"
    )
    config.set_defaults(handler=cmd_mcp_config)
    return config


def cmd_mcp_config(args: argparse.Namespace) -> int:
    from rifflux.mcp.host_config import render, roots_warning

    settings = command_settings(args).with_overrides(db_path=args.db)
    print(render(args.host, settings.db_path))
    warning = roots_warning(settings.db_path)
    if warning is not None:
        print(f"rifflux: warning: {warning}", file=sys.stderr)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from rifflux.mcp.server import run_server

    if args.port is not None and not 1 <= args.port <= MAX_PORT:
        raise ConfigError(f"--port must be from 1 to {MAX_PORT} (got {args.port})")
    if args.http_workers is not None and args.http_workers < 1:
        raise ConfigError(f"--http-workers must be 1 or more (got {args.http_workers})")
    settings = command_settings(args).with_overrides(
        db_path=args.db, http_workers=args.http_workers
    )
    configure_logging(settings.log_level, style="json")
    run_server(
        settings,
        transport=args.transport,
        host=args.host,
        port=args.port,
        reindex_on_start=args.reindex_on_start,
        watch=args.watch,
    )
    return 0
