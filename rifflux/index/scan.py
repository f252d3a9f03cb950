"""Walk the roots to index: include/exclude globs, symlink-loop safety, stable paths.

Paths in the index are POSIX paths relative to the index's base directory, so the same
layout yields the same paths on every machine. A file outside the base directory is
stored by its absolute POSIX path.

Containment: a single-file root obeys the include and exclude globs like a file found
by the walk (``reindex ~/.ssh/id_rsa`` indexes nothing). A symlink, to a file or to a
directory, is followed only when its target's realpath lies inside one of the scanned
roots (the job's own: a link in repo A to repo B is not followed when indexing A, even
when both are allowed), and the globs and the deny list then judge the target's real
path and name as well as the link's. The built-in deny list (:mod:`rifflux.index.denied`)
skips secret directories, files and roots unless ``allow_secret_paths``. Every such
skip is listed with its reason; a file the globs leave out is not.

Scoped scans (:func:`scan_scope`): a job for the paths that changed (the watcher's)
lists only the files at or under those paths, each judged by the very code that judges
it in a walk of the whole root: the walk goes down from the root through the path's
directories, each listed for the one name on the path. That equals the whole walk
restricted to the paths only where no symlink is involved (a link's file changes when
its target does, and a directory reached through a link is walked once, by whichever
path sorts first), so a scoped scan that meets a symlink gives up (None) and the job
scans its whole roots; :class:`ScanStats` counts the links a scan met so a plan can tell
whether a root holds any.
"""

from __future__ import annotations

import fnmatch
import functools
import heapq
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rifflux.errors import RootNotFoundError, shorten
from rifflux.index.allowed import real, real_is_within
from rifflux.index.denied import dir_rule, name_rule, refused_secret, secret_reason
from rifflux.store.own_files import IndexFiles

SYMLINK_OUTSIDE = "symlink to a target outside the indexed roots; not followed"
GLOB_MISMATCH = "does not match the include globs, or matches an exclude glob"
TARGET_GLOB_MISMATCH = (
    "symlink target does not match the include globs, or matches an exclude glob; not followed"
)


@dataclass(frozen=True, slots=True)
class ScannedFile:
    # A plain string: a scan makes one per file, and a Path costs several times more.
    abs_path: str
    rel_path: str
    mtime_ns: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class SkippedFile:
    rel_path: str
    reason: str


@dataclass(slots=True)
class ScanStats:
    """What a walk met besides files: the symlinks it judged (followed or refused)."""

    links: int = 0


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
        return self.component_matches(parts[:-1]) or self.matches_name(name, rel_path)

    def component_matches(self, dir_parts: Sequence[str]) -> bool:
        """The per-component test of :meth:`matches`, on the directories of a path."""
        return self.component is not None and any(self.component.match(p) for p in dir_parts)

    def matches_name(self, name: str, rel_path: str) -> bool:
        """:meth:`matches` without the per-component test (a scan does that once per
        directory)."""
        if self.whole is not None and (self.whole.match(name) or self.whole.match(rel_path)):
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


def require_roots(roots: Sequence[Path]) -> None:
    """Refuse, in one line naming each, roots that do not exist (before a job is made)."""
    missing = [shorten(str(root)) for root in roots if not root.exists()]
    if missing:
        raise RootNotFoundError(f"path to index does not exist: {', '.join(missing)}")


def scan_roots(
    roots: Sequence[Path],
    *,
    base_dir: Path,
    include_globs: Sequence[str],
    exclude_globs: Sequence[str],
    index_files: IndexFiles | None = None,
    allow_secret_paths: bool = False,
) -> ScanResult:
    """List the indexable files under ``roots`` (files or directories), sorted by path;
    the index's own files (``index_files``) are never listed, nor (unless
    ``allow_secret_paths``) the deny list's. :func:`iter_scan`, in a list."""
    result = ScanResult()
    files = iter_scan(
        roots,
        base_dir=base_dir,
        include_globs=include_globs,
        exclude_globs=exclude_globs,
        skipped=result.skipped,
        index_files=index_files,
        allow_secret_paths=allow_secret_paths,
    )
    result.root_prefixes = root_prefixes(roots, base_dir)
    result.files = list(files)
    return result


