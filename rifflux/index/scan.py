"""Walk the roots to index: include/exclude globs, symlink-loop safety, stable paths.

Paths in the index are POSIX paths relative to the index's base directory, so the same
layout yields the same paths on every machine. A file outside the base directory is
stored by its absolute POSIX path.

Containment: a single-file root obeys the include and exclude globs like a file found
by the walk (``reindex ~/.ssh/id_rsa`` indexes nothing). A symlink, to a file or to a
directory, is followed only when its target's realpath lies inside one of the scanned
roots or of the ``link_roots`` the caller allows (the MCP server's allowed roots);
any other link is skipped and listed with its reason.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rifflux.errors import RootNotFoundError
from rifflux.index.allowed import is_within, real
from rifflux.store.own_files import IndexFiles

SYMLINK_OUTSIDE = "symlink to a target outside the allowed roots; not followed"
GLOB_MISMATCH = "does not match the include globs, or matches an exclude glob"


@dataclass(frozen=True, slots=True)
class ScannedFile:
    abs_path: Path
    rel_path: str
    mtime_ns: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class SkippedFile:
    rel_path: str
    reason: str


@dataclass(slots=True)
class ScanResult:
    files: list[ScannedFile] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    # rel paths of the scanned roots: pruning only ever touches files under these.
    root_prefixes: list[str] = field(default_factory=list)


def to_rel_path(path: Path | str, base_dir: Path) -> str:
    """The stored form of ``path``: relative to ``base_dir`` when under it, else absolute.

    Plain string operations (lexical, as ``PurePath.relative_to``): a scan calls this for
    every file, and pathlib objects cost several times more.
    """
    absolute = os.path.abspath(path)
    base = os.path.abspath(base_dir)
    if absolute == base:
        return "."
    prefix = base if base.endswith(os.sep) else base + os.sep
    if absolute.startswith(prefix):
        return absolute[len(prefix) :].replace(os.sep, "/")
    return absolute.replace(os.sep, "/")


def is_under(rel_path: str, prefix: str) -> bool:
    """True if ``rel_path`` is ``prefix`` itself or inside it (prefix "." is everything)."""
    if prefix in (".", ""):
        return not rel_path.startswith("/")
    return rel_path == prefix or rel_path.startswith(prefix.rstrip("/") + "/")


def matches_any(rel_path: str, globs: Iterable[str]) -> bool:
    """Glob match against the basename, the whole relative path, or any path component.

    ``node_modules`` excludes every ``node_modules`` directory; ``docs/*.md`` matches by
    path; ``*.md`` matches every markdown file at any depth.
    """
    return _glob_set(tuple(globs)).matches(rel_path)


class _GlobSet:
    """Globs compiled into three alternations (a scan tests every file against every
    glob: one regex per test instead of one ``fnmatchcase`` per glob)."""

    def __init__(self, globs: tuple[str, ...]) -> None:
        self.whole = _alternation(globs)
        self.component = _alternation(tuple(g for g in globs if "/" not in g))
        self.double_star = _alternation(tuple(g[3:] for g in globs if g.startswith("**/")))

    def matches(self, rel_path: str) -> bool:
        parts = [part for part in rel_path.split("/") if part and part != "."]
        name = parts[-1] if parts else ""
        if self.whole is not None and (self.whole.match(name) or self.whole.match(rel_path)):
            return True
        if self.component is not None and any(self.component.match(p) for p in parts[:-1]):
            return True
        return self.double_star is not None and self.double_star.match(rel_path) is not None


def _alternation(globs: tuple[str, ...]) -> re.Pattern[str] | None:
    if not globs:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs))


@functools.lru_cache(maxsize=64)
def _glob_set(globs: tuple[str, ...]) -> _GlobSet:
    return _GlobSet(globs)


def glob_mismatch(
    path: Path | str, include_globs: Sequence[str], exclude_globs: Sequence[str]
) -> bool:
    """True if a file named ``path`` is not indexable by name (judged by its basename)."""
    name = os.path.basename(os.path.normpath(path))
    return matches_any(name, exclude_globs) or not matches_any(name, include_globs)


