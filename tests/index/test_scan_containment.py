"""Containment in the scan: single-file roots obey the globs, symlinks stay inside the
job's own roots and are judged by their targets, the deny list skips secrets."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rifflux.config import DEFAULT_EXCLUDE_GLOBS, DEFAULT_INCLUDE_GLOBS
from rifflux.index.denied import secret_reason
from rifflux.index.scan import (
    GLOB_MISMATCH,
    SYMLINK_OUTSIDE,
    TARGET_GLOB_MISMATCH,
    ScanResult,
    scan_roots,
)


def scan(
    root: Path,
    *roots: Path,
    include: Sequence[str] = DEFAULT_INCLUDE_GLOBS,
    allow_secret_paths: bool = False,
) -> ScanResult:
    return scan_roots(
        list(roots) or [root],
        base_dir=root,
        include_globs=include,
        exclude_globs=DEFAULT_EXCLUDE_GLOBS,
        allow_secret_paths=allow_secret_paths,
    )


def skips(result: ScanResult) -> list[tuple[str, str]]:
    return sorted((s.rel_path, s.reason) for s in result.skipped)


def make_tree(tmp_path: Path) -> tuple[Path, Path]:
    """``work/notes`` to index, and ``secret/`` beside it that must not leak."""
    work, secret = tmp_path / "work", tmp_path / "secret"
    (work / "notes").mkdir(parents=True)
    secret.mkdir()
    (work / "notes" / "plain.md").write_text("# Plain\n\nordinary notes\n")
    (secret / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (secret / "diary.md").write_text("# Diary\n\nprivate words\n")
    (secret / "photo.jpg").write_bytes(b"\xff\xd8")
    return work, secret


def test_a_single_file_root_that_the_globs_exclude_is_skipped_with_a_reason(
    tmp_path: Path,
) -> None:
    work, secret = make_tree(tmp_path)
    result = scan(work, secret / "photo.jpg")
    assert result.files == []
    assert skips(result) == [((secret / "photo.jpg").as_posix(), GLOB_MISMATCH)]


def test_a_secret_single_file_root_is_skipped_whatever_the_globs(tmp_path: Path) -> None:
    work, secret = make_tree(tmp_path)
    key = (secret / "id_rsa").as_posix()
    for include in (DEFAULT_INCLUDE_GLOBS, ("*",)):
        result = scan(work, secret / "id_rsa", include=include)
        assert result.files == []
        assert skips(result) == [(key, secret_reason("id_*"))]
    allowed = scan(work, secret / "id_rsa", include=("*",), allow_secret_paths=True)
    assert [f.rel_path for f in allowed.files] == [key]


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


def test_symlinks_are_followed_only_inside_the_jobs_own_roots(tmp_path: Path) -> None:
    """A link in repo A to repo B is not followed when indexing A alone, even where
    both would be allowed: the bound is the job's roots."""
    work, _ = make_tree(tmp_path)
    (work / "shared").mkdir()
    (work / "shared" / "common.md").write_text("# Common\n\nshared words\n")
    os.symlink(work / "shared", work / "notes" / "shared-link")
    os.symlink("../shared/common.md", work / "notes" / "common.md")
    notes_only = scan(work, work / "notes")
    assert [f.rel_path for f in notes_only.files] == ["notes/plain.md"]
    assert skips(notes_only) == [
        ("notes/common.md", SYMLINK_OUTSIDE),
        ("notes/shared-link", SYMLINK_OUTSIDE),
    ]
    both = scan(work, work / "notes", work / "shared")
    assert [f.rel_path for f in both.files] == [
        "notes/common.md",
        "notes/plain.md",
        "notes/shared-link/common.md",
        "shared/common.md",
    ]
    assert both.skipped == []


