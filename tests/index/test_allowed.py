"""The default allowed root (rifflux.index.allowed): none where the cwd shares too much."""

from __future__ import annotations

from pathlib import Path

import pytest

from rifflux.config import Settings
from rifflux.index.allowed import configured_roots, real, unsafe_default_root

HOMES = [Path("/home/me"), Path("/root")]
PARENTS = [Path("/home"), Path("/Users")]


@pytest.mark.parametrize(
    ("cwd", "why"),
    [
        ("/", "the filesystem root"),
        ("/home/me", "a home directory"),
        ("/root", "a home directory"),
        ("/home/someone-else", "a home directory"),
        ("/Users/alice", "a home directory"),
        ("/home", "a parent of home directories"),
        ("/Users", "a parent of home directories"),
        ("/home/me/notes", None),
        ("/home/me/src/repo", None),
        ("/srv/notes", None),
        ("/tmp", None),
    ],
)
def test_no_default_root_in_the_filesystem_root_a_home_or_a_parent(
    cwd: str, why: str | None
) -> None:
    assert unsafe_default_root(Path(cwd), HOMES, PARENTS) == why


def test_a_parent_of_this_users_home_has_no_default_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "users" / "me"
    (home / "notes").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    settings = Settings()
    assert configured_roots(settings, home) == []
    assert configured_roots(settings, tmp_path / "users") == []
    assert configured_roots(settings, tmp_path) == []
    assert configured_roots(settings, home / "notes") == [real(home / "notes")]
    explicit = Settings(allowed_roots=(str(home),))
    assert configured_roots(explicit, home) == [real(home)]
