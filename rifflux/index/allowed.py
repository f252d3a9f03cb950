"""Allowed roots: where the MCP server may index and serve files, checked by realpath.

Invariants (docs/security.md explains the threat they answer):

* a path is inside a root when its realpath is the root's realpath or lies below it
  (a separator-bounded prefix: ``/data/notes`` does not contain ``/data/notes-old``);
* a symlink is judged by its target, so a link inside a root that points out is outside;
* roots the MCP client declares (the protocol's roots capability) narrow or extend the
  server's own only within ``RIFFLUX_ALLOWED_ROOTS`` when that is set (the effective
  roots are the intersection of the two sets); when it is not set, the client's roots
  replace the default (the server's working directory), as the reference MCP
  filesystem server does.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from rifflux.config import Settings


def real(path: Path | str) -> Path:
    """``path`` with ``~`` expanded and every symlink resolved (need not exist)."""
    return Path(os.path.realpath(os.path.expanduser(path)))


def is_within(path: Path | str, roots: Iterable[Path | str]) -> bool:
    """True if ``path``'s realpath is one of ``roots`` (realpaths) or lies below one."""
    target = str(real(path))
    for root in roots:
        prefix = str(root)
        if target == prefix or target.startswith(prefix.rstrip(os.sep) + os.sep):
            return True
    return False


def configured_roots(settings: Settings, cwd: Path) -> list[Path]:
    """``RIFFLUX_ALLOWED_ROOTS`` as realpaths (relative to ``cwd``), or ``[cwd]``."""
    if not settings.allowed_roots:
        return [real(cwd)]
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