def test_a_symlink_is_judged_by_its_targets_real_path_and_name(tmp_path: Path) -> None:
    """Finding 2: ``docs/install.md -> ../.ssh/id_rsa`` matched the include globs by its
    own name; the target's name, path and deny rules decide too."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (home / ".ssh" / "notes.md").write_text("# Keys\n")
    (home / "node_modules" / "pkg").mkdir(parents=True)
    (home / "node_modules" / "pkg" / "readme.md").write_text("# Pkg\n")
    (home / "img").mkdir()
    (home / "img" / "photo.jpg").write_bytes(b"\xff\xd8")
    docs = home / "docs"
    docs.mkdir()
    (docs / "real.md").write_text("# Real\n")
    os.symlink("../.ssh/id_rsa", docs / "install.md")
    os.symlink("../.ssh", docs / "keys")
    os.symlink("../node_modules/pkg/readme.md", docs / "pkg.md")
    os.symlink("../node_modules", docs / "deps")
    os.symlink("../img/photo.jpg", docs / "photo.md")
    os.symlink("real.md", docs / "alias.md")
    result = scan(home)
    assert [f.rel_path for f in result.files] == ["docs/alias.md", "docs/real.md"]
    assert skips(result) == [
        (".ssh", secret_reason(".ssh")),
        ("docs/deps", TARGET_GLOB_MISMATCH),
        ("docs/install.md", secret_reason(".ssh")),
        ("docs/keys", secret_reason(".ssh")),
        ("docs/photo.md", TARGET_GLOB_MISMATCH),
        ("docs/pkg.md", TARGET_GLOB_MISMATCH),
    ]


def test_the_deny_list_skips_secret_directories_and_names_with_a_reason(tmp_path: Path) -> None:
    home = tmp_path / "home"
    files = {
        ".aws/credentials.md": ".aws",
        ".config/gcloud/creds.md": ".config/gcloud",
        ".password-store/bank.txt": ".password-store",
        "notes/.KUBE/config.md": ".kube",
        "notes/id_ed25519": "id_*",
        "notes/server.key": "*.key",
        "notes/cert.PEM": "*.pem",
        "notes/store.p12": "*.p12",
        "notes/.env.local": ".env*",
        "notes/.netrc": ".netrc",
        "notes/.pgpass": ".pgpass",
    }
    for rel in (*files, ".config/other/ok.md", "notes/keys.md", "notes/environment.md"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("secret words\n")
    result = scan(home, include=("*",))
    assert [f.rel_path for f in result.files] == [
        ".config/other/ok.md",
        "notes/environment.md",
        "notes/keys.md",
    ]
    skipped_dirs = {".aws", ".config/gcloud", ".password-store", "notes/.KUBE"}
    expected = {
        (rel.rsplit("/", 1)[0] if rel.rsplit("/", 1)[0] in skipped_dirs else rel, rule)
        for rel, rule in files.items()
    }
    assert set(skips(result)) == {(path, secret_reason(rule)) for path, rule in expected}
    everything = scan(home, include=("*",), allow_secret_paths=True)
    assert len(everything.files) == len(files) + 3 and everything.skipped == []


def test_a_root_inside_a_secret_directory_is_skipped(tmp_path: Path) -> None:
    aws = tmp_path / ".aws"
    (aws / "notes").mkdir(parents=True)
    (aws / "notes" / "a.md").write_text("# A\n")
    result = scan(tmp_path, aws / "notes")
    assert result.files == [] and skips(result) == [(".aws/notes", secret_reason(".aws"))]


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


def test_a_planned_file_swapped_for_a_symlink_to_a_secret_inside_the_bounds_is_not_read(
    tmp_path: Path,
) -> None:
    from rifflux.index.pipeline import read_works

    work, _ = make_tree(tmp_path)
    (work / ".ssh").mkdir()
    (work / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    planned = work / "notes" / "plain.md"
    planned.unlink()
    os.symlink(work / ".ssh" / "id_rsa", planned)
    bounds = [work.resolve()]
    assert read_works(work, ["notes/plain.md"], 10_000, bounds) == ([], ["notes/plain.md"])
    works, _ = read_works(work, ["notes/plain.md"], 10_000, bounds, allow_secret_paths=True)
    assert [w.rel_path for w in works] == ["notes/plain.md"]
