"""Scoped scans: the files and skips a walk of the whole roots gives at or under the
scoped paths, exactly, and None as soon as a symlink is involved."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from rifflux.config import DEFAULT_EXCLUDE_GLOBS
from rifflux.index.scan import (
    ScanStats,
    SkippedFile,
    is_under,
    iter_scan,
    scan_scope,
    scope_in_roots,
    to_rel_path,
)
from rifflux.store.own_files import IndexFiles

INCLUDE = ("*.md", "*.txt", "notes/**/*.rst")
EXCLUDE = (*DEFAULT_EXCLUDE_GLOBS, "drafts", "*.tmp.md", "**/private/*.md")
# Names a generated tree draws from: included, excluded by name, by folder, secret.
FILE_NAMES = ["a.md", "b.txt", "c.rst", "x.tmp.md", "id_rsa", "z.md", "a.md.bak", ".env"]
DIR_NAMES = ["docs", "notes", "drafts", "node_modules", "private", ".ssh", "a", "a.md.d"]


def whole(roots: list[Path], base: Path, own: IndexFiles | None = None):
    skipped: list[SkippedFile] = []
    stats = ScanStats()
    files = list(
        iter_scan(
            roots,
            base_dir=base,
            include_globs=INCLUDE,
            exclude_globs=EXCLUDE,
            skipped=skipped,
            index_files=own,
            stats=stats,
        )
    )
    return files, skipped, stats


def scoped(roots: list[Path], scope: tuple[str, ...], base: Path, own: IndexFiles | None = None):
    skipped: list[SkippedFile] = []
    files = scan_scope(
        roots,
        scope,
        base_dir=base,
        include_globs=INCLUDE,
        exclude_globs=EXCLUDE,
        skipped=skipped,
        index_files=own,
    )
    return None if files is None else (files, skipped)


def restricted(items: list, scope: tuple[str, ...], base: Path, *, above: bool = False) -> list:
    """The items at or under a scope path (``above``: or on the way to one: a skipped
    folder on a scope path's way is where the walk stops)."""
    prefixes = [to_rel_path(p, base) for p in scope]
    return [
        i
        for i in items
        if any(is_under(i.rel_path, p) or (above and is_under(p, i.rel_path)) for p in prefixes)
    ]


def random_tree(root: Path, rng: random.Random, depth: int = 0) -> list[Path]:
    """A random tree of the names above; returns every path made (files and folders)."""
    made: list[Path] = []
    root.mkdir(parents=True, exist_ok=True)
    for name in rng.sample(FILE_NAMES, rng.randint(1, 4)):
        (root / name).write_text(f"# {name}\n\ntext of {root.name}/{name}\n")
        made.append(root / name)
    if depth < 3:
        for name in rng.sample(DIR_NAMES, rng.randint(0, 3)):
            made.append(root / name)
            made.extend(random_tree(root / name, rng, depth + 1))
    return made


@pytest.mark.parametrize("seed", range(40))
def test_a_scoped_scan_equals_the_whole_scan_restricted_to_its_paths(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    root = tmp_path / "repo"
    made = random_tree(root, rng)
    # Paths that no longer exist are part of a watcher's scope too.
    gone = [root / "docs" / "gone.md", root / "drafts" / "x" / "gone.md", root / "gone"]
    picks = rng.sample(made, min(len(made), rng.randint(1, 6))) + rng.sample(gone, 1)
    scope = scope_in_roots([root], picks)
    assert scope is not None

    files, skipped, stats = whole([root], tmp_path)
    assert stats.links == 0
    found = scoped([root], scope, tmp_path)
    assert found is not None
    scoped_files, scoped_skips = found
    assert scoped_files == restricted(files, scope, tmp_path)
    expected_skips = restricted(skipped, scope, tmp_path, above=True)
    assert sorted(scoped_skips, key=repr) == sorted(expected_skips, key=repr)


def test_overlapping_roots_keep_the_first_roots_judgement(tmp_path: Path) -> None:
    # "drafts" is excluded under the outer root but is the inner root itself, so the
    # inner root's walk lists its files: the whole scan's merge keeps them once.
    outer = tmp_path / "repo"
    inner = outer / "drafts"
    (inner / "sub").mkdir(parents=True)
    (inner / "sub" / "a.md").write_text("# a\n")
    (outer / "b.md").write_text("# b\n")
    roots = [outer, inner]
    scope = scope_in_roots(roots, [inner / "sub" / "a.md", outer / "b.md"])
    assert scope is not None
    files, _, _ = whole(roots, tmp_path)
    found = scoped(roots, scope, tmp_path)
    assert found is not None
    assert [f.rel_path for f in found[0]] == ["repo/b.md", "repo/drafts/sub/a.md"]
    assert found[0] == restricted(files, scope, tmp_path)


def test_the_index_files_inside_a_root_are_never_listed(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / ".rifflux").mkdir(parents=True)
    db = root / ".rifflux" / "index.md"
    db.write_text("not a note")
    (root / "a.md").write_text("# a\n")
    own = IndexFiles(frozenset({os.path.realpath(db)}), ())
    scope = scope_in_roots([root], [db, root / "a.md"])
    assert scope is not None
    found = scoped([root], scope, tmp_path, own)
    assert found is not None
    assert [f.rel_path for f in found[0]] == ["repo/a.md"]


@pytest.mark.parametrize("link_at", ["file", "folder", "ancestor", "inside_folder"])
def test_a_scoped_scan_that_meets_a_symlink_gives_up(tmp_path: Path, link_at: str) -> None:
    root = tmp_path / "repo"
    (root / "docs" / "deep").mkdir(parents=True)
    (root / "docs" / "deep" / "a.md").write_text("# a\n")
    (root / "b.md").write_text("# b\n")
    if link_at == "file":
        (root / "link.md").symlink_to(root / "b.md")
        picks = [root / "link.md"]
    elif link_at == "folder":
        (root / "alias").symlink_to(root / "docs")
        picks = [root / "alias"]
    elif link_at == "ancestor":
        (root / "alias").symlink_to(root / "docs")
        picks = [root / "alias" / "deep" / "a.md"]
    else:
        (root / "docs" / "deep" / "c.md").symlink_to(root / "b.md")
        picks = [root / "docs"]
    scope = scope_in_roots([root], picks)
    assert scope is not None
    assert scoped([root], scope, tmp_path) is None
    assert whole([root], tmp_path)[2].links == 1


def test_the_scope_of_changed_paths(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    real_root = tmp_path / "real"
    real_root.mkdir()
    linked = tmp_path / "linked"
    linked.symlink_to(real_root)
    a, b = str(root / "a"), str(root / "a" / "x.md")
    # A folder covers what is under it; paths are sorted; duplicates go.
    assert scope_in_roots([root], [b, a, a]) == (a,)
    assert scope_in_roots([root], [str(root / "b.md"), str(root / "a.md")]) == (
        str(root / "a.md"),
        str(root / "b.md"),
    )
    # The root itself, a path above or outside it, or no path: the whole roots.
    assert scope_in_roots([root], [root]) is None
    assert scope_in_roots([root], [tmp_path]) is None
    assert scope_in_roots([root], [tmp_path / "other.md"]) is None
    assert scope_in_roots([root], []) is None
    # Nested roots: a path that is, or holds, another root is judged by that root's own
    # walk too, so the job scans whole.
    inner = root / "a" / "inner"
    assert scope_in_roots([root, inner], [inner]) is None
    assert scope_in_roots([root, inner], [root / "a"]) is None
    assert scope_in_roots([root, inner], [inner / "x.md"]) == (str(inner / "x.md"),)
    # Re-based onto the root's realpath, as the job stores its roots.
    assert scope_in_roots([linked], [linked / "n.md"]) == (str(real_root / "n.md"),)


def test_a_folder_the_walk_cannot_list_lists_nothing_when_scoped(tmp_path: Path) -> None:
    """The scoped walk looks names up directly, but a folder the whole walk cannot list
    (enter, not read) gives nothing in both."""
    root = tmp_path / "repo"
    (root / "big").mkdir(parents=True)
    (root / "big" / "a.md").write_text("# a\n")
    (root / "big").chmod(0o300)
    try:
        if os.access(root / "big", os.R_OK):
            pytest.skip("running as a user that reads any folder")
        assert whole([root], tmp_path)[0] == []
        assert scoped([root], (str(root / "big" / "a.md"),), tmp_path) == ([], [])
    finally:
        (root / "big").chmod(0o700)
