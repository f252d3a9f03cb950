"""The built-in deny list: paths that look like credentials are never indexed nor served.

An allowed root says where the server may look; this list says what it never takes
from there, whatever the roots (docs/security.md): a cloned repository holding
``docs/install.md -> ../../../.ssh/id_rsa``, or a root set to the home directory, must
not put a private key in the index. ``RIFFLUX_ALLOW_SECRET_PATHS=1`` is the only
override; no allowed root overrides it.

Invariants:

* one rule, :func:`secret_rule` (a pure function of the path's text, no filesystem
  access), used by the scan (walked files and directories, single-file roots, symlink
  targets), the plan step's read, ``reindex`` and watched paths, and ``get_file`` /
  ``get_chunk``; callers pass the realpath as well as the path as given when they differ
  (a link is judged by its name and by its target);
* a directory rule matches a component anywhere in the path (``.config/gcloud`` two
  consecutive ones); a name rule matches only the last component of a file;
* matching is case-insensitive (``~/.SSH`` is ``~/.ssh`` on a case-insensitive disk),
  so the list errs towards skipping: a false positive is a skipped file with its reason,
  a false negative is a leaked key.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence
from pathlib import PurePath

SECRET_DIRS = (".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".password-store")
"""Directory names whose whole content is refused, at any depth."""
SECRET_DIR_PAIRS = ((".config", "gcloud"),)
"""Consecutive directory names whose content is refused (``~/.config/gcloud``)."""
SECRET_NAMES = ("id_*", "*.pem", "*.key", "*.p12", ".env*", ".netrc", ".pgpass")
"""File name patterns that are refused (``id_*``: SSH private keys, ``id_rsa`` etc.)."""

OVERRIDE = "RIFFLUX_ALLOW_SECRET_PATHS=1"

_DIRS = frozenset(SECRET_DIRS)
# One alternation with a group per pattern: a scan tests every file's name.
_NAMES = re.compile(
    "|".join(f"(?P<n{i}>{fnmatch.translate(p)})" for i, p in enumerate(SECRET_NAMES))
)


def dir_rule(parts: Sequence[str]) -> str | None:
    """The deny rule matched by the directory names ``parts`` (in order), or None."""
    lowered = [part.lower() for part in parts]
    for i, part in enumerate(lowered):
        if part in _DIRS:
            return part
        for first, second in SECRET_DIR_PAIRS:
            if part == first and i + 1 < len(lowered) and lowered[i + 1] == second:
                return f"{first}/{second}"
    return None


def name_rule(name: str) -> str | None:
    """The deny rule matched by a file's name, or None."""
    match = _NAMES.match(name.lower())
    if match is None or match.lastgroup is None:
        return None
    return SECRET_NAMES[int(match.lastgroup[1:])]


def secret_rule(path: str | PurePath, *, is_dir: bool = False) -> str | None:
    """The deny rule ``path`` matches (``".ssh"``, ``"id_*"``...), or None.

    Every component is tested against the directory rules; the last one also against
    the name rules unless ``is_dir``. Purely textual: pass the realpath too when the
    path may be a symlink.
    """
    parts = [part for part in os.fspath(path).replace(os.sep, "/").split("/") if part]
    if not parts:
        return None
    if is_dir:
        return dir_rule(parts)
    return dir_rule(parts[:-1]) or name_rule(parts[-1])


def secret_reason(rule: str, action: str = "index") -> str:
    """The reason a skip or a refusal gives: the rule and the override."""
    return f"secret path ({rule}); set {OVERRIDE} to {action} it"


def refused_secret(
    paths: Sequence[str | PurePath], *, is_dir: bool = False, allow: bool = False
) -> str | None:
    """The first deny rule any of ``paths`` (one file or directory's names: as given,
    real) matches, or None; always None when ``allow`` (RIFFLUX_ALLOW_SECRET_PATHS)."""
    if allow:
        return None
    for path in paths:
        rule = secret_rule(path, is_dir=is_dir)
        if rule is not None:
            return rule
    return None