def root_prefixes(roots: Sequence[Path], base_dir: Path) -> list[str]:
    """The stored form of each root: pruning only ever touches files under these."""
    return [to_rel_path(root, base_dir) for root in roots]


class SkipSink(Protocol):
    def append(self, skipped: SkippedFile, /) -> None: ...


def iter_scan(
    roots: Sequence[Path],
    *,
    base_dir: Path,
    include_globs: Sequence[str],
    exclude_globs: Sequence[str],
    skipped: SkipSink,
    index_files: IndexFiles | None = None,
    allow_secret_paths: bool = False,
    stats: ScanStats | None = None,
) -> Iterator[ScannedFile]:
    """The indexable files under ``roots``, lazily, sorted by stored path (each once);
    every skip with a reason goes to ``skipped`` as the walk meets it, and every symlink
    judged is counted in ``stats``.

    Memory follows the depth of the tree and the size of one directory, never the
    number of files: each root is walked in sorted path order (:func:`_walk_sorted`) and
    the roots' streams are merged. Raises RootNotFoundError now, before anything is
    yielded, if a root does not exist.
    """
    for root in roots:
        if not os.path.lexists(root):
            raise RootNotFoundError(f"path to index does not exist: {root}")
    walk = _make_walk(
        roots, base_dir, include_globs, exclude_globs, index_files, allow_secret_paths, stats
    )
    streams = [_scan_root(root, walk, include_globs, exclude_globs, skipped) for root in roots]
    return _distinct(heapq.merge(*streams, key=_by_path))


def _make_walk(
    roots: Sequence[Path],
    base_dir: Path,
    include_globs: Sequence[str],
    exclude_globs: Sequence[str],
    index_files: IndexFiles | None,
    allow_secret_paths: bool,
    stats: ScanStats | None,
) -> _Walk:
    own = index_files or IndexFiles(frozenset(), ())
    return _Walk(
        base_dir,
        _glob_set(tuple(include_globs)),
        _glob_set(tuple(exclude_globs)),
        own,
        _own_by_dir(own),
        [real(r) for r in roots],
        allow_secret_paths,
        stats if stats is not None else ScanStats(),
    )


def scope_in_roots(
    roots: Sequence[Path | str], paths: Iterable[Path | str]
) -> tuple[str, ...] | None:
    """The changed ``paths`` as the scope of a job of ``roots``: each re-based onto the
    realpath of the first root holding it (a job stores its roots resolved), none under
    another (a folder covers what is in it), sorted. None (the whole roots) when there
    is no path, or a path is a root itself, holds one (nested roots: the other root's
    walk judges it by its own globs) or lies above or outside all of them."""
    bases = [(os.path.abspath(r), os.fspath(real(r))) for r in roots]
    scope: set[str] = set()
    for raw in paths:
        path = os.path.abspath(raw)
        holder = next(
            (pair for pair in bases if path != pair[0] and real_is_within(path, [pair[0]])),
            None,
        )
        if holder is None:
            return None
        scope.add(os.path.join(holder[1], os.path.relpath(path, holder[0])))
    kept: list[str] = []
    for path in sorted(scope):
        if not kept or not real_is_within(path, kept[-1:]):
            kept.append(path)
    for _, real_root in bases:
        if real_is_within(real_root, kept):
            return None
    return tuple(kept) or None


def scan_scope(
    roots: Sequence[Path],
    scope: Sequence[str],
    *,
    base_dir: Path,
    include_globs: Sequence[str],
    exclude_globs: Sequence[str],
    skipped: SkipSink,
    index_files: IndexFiles | None = None,
    allow_secret_paths: bool = False,
) -> list[ScannedFile] | None:
    """The files a walk of the whole ``roots`` would list at or under the ``scope`` paths
    (see :func:`scope_in_roots`), sorted by stored path, and their skips; None when the
    scoped walk meets a symlink (then only a walk of the whole roots is exact, see the
    module docstring). A scope path that does not exist lists nothing.

    Each path is walked under every root holding it, in root order, and the first
    root's file is kept, as the whole walk's merge does.
    """
    stats = ScanStats()
    walk = _make_walk(
        roots, base_dir, include_globs, exclude_globs, index_files, allow_secret_paths, stats
    )
    held: list[SkippedFile] = []
    streams: list[Iterator[ScannedFile]] = []
    for root in roots:
        root_path = os.path.abspath(root)
        if not os.path.isdir(root_path):
            continue
        under = [p for p in scope if p != root_path and real_is_within(p, [root_path])]
        streams.append(_scope_stream(root_path, under, walk, held))
    files = list(_distinct(heapq.merge(*streams, key=_by_path)))
    if stats.links:
        return None
    # Several scope paths behind one skipped folder meet its skip once each.
    for item in dict.fromkeys(held):
        skipped.append(item)
    return files


