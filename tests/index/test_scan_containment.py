"""Containment in the scan: single-file roots obey the globs, symlinks stay inside bounds."""

from __future__ import annotations

import os
from pathlib import Path

from rifflux.config import DEFAULT_EXCLUDE_GLOBS, DEFAULT_INCLUDE_GLOBS
from rifflux.index.scan import GLOB_MISMATCH, SYMLINK_OUTSIDE, ScanResult, scan_roots


def scan(root: Path, *roots: Path, link_roots: tuple[Path, ...] = ()) -> ScanResult:
    return scan_roots(
        list(roots) or [root],
        base_dir=root,
        include_globs=DEFAULT_INCLUDE_GLOBS,
        exclude_globs=DEFAULT_EXCLUDE_GLOBS,
        link_roots=link_roots,
    )


def make_tree(tmp_path: Path) -> tuple[Path, Path]:
    """``work/notes`` to index, and ``secret/`` beside it that must not leak."""
    work, secret = tmp_path / "work", tmp_path / "secret"
    (work / "notes").mkdir(parents=True)
    secret.mkdir()
    (work / "notes" / "plain.md").write_text("# Plain\n\nordinary notes\n")
    (secret / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (secret / "diary.md").write_text("# Diary\n\nprivate words\n")
    return work, secret


def test_a_single_file_root_that_the_globs_exclude_is_skipped_with_a_reason(
    tmp_path: Path,
) -> None:
    work, secret = make_tree(tmp_path)
    result = scan(work, secret / "id_rsa")
    assert result.files == []
    assert [(s.rel_path, s.reason) for s in result.skipped] == [
        ((secret / "id_rsa").as_posix(), GLOB_MISMATCH)
    ]


def test_a_single_file_root_that_the_globs_include_is_scanned(tmp_path: Path) -> None:
    work, secret = make_tree(tmp_path)
    assert [f.rel_path for f in scan(work, work / "notes" / "plain.md").files] == ["notes/plain.md"]
    assert scan(work, secret / "diary.md").files[0].rel_path == (secret / "diary.md").as_posix()


def test_symlinks_out_of_the_roots_are_skipped_and_listed(tmp_path: Path) -> None:
    work, secret = make_tree(tmp_path)
    os.symlink(secret / "diary.md", work / "notes" / "leak.md")
    os.symlink(secret, work / "notes" / "secret-dir")
    os.symlink("/proc/version", work / "notes" / "proc.md")
    result = scan(work)
    assert [f.rel_path for f in result.files] == ["notes/plain.md"]
    assert sorted((s.rel_path, s.reason) for s in result.skipped) == [
        ("notes/leak.md", SYMLINK_OUTSIDE),
        ("notes/proc.md", SYMLINK_OUTSIDE),
        ("notes/secret-dir", SYMLINK_OUTSIDE),
    ]


def test_symlinks_inside_the_roots_or_the_link_roots_are_followed(tmp_path: Path) -> None:
    work, secret = make_tree(tmp_path)
    (work / "shared").mkdir()
    (work / "shared" / "common.md").write_text("# Common\n\nshared words\n")
    os.symlink(work / "shared", work / "notes" / "shared-link")
    os.symlink(secret / "diary.md", work / "notes" / "diary.md")
    inside = scan(work, work / "notes")
    assert [f.rel_path for f in inside.files] == ["notes/plain.md"]
    allowed = scan(work, work / "notes", link_roots=(work, secret))
    assert [f.rel_path for f in allowed.files] == [
        "notes/diary.md",
        "notes/plain.md",
        "notes/shared-link/common.md",
    ]
    assert allowed.skipped == []


def test_a_link_to_a_sibling_with_a_common_prefix_is_outside(tmp_path: Path) -> None:
    work, _ = make_tree(tmp_path)
    sibling = tmp_path / "work-old"
    sibling.mkdir()
    (sibling / "old.md").write_text("# Old\n")
    os.symlink(sibling / "old.md", work / "notes" / "old.md")
    result = scan(work)
    assert [s.rel_path for s in result.skipped] == ["notes/old.md"]


def test_a_planned_file_swapped_for_a_symlink_out_is_not_read(tmp_path: Path) -> None:
    from rifflux.index.pipeline import read_works

    work, secret = make_tree(tmp_path)
    planned = work / "notes" / "plain.md"
    bounds = [work.resolve()]
    works, vanished = read_works(work, ["notes/plain.md"], 10_000, bounds)
    assert [w.rel_path for w in works] == ["notes/plain.md"] and vanished == []
    planned.unlink()
    os.symlink(secret / "diary.md", planned)
    works, vanished = read_works(work, ["notes/plain.md"], 10_000, bounds)
    assert works == [] and vanished == ["notes/plain.md"]