def scan_roots(
    roots: Sequence[Path],
    *,
    base_dir: Path,
    include_globs: Sequence[str],
    exclude_globs: Sequence[str],
    index_files: IndexFiles | None = None,
    link_roots: Sequence[Path] = (),
) -> ScanResult:
    """List the indexable files under ``roots`` (files or directories), sorted by path;
    the index's own files (``index_files``) are never listed."""
    result = ScanResult()
    own = index_files or IndexFiles(frozenset(), ())
    seen: dict[str, ScannedFile] = {}
    contain = [real(r) for r in (*roots, *link_roots)]
    for root in roots:
        if not os.path.lexists(root):
            raise RootNotFoundError(f"path to index does not exist: {root}")
        root_rel = to_rel_path(root, base_dir)
        result.root_prefixes.append(root_rel)
        if os.path.isdir(root):
            walk = _Walk(base_dir, include_globs, exclude_globs, own, contain)
            _walk_dir(root, walk, seen, result)
        elif own.owns(root):
            continue
        elif glob_mismatch(root, include_globs, exclude_globs):
            result.skipped.append(SkippedFile(root_rel, GLOB_MISMATCH))
        else:
            _consider_file(root, root_rel, seen, result)
    result.files = sorted(seen.values(), key=lambda f: f.rel_path)
    return result


@dataclass(frozen=True, slots=True)
class _Walk:
    base_dir: Path
    include_globs: Sequence[str]
    exclude_globs: Sequence[str]
    own: IndexFiles
    contain: Sequence[Path]

    def escapes(self, path: str, result: ScanResult) -> bool:
        """True (and the link listed as skipped) for a symlink pointing out of bounds."""
        if not os.path.islink(path) or is_within(path, self.contain):
            return False
        result.skipped.append(SkippedFile(to_rel_path(Path(path), self.base_dir), SYMLINK_OUTSIDE))
        return True


def _walk_dir(root: Path, walk: _Walk, seen: dict[str, ScannedFile], result: ScanResult) -> None:
    base_dir, include_globs, exclude_globs = walk.base_dir, walk.include_globs, walk.exclude_globs
    own = walk.own
    # Symlinked directories are followed once: (device, inode) of every visited
    # directory is remembered, so a link cycle ends the descent instead of looping.
    # A link is followed only to a target inside the bounds (walk.escapes); the
    # directories below a followed link are then inside too.
    visited: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError:
            dirnames[:] = []
            continue
        key = (st.st_dev, st.st_ino)
        real_dir = os.path.realpath(dirpath)
        if key in visited or own.owns_real(real_dir):
            dirnames[:] = []
            continue
        visited.add(key)
        rel_dir = os.path.relpath(dirpath, root)
        kept = []
        for name in sorted(dirnames):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if matches_any(rel.replace(os.sep, "/"), exclude_globs):
                continue
            if not walk.escapes(os.path.join(dirpath, name), result):
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            rel_in_root = (name if rel_dir == "." else f"{rel_dir}/{name}").replace(os.sep, "/")
            if matches_any(rel_in_root, exclude_globs) or not matches_any(
                rel_in_root, include_globs
            ):
                continue
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                # A link resolves elsewhere: check its target, and that it stays in bounds.
                if own.owns(path) or walk.escapes(path, result):
                    continue
            elif own.owns_real(os.path.join(real_dir, name)):
                continue
            _consider_file(Path(path), to_rel_path(path, base_dir), seen, result)


def _consider_file(
    path: Path,
    rel_path: str,
    seen: dict[str, ScannedFile],
    result: ScanResult,
) -> None:
    if rel_path in seen:
        return
    try:
        st = os.stat(path)
    except OSError as exc:
        result.skipped.append(SkippedFile(rel_path, f"unreadable: {exc.strerror or exc}"))
        return
    if not stat.S_ISREG(st.st_mode):
        result.skipped.append(SkippedFile(rel_path, "not a regular file"))
        return
    seen[rel_path] = ScannedFile(Path(os.path.abspath(path)), rel_path, st.st_mtime_ns, st.st_size)