def _scope_stream(
    root: str, scope: Sequence[str], walk: _Walk, skipped: SkipSink
) -> Iterator[ScannedFile]:
    """One root's files at or under the sorted, disjoint ``scope`` paths, in stored path
    order (the scope's own order is not that: "a.md" sorts before "a/x.md")."""
    found = [scanned for path in scope for scanned in _walk_to(root, path, walk, skipped)]
    found.sort(key=_by_path)
    return iter(found)


def _walk_to(root: str, path: str, walk: _Walk, skipped: SkipSink) -> Iterator[ScannedFile]:
    """The files at or under ``path`` (inside ``root``) as the walk of ``root`` judges
    them: each directory on the way is listed for the one name the path takes there."""
    parts = os.path.relpath(path, root).split(os.sep)
    dirpath, rel_dir = root, "."
    visited: set[tuple[int, int]] = set()
    for depth, name in enumerate(parts):
        last = depth == len(parts) - 1
        items = _scan_dir(dirpath, rel_dir, walk, visited, skipped, only=name)
        if not items:
            return
        item = items[0]
        if isinstance(item, ScannedFile):
            if last:
                yield item
            return
        if last:
            yield from _walk_sorted(item[0], item[1], walk, visited, skipped)
            return
        dirpath, rel_dir = item


def _by_path(scanned: ScannedFile) -> str:
    return scanned.rel_path


def _distinct(files: Iterable[ScannedFile]) -> Iterator[ScannedFile]:
    """The first of each run of equal paths (overlapping roots; ``heapq.merge`` is stable,
    so the earlier root's file is kept)."""
    last: str | None = None
    for scanned in files:
        if scanned.rel_path != last:
            last = scanned.rel_path
            yield scanned


def _scan_root(
    root: Path,
    walk: _Walk,
    include_globs: Sequence[str],
    exclude_globs: Sequence[str],
    skipped: SkipSink,
) -> Iterator[ScannedFile]:
    """One root's files, sorted by stored path."""
    root_rel = to_rel_path(root, walk.base_dir)
    is_dir = os.path.isdir(root)
    names = (os.path.abspath(root), real(root))
    rule = refused_secret(names, is_dir=is_dir, allow=walk.allow_secrets)
    if rule is not None:
        skipped.append(SkippedFile(root_rel, secret_reason(rule)))
    elif is_dir:
        yield from _walk_sorted(os.fspath(root), ".", walk, set(), skipped)
    elif walk.own.owns(root):
        return
    elif any(glob_mismatch(name, include_globs, exclude_globs) for name in names):
        skipped.append(SkippedFile(root_rel, GLOB_MISMATCH))
    else:
        found = _consider(functools.partial(os.stat, root), os.path.abspath(root), root_rel)
        if isinstance(found, SkippedFile):
            skipped.append(found)
        else:
            yield found


