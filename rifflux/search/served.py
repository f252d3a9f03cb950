"""Which indexed files an MCP call may return: the one check every returned path passes.

Every tool that answers with an indexed file's text or path (``search_rifflux``,
``get_chunk`` and its neighbours, ``get_file``, ``multi_get``, ``search_decisions``,
``search_errors``) asks :meth:`ServedPaths.refusal`, and nothing else decides
(docs/security.md). A tool that names one file refuses the call with the refusal's
line; a search or a glob leaves the file out.

Invariants:

* A file is served when its realpath, read now, lies inside the call's allowed roots
  and neither its path (the stored path made absolute) nor its realpath is on the deny
  list (``rifflux.index.denied``; ``RIFFLUX_ALLOW_SECRET_PATHS=1`` lifts only that). So
  an index built elsewhere, built with ``RIFFLUX_ALLOW_SECRET_PATHS=1`` or before the
  deny list, or a file swapped for a symlink after it was indexed, serves nothing
  outside the roots and no secret.
* The check reads no file, only the path's links (``realpath``); a search asks it, in rank
  order, only about the candidates it needs to fill ``top_k`` (:meth:`ServedPaths.admitting`,
  ``ranking.first_admitted``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rifflux.errors import PathNotAllowedError, RiffluxError, SecretPathError, shorten
from rifflux.index.allowed import describe, real, real_is_within
from rifflux.index.denied import refused_secret, secret_reason


@dataclass(frozen=True, slots=True)
class ServedPaths:
    """One call's allowed roots (realpaths) and whether the deny list is lifted; frozen and
    hashable, so a cached search answer is keyed by it."""

    roots: tuple[Path, ...]
    allow_secrets: bool = False

    def refusal(
        self, stored_path: str, path: str | Path, real_path: str | Path | None = None
    ) -> RiffluxError | None:
        """Why the indexed file ``stored_path`` (``path``: where it lives; ``real_path``:
        its realpath, if known) may not be served, as the error a tool naming it raises;
        None when it may."""
        real_path = real(path) if real_path is None else real_path
        if not real_is_within(real_path, self.roots):
            return PathNotAllowedError(
                f"{stored_path!r} is indexed but lies outside the allowed roots "
                f"({describe(self.roots)}): it resolves to {shorten(str(real_path))}"
            )
        rule = refused_secret([path, real_path], allow=self.allow_secrets)
        if rule is not None:
            return SecretPathError(f"{stored_path!r} is not served: {secret_reason(rule, 'serve')}")
        return None

    def admitting(self, absolute: Callable[[str], str]) -> Callable[[str], bool]:
        """A predicate on stored paths (``absolute`` places one), true when served; each
        distinct path is checked once per predicate (one call), and each directory's
        realpath resolved once (a file then costs one ``lstat``)."""
        seen: dict[str, bool] = {}
        directories: dict[str, str] = {}

        def real_file(path: str) -> str:
            folder, name = os.path.split(path)
            if name in ("", ".", "..") or os.path.islink(path):
                return str(real(path))
            parent = directories.get(folder)
            if parent is None:
                parent = directories[folder] = str(real(folder))
            return os.path.join(parent, name)

        def admits(stored_path: str) -> bool:
            served = seen.get(stored_path)
            if served is None:
                path = absolute(stored_path)
                served = self.refusal(stored_path, path, real_file(path)) is None
                seen[stored_path] = served
            return served

        return admits
