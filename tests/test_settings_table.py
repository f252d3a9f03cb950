"""The settings table in rifflux/config.py is the one list of environment variables: the
README's configuration table is made from it, and every variable the code or the docs
name is one of its rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rifflux_testing import REPO_ROOT

from rifflux.config import SETTINGS, Settings, markdown_table
from rifflux.errors import ConfigError

BEGIN = "<!-- settings:"
END = "<!-- end of settings -->"
# Names that are not settings: the Makefile's corpus, the test actors' fault switches.
NOT_SETTINGS = re.compile(r"RIFFLUX_(ROOT|TEST_\w*)$")


def test_the_readme_table_is_the_settings_table() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(BEGIN, 1)[1].split("\n", 1)[1].split(END, 1)[0]
    assert block == markdown_table(), (
        "README.md's configuration table differs from rifflux.config.SETTINGS: paste "
        "`python -c 'from rifflux.config import markdown_table; print(markdown_table())'`"
    )


def test_every_user_setting_is_documented_with_its_default_and_help() -> None:
    table = markdown_table()
    for row in SETTINGS:
        if row.internal:
            assert f"`{row.variable}`" in table.split("\n\n", 1)[1], row.variable
        else:
            assert f"| `{row.variable}` | {row.type} | {row.default_text} | {row.help} |" in table
            assert "\n" not in row.help, row.variable


def test_every_variable_the_code_and_docs_name_is_a_setting() -> None:
    known = {row.variable for row in SETTINGS}
    texts = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    texts += sorted((REPO_ROOT / "rifflux").rglob("*.py"))
    texts += sorted((REPO_ROOT / "workers").rglob("*.py"))
    named: dict[str, Path] = {}
    for path in texts:
        if path.name == "benchmarks-history.md":  # measurements of settings since retired
            continue
        for name in re.findall(r"\bRIFFLUX_[A-Z][A-Z0-9_]*[A-Z0-9]", path.read_text("utf-8")):
            named.setdefault(name, path)
    unknown = {
        name: str(path.relative_to(REPO_ROOT))
        for name, path in named.items()
        if not NOT_SETTINGS.match(name) and not any(k.startswith(name) for k in known)
    }
    assert not unknown, "name these in rifflux.config.SETTINGS, or stop naming them"


def test_names_and_fields_are_unique_and_every_row_sets_a_field() -> None:
    names = [row.name for row in SETTINGS]
    attrs = [row.attr for row in SETTINGS]
    assert len(set(names)) == len(names) and len(set(attrs)) == len(attrs)
    assert set(attrs) <= set(Settings.__dataclass_fields__)
    assert sum(not row.internal for row in SETTINGS) <= 40


@pytest.mark.parametrize("name", ["DB_PATH", "EMBEDDING_BACKEND", "NOT_A_SETTING"])
def test_a_one_f_spelling_is_refused_naming_the_right_one(name: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({f"RIFLUX_{name}": "hash", f"RIFFLUX_{name}": "hash"})
    assert str(raised.value) == (
        f"RIFLUX_{name} is not read (the prefix has two Fs): set RIFFLUX_{name} instead"
    )


def test_tuning_is_not_read_from_the_environment() -> None:
    env = {"RIFFLUX_EMBED_TOKEN_BUDGET": "7", "RIFFLUX_CANDIDATE_MULTIPLIER": "9"}
    assert Settings.from_env(env) == Settings.from_env({})