@dataclass(frozen=True, slots=True)
class _Walk:
    base_dir: Path
    include: _GlobSet
    exclude: _GlobSet
    own: IndexFiles
    # Names of the index's own files, by the realpath of the directory holding them.
    own_by_dir: dict[str, frozenset[str]]
    # Realpaths of the job's roots: the only places a symlink may lead.
    contain: Sequence[Path]
    allow_secrets: bool
    stats: ScanStats

    def refuses_link(self, path: str, skipped: SkipSink, *, is_dir: bool) -> bool:
        """True (and the link listed as skipped with the reason) for a symlink whose
        target lies out of bounds, is on the deny list, or is ruled out by the globs
        (judged by its path relative to the root holding it, and its name)."""
        self.stats.links += 1
        target = os.path.realpath(path)
        reason: str | None = None
        inside = [root for root in self.contain if real_is_within(target, [root])]
        rule = refused_secret([target], is_dir=is_dir, allow=self.allow_secrets)
        if not inside:
            reason = SYMLINK_OUTSIDE
        elif rule is not None:
            reason = secret_reason(rule)
        else:
            rel = Path(os.path.relpath(target, inside[0])).as_posix()
            if self.exclude.matches(rel) or not (is_dir or self.include.matches(rel)):
                reason = TARGET_GLOB_MISMATCH
        if reason is None:
            return False
        skipped.append(SkippedFile(to_rel_path(Path(path), self.base_dir), reason))
        return True

    def refuses_secret(self, path: str, rule: str | None, skipped: SkipSink) -> bool:
        """True (and ``path`` listed as skipped) if a deny rule matched it."""
        if rule is None or self.allow_secrets:
            return False
        reason = secret_reason(rule)
        skipped.append(SkippedFile(to_rel_path(Path(path), self.base_dir), reason))
        return True


def _own_by_dir(own: IndexFiles) -> dict[str, frozenset[str]]:
    by_dir: dict[str, set[str]] = {}
    for real_path in (*own.files, *own.dirs):
        head, name = os.path.split(real_path)
        by_dir.setdefault(head, set()).add(name)
    return {head: frozenset(names) for head, names in by_dir.items()}


def _walk_sorted(
    dirpath: str,
    rel_dir: str,
    walk: _Walk,
    visited: set[tuple[int, int]],
    skipped: SkipSink,
) -> Iterator[ScannedFile]:
    """The files under one directory, sorted by stored path, with one ``os.scandir`` per
    directory.

    A directory's entries are taken in the order of their stored paths (a file by its
    name, a subdirectory by its name and "/", the prefix of everything under it), and a
    subdirectory is walked where it falls in that order: the walk yields files already
    sorted, holding one listing per level of depth, so a plan can merge it with the
    files table as it goes.

    Per file, the directory entry answers "symlink?" without a syscall and one ``stat``
    gives mtime and size; the globs' directory part and the stored path prefix are
    computed once per directory. (The ``os.walk`` version cost an ``lstat``, a ``stat``,
    two ``Path`` objects and two ``abspath`` per file: ~4 s for 100k files under load.)
    """
    # Symlinked directories are followed once: (device, inode) of every visited
    # directory is remembered, so a link cycle ends the descent instead of looping.
    # A link is followed only to a target inside the bounds (walk.refuses_link); the
    # directories below a followed link are then inside too. The deny list's directory
    # rules are checked per directory on its name and its parent's (the root's whole
    # path was checked before the walk), its name rules per file.
    for item in _scan_dir(dirpath, rel_dir, walk, visited, skipped):
        if isinstance(item, ScannedFile):
            yield item
        else:
            yield from _walk_sorted(item[0], item[1], walk, visited, skipped)


