"""``rifflux serve`` argument parsing and its handoff to the server."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from rifflux.config import Settings
from rifflux.mcp import cli, server
from rifflux.mcp.cli import add_serve_parser, cmd_serve


def serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rifflux")
    add_serve_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def test_serve_defaults_to_stdio_and_settings_for_http_address() -> None:
    args = serve_parser().parse_args(["serve"])
    assert args.handler is cmd_serve
    assert (args.transport, args.host, args.port, args.db) == ("stdio", None, None, None)
    assert args.reindex_on_start == []


def test_serve_takes_transport_address_db_and_startup_paths() -> None:
    args = serve_parser().parse_args(
        [
            "serve",
            "--transport",
            "http",
            "--host",
            "127.0.0.1",
            "--port",
            "9000",
            "--db",
            "idx.db",
            "--reindex-on-start",
            "docs",
            "notes",
        ]
    )
    assert (args.transport, args.host, args.port) == ("http", "127.0.0.1", 9000)
    assert args.db == Path("idx.db")
    assert args.reindex_on_start == [Path("docs"), Path("notes")]


def test_unknown_transport_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        serve_parser().parse_args(["serve", "--transport", "sse"])
    assert caught.value.code == 2
    assert "invalid choice: 'sse'" in capsys.readouterr().err


def test_serve_hands_settings_and_options_to_the_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[dict[str, Any]] = []

    def fake_run_server(settings: Settings, **options: Any) -> None:
        calls.append({"settings": settings, **options})

    monkeypatch.setattr(server, "run_server", fake_run_server)
    monkeypatch.setattr(cli, "configure_logging", lambda *args, **kwargs: None)
    monkeypatch.setenv("RIFFLUX_DB_PATH", str(tmp_path / "env.db"))
    args = serve_parser().parse_args(
        ["serve", "--transport", "http", "--port", "9001", "--db", str(tmp_path / "cli.db")]
    )
    assert cmd_serve(args) == 0
    [call] = calls
    assert call["settings"].db_path == tmp_path / "cli.db"
    assert (call["transport"], call["host"], call["port"]) == ("http", None, 9001)
    assert call["reindex_on_start"] == []
