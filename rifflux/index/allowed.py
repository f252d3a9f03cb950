"""Allowed roots: where the MCP server may index and serve files, checked by realpath.

Invariants (docs/security.md explains the threat they answer):

* a path is inside a root when its realpath is the root's realpath or lies below it
  (a separator-bounded prefix: ``/data/notes`` does not contain ``/data/notes-old``);
* a symlink is judged by its target, so a link inside a root that points out is outside;
* without ``RIFFLUX_ALLOWED_ROOTS`` the default root is the server's working directory,
  except where that would share far more than anyone means to: ``/``, a home directory
  (``Path.home()``, ``/root``, any directory directly under ``/home``, ``/Users`` or
  ``/var/home``) or a parent of one. Desktop MCP hosts start servers there; such a
  server has no default root, and every call that needs one fails with one line
  naming ``RIFFLUX_ALLOWED_ROOTS`` (:func:`no_default_root`);
* roots the MCP client declares (the protocol's roots capability) narrow or extend the
  server's own only within ``RIFFLUX_ALLOWED_ROOTS`` when that is set (the effective
  roots are the intersection of the two sets); when it is not set, the client's roots
  replace the default (the server's working directory, or no root at all), as the
  reference MCP filesystem server does: they come from the host, not from the model.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from rifflux.config import Settings

HOME_PARENTS = ("/home", "/Users", "/var/home")
"""Directories whose children are users' home directories (where they exist)."""


def real(path: Path | str) -> Path:
    """``path`` with ``~`` expanded and every symlink resolved (need not exist)."""
    return Path(os.path.realpath(os.path.expanduser(path)))


def is_within(path: Path | str, roots: Iterable[Path | str]) -> bool:
    """True if ``path``'s realpath is one of ``roots`` (realpaths) or lies below one."""
    return real_is_within(real(path), roots)


def real_is_within(real_path: Path | str, roots: Iterable[Path | str]) -> bool:
    """:func:`is_within` for a path that is already a realpath (no filesystem access)."""
    target = str(real_path)
    for root in roots:
        prefix = str(root)
        if target == prefix or target.startswith(prefix.rstrip(os.sep) + os.sep):
            return True
    return False


def known_homes() -> tuple[list[Path], list[Path]]:
    """(home directories, directories holding homes) of this machine, as realpaths:
    the user's home and ``/root``, and those of :data:`HOME_PARENTS` that exist."""
    homes = [Path("/root")]
    with contextlib.suppress(RuntimeError):  # No HOME and no password entry.
        homes.insert(0, Path.home())
    parents = [Path(p) for p in HOME_PARENTS if os.path.isdir(p)]
    return [real(h) for h in homes], [real(p) for p in parents]


def unsafe_default_root(
    cwd: Path, homes: Sequence[Path], home_parents: Sequence[Path]
) -> str | None:
    """Why ``cwd`` may not be the default allowed root, or None if it may.

    ``homes`` and ``home_parents`` are realpaths (:func:`known_homes`).
    """
    here = real(cwd)
    if here == Path(here.anchor):
        return "the filesystem root"
    if here in homes or here.parent in home_parents:
        return "a home directory"
    if any(is_within(inner, [here]) for inner in (*homes, *home_parents)):
        return "a parent of home directories"
    return None


def no_default_root(cwd: Path, why: str, suggest: str = "/path/to/notes") -> str:
    """The one line every call that needs an allowed root answers when there is none."""
    return (
        f"no allowed roots: the server runs in {cwd} ({why}), so nothing is shared by "
        f"default; set RIFFLUX_ALLOWED_ROOTS={suggest}"
    )


def configured_roots(settings: Settings, cwd: Path) -> list[Path]:
    """``RIFFLUX_ALLOWED_ROOTS`` as realpaths (relative to ``cwd``), else ``[cwd]``, or
    ``[]`` when ``cwd`` may not be the default (:func:`unsafe_default_root`)."""
    if not settings.allowed_roots:
        return [] if unsafe_default_root(cwd, *known_homes()) else [real(cwd)]
    return [real(cwd / Path(p).expanduser()) for p in settings.allowed_roots]


def effective_roots(
    configured: Sequence[Path], client: Sequence[Path] | None, *, restricted: bool
) -> list[Path]:
    """The roots a call may use, given the roots the client declared (None: none).

    ``restricted`` says ``RIFFLUX_ALLOWED_ROOTS`` is set: then a client root counts
    only where it overlaps a configured root (the deeper of the two is kept).
    """
    if client is None:
        return list(configured)
    declared = [real(c) for c in client]
    if not restricted:
        return declared
    kept: list[Path] = []
    for c in declared:
        for a in configured:
            inner = c if is_within(c, [a]) else a if is_within(a, [c]) else None
            if inner is not None and inner not in kept:
                kept.append(inner)
    return kept


def describe(roots: Sequence[Path]) -> str:
    return ", ".join(str(r) for r in roots) or "(none)"