def _scan_dir(
    dirpath: str,
    rel_dir: str,
    walk: _Walk,
    visited: set[tuple[int, int]],
    skipped: SkipSink,
    *,
    only: str | None = None,
) -> list[ScannedFile | tuple[str, str]]:
    """List one directory: its files to index and its subdirectories to descend into (as
    (path, path relative to the root)), in the order of their stored paths; with
    ``only``, the entry of that name alone, judged the same way."""
    try:
        st = os.stat(dirpath)
    except OSError:
        return []
    key = (st.st_dev, st.st_ino)
    real_dir = os.path.realpath(dirpath)
    if key in visited or walk.own.owns_real(real_dir):
        return []
    visited.add(key)
    try:
        if only is not None:
            # Opened, not read: a folder the walk cannot list lists nothing here either.
            os.scandir(dirpath).close()
            entries: list[os.DirEntry[str] | _NamedEntry] = _named_entry(dirpath, only)
        else:
            with os.scandir(dirpath) as listing:
                entries = sorted(listing, key=lambda e: e.name)
    except OSError:
        return []
    dirs: list[os.DirEntry[str] | _NamedEntry] = []
    files: list[os.DirEntry[str] | _NamedEntry] = []
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        (dirs if is_dir else files).append(entry)
    include, exclude = walk.include, walk.exclude
    root_prefix = "" if rel_dir == "." else rel_dir + "/"
    # (sort key, item): a subdirectory sorts as its name and "/".
    found: list[tuple[str, ScannedFile | tuple[str, str]]] = []
    # The parent's name as walked and as it really is (".config" for ".config/gcloud").
    parents = {os.path.basename(dirpath), os.path.basename(real_dir)}
    for entry in dirs:
        rel_in_root = root_prefix + entry.name
        if exclude.matches(rel_in_root):
            continue
        if entry.is_symlink():
            if walk.refuses_link(entry.path, skipped, is_dir=True):
                continue
        else:
            rule = next(filter(None, (dir_rule([p, entry.name]) for p in parents)), None)
            if walk.refuses_secret(entry.path, rule, skipped):
                continue
        found.append((entry.name + "/", (entry.path, rel_in_root)))
    dir_parts = [p for p in rel_dir.split("/") if p and p != "."]
    # The globs' per-component test only looks at the directories of a file's path.
    include_dir = include.component_matches(dir_parts)
    exclude_dir = exclude.component_matches(dir_parts)
    own_here = walk.own_by_dir.get(real_dir, frozenset())
    stored_dir = to_rel_path(dirpath, walk.base_dir)
    stored_prefix = "" if stored_dir == "." else stored_dir.rstrip("/") + "/"
    abs_prefix = os.path.join(os.path.abspath(dirpath), "")
    for entry in files:
        name = entry.name
        rel_in_root = root_prefix + name
        if exclude_dir or exclude.matches_name(name, rel_in_root):
            continue
        if not (include_dir or include.matches_name(name, rel_in_root)):
            continue
        if walk.refuses_secret(entry.path, name_rule(name), skipped):
            continue
        if entry.is_symlink():
            # A link resolves elsewhere: check its target, and that it stays in bounds.
            if walk.own.owns(entry.path) or walk.refuses_link(entry.path, skipped, is_dir=False):
                continue
        elif name in own_here:
            continue
        # DirEntry.stat() reuses what scandir already read where it can.
        scanned = _consider(entry.stat, abs_prefix + name, stored_prefix + name)
        if isinstance(scanned, SkippedFile):
            skipped.append(scanned)
        else:
            found.append((name, scanned))
    found.sort(key=lambda pair: pair[0])
    return [item for _, item in found]


class _NamedEntry:
    """The part of ``os.DirEntry`` a listing uses, for one name looked up directly."""

    __slots__ = ("_lstat", "name", "path")

    def __init__(self, dirpath: str, name: str, lstat: os.stat_result) -> None:
        self.name = name
        self.path = os.path.join(dirpath, name)
        self._lstat = lstat

    def is_symlink(self) -> bool:
        return stat.S_ISLNK(self._lstat.st_mode)

    def is_dir(self) -> bool:
        if self.is_symlink():
            return os.path.isdir(self.path)
        return stat.S_ISDIR(self._lstat.st_mode)

    def stat(self) -> os.stat_result:
        return os.stat(self.path) if self.is_symlink() else self._lstat


def _named_entry(dirpath: str, name: str) -> list[os.DirEntry[str] | _NamedEntry]:
    """``name`` in ``dirpath`` as a one-entry listing; empty when it does not exist."""
    try:
        lstat = os.lstat(os.path.join(dirpath, name))
    except FileNotFoundError:
        return []
    return [_NamedEntry(dirpath, name, lstat)]


def _consider(
    stat_of: Callable[[], os.stat_result], abs_path: str, rel_path: str
) -> ScannedFile | SkippedFile:
    """A regular file to index; anything else is skipped with the reason."""
    try:
        st = stat_of()
    except OSError as exc:
        return SkippedFile(rel_path, f"unreadable: {exc.strerror or exc}")
    if not stat.S_ISREG(st.st_mode):
        return SkippedFile(rel_path, "not a regular file")
    return ScannedFile(abs_path, rel_path, st.st_mtime_ns, st.st_size)
