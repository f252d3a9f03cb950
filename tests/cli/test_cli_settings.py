"""``rifflux settings`` lists the settings table with current values; the CLI reads the
environment once and refuses a ``RIFLUX_*`` spelling in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import rifflux
from test_cli_security import assert_one_line_error

from rifflux import cli, config
from rifflux.config import SETTINGS, Settings
from rifflux.index.indexer import Indexer


def test_settings_lists_every_user_setting_with_value_default_and_help(tmp_path: Path) -> None:
    result = rifflux(tmp_path, "settings", "--json", RIFFLUX_WORKERS="3", RIFFLUX_FUSION="MinMax")
    assert result.returncode == 0, result.stderr
    listed = {row["name"]: row for row in json.loads(result.stdout)}
    assert list(listed) == [row.variable for row in SETTINGS if not row.internal]
    assert listed["RIFFLUX_WORKERS"] == {
        "name": "RIFFLUX_WORKERS",
        "value": "3",
        "default": "the CPU count (affinity)",
        "type": "int ≥ 1",
        "help": "Worker processes `rifflux worker` and local pools start.",
        "internal": False,
    }
    assert (listed["RIFFLUX_FUSION"]["value"], listed["RIFFLUX_FUSION"]["default"]) == (
        "minmax",
        "`rrf`",
    )
    assert listed["RIFFLUX_EMBEDDING_BACKEND"]["value"] == "hash"

    text = rifflux(tmp_path, "settings", "--all", RIFFLUX_HNSW_EF="80")
    assert text.returncode == 0, text.stderr
    assert "RIFFLUX_WORKERS=" in text.stdout and "RIFFLUX_HNSW_EF=80  (default: 200)" in text.stdout
    assert "`" not in text.stdout


@pytest.mark.parametrize("command", [("status",), ("serve",), ("settings",)])
def test_a_one_f_spelling_stops_the_cli_and_the_server_in_one_line(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    result = rifflux(tmp_path, *command, RIFLUX_DB_PATH=str(tmp_path / "index.db"))
    assert_one_line_error(
        result, "RIFLUX_DB_PATH is not read (the prefix has two Fs): set RIFFLUX_DB_PATH instead"
    )


@pytest.mark.parametrize("command", [("status", "--db"), ("mcp-config", "--db"), ("settings",)])
def test_a_command_reads_the_environment_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: tuple[str, ...],
) -> None:
    db = tmp_path / "index.db"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nSome text.\n")
    Indexer(Settings(db_path=db, base_dir=tmp_path, embedding_backend="hash")).run(
        [tmp_path / "docs"]
    )
    reads: list[object] = []
    read = Settings.from_env.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Settings], env: object = None) -> Settings:
        reads.append(env)
        return read(cls, env)  # type: ignore[no-any-return]

    monkeypatch.setattr(config.Settings, "from_env", classmethod(counted))
    monkeypatch.setenv("RIFFLUX_EMBEDDING_BACKEND", "hash")
    argv = [*command, str(db)] if "--db" in command else list(command)
    assert cli.main(argv) == 0, capsys.readouterr()
    assert len(reads) == 1


def test_a_retired_tuning_variable_is_ignored_with_a_warning(tmp_path: Path) -> None:
    result = rifflux(tmp_path, "settings", RIFFLUX_EMBED_NICE="3")
    assert result.returncode == 0
    assert result.stderr == (
        "rifflux: warning: RIFFLUX_EMBED_NICE is no longer read (a fixed tuning value)\n"
    )
