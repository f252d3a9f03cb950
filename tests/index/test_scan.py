import os
from pathlib import Path

import pytest

from rifflux.config import DEFAULT_EXCLUDE_GLOBS, DEFAULT_INCLUDE_GLOBS
from rifflux.errors import RootNotFoundError
from rifflux.index.scan import is_under, matches_any, scan_roots, to_rel_path
from rifflux.store.own_files import IndexFiles


def scan(root: Path, base: Path, **kwargs):
    return scan_roots(
        [root],
        base_dir=base,
        include_globs=kwargs.get("include", DEFAULT_INCLUDE_GLOBS),
        exclude_globs=kwargs.get("exclude", DEFAULT_EXCLUDE_GLOBS),
        index_files=kwargs.get("index_files"),
    )


def write(path: Path, text: str = "# Title\n\nbody\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_default_globs_take_markdown_and_text_and_skip_tool_dirs(tmp_path: Path) -> None:
    write(tmp_path / "docs/a.md")
    write(tmp_path / "docs/sub/b.txt")
    write(tmp_path / "docs/c.py")
    write(tmp_path / "docs/.git/x.md")
    write(tmp_path / "docs/node_modules/pkg/readme.md")
    write(tmp_path / "docs/deep/__pycache__/n.md")
    result = scan(tmp_path / "docs", tmp_path)
    assert [f.rel_path for f in result.files] == ["docs/a.md", "docs/sub/b.txt"]
    assert result.root_prefixes == ["docs"]


def test_paths_are_relative_to_base_and_posix(tmp_path: Path) -> None:
    assert to_rel_path(tmp_path / "a" / "b.md", tmp_path) == "a/b.md"
    assert to_rel_path(tmp_path, tmp_path) == "."
    outside = to_rel_path(Path("/elsewhere/x.md"), tmp_path)
    assert outside == "/elsewhere/x.md"


def test_file_root_gives_the_same_path_as_its_directory_scan(tmp_path: Path) -> None:
    f = write(tmp_path / "docs/a.md")
    by_file = scan(f, tmp_path).files[0]
    by_dir = scan(tmp_path / "docs", tmp_path).files[0]
    assert by_file.rel_path == by_dir.rel_path == "docs/a.md"


def test_custom_globs(tmp_path: Path) -> None:
    write(tmp_path / "keep/a.md")
    write(tmp_path / "drop/b.md")
    write(tmp_path / "keep/notes.rst")
    result = scan(tmp_path, tmp_path, include=("*.md", "*.rst"), exclude=("drop",))
    assert [f.rel_path for f in result.files] == ["keep/a.md", "keep/notes.rst"]
    assert matches_any("a/b/c.md", ["a/*/*.md"]) and matches_any("x/y.md", ["**/y.md"])


def test_only_the_index_own_files_are_excluded_wherever_it_lives(tmp_path: Path) -> None:
    write(tmp_path / "a.md")
    write(tmp_path / "index.md.vectors/manifest.md")
    write(tmp_path / "index.md.slots/slot-0")  # the workers' chunk-step slots
    for name in ("workers.log", "workers.log.1", "workers.log.3"):  # The log and its backups.
        write(tmp_path / name)
    for name in ("index.md", "index.md-wal", "queue.db"):
        write(tmp_path / name)
    own = IndexFiles.for_db(tmp_path / "index.md")
    result = scan(tmp_path, tmp_path, include=("*",), exclude=(), index_files=own)
    assert [f.rel_path for f in result.files] == ["a.md"]


def test_symlink_loop_is_not_followed(tmp_path: Path) -> None:
    write(tmp_path / "docs/a.md")
    os.symlink(tmp_path / "docs", tmp_path / "docs/loop")
    result = scan(tmp_path / "docs", tmp_path)
    assert [f.rel_path for f in result.files] == ["docs/a.md"]


def test_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RootNotFoundError, match="does-not-exist"):
        scan(tmp_path / "does-not-exist", tmp_path)


def test_is_under() -> None:
    assert is_under("docs/a.md", "docs") and is_under("docs", "docs")
    assert not is_under("docs2/a.md", "docs")
    assert is_under("a.md", ".") and not is_under("/abs/a.md", ".")
