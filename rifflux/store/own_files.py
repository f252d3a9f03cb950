"""The index's own files, which are never indexed nor watched, wherever the index lives.

Only these are ignored: the index database and its ``-wal``/``-shm``/``-journal``, the
SQLite queue and presence databases beside it (or wherever ``RIFFLUX_BROKER_URL`` puts
the queue) with the queue's doorbell folder (``queue.db.doorbells/``), the published
vector cache (``<db>.vectors/``), the workers' chunk-step slots (``<db>.slots/``,
workers/cpu_slots.py) and ``workers.log`` with its rotated copies (``workers.log.1`` …).
Ignoring the whole directory that holds the index instead was wrong as soon as the index
lived in a folder above the indexed root (``RIFFLUX_DB_PATH=./index.db`` with ``docs/``
watched): every event was dropped. The scan and the watcher both ask :meth:`owns`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rifflux.config import Settings
from rifflux.logs import LOG_BACKUPS

SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")
SIBLING_DATABASES = ("queue.db", "workers.db")
# The folder beside a SQLite queue where consuming processes register (queue/doorbell.py).
DOORBELL_SUFFIX = ".doorbells"
# The folder beside the index whose files the workers' chunk steps lock (workers/cpu_slots.py).
SLOTS_SUFFIX = ".slots"
# workers.log and its rotated copies (rifflux.logs.RotatingFile).
SIBLING_FILES = ("workers.log", *(f"workers.log.{n}" for n in range(1, LOG_BACKUPS + 1)))


@dataclass(frozen=True, slots=True)
class IndexFiles:
    files: frozenset[str]
    """Real paths of single files that belong to the index."""
    dirs: tuple[str, ...]
    """Real paths of directories whose whole content belongs to the index."""

    @classmethod
    def for_db(cls, db_path: Path, *, extra_databases: Iterable[Path] = ()) -> IndexFiles:
        db = Path(os.path.realpath(db_path))
        databases = [db, *(db.parent / name for name in SIBLING_DATABASES)]
        databases += [Path(os.path.realpath(p)) for p in extra_databases]
        files = {f"{base}{suffix}" for base in databases for suffix in SQLITE_SUFFIXES}
        files.update(str(db.parent / name) for name in SIBLING_FILES)
        doorbells = tuple(f"{base}{DOORBELL_SUFFIX}" for base in databases[1:])
        return cls(frozenset(files), (f"{db}.vectors", f"{db}{SLOTS_SUFFIX}", *doorbells))

    @classmethod
    def for_settings(cls, settings: Settings) -> IndexFiles:
        queue = settings.sqlite_broker_path
        return cls.for_db(settings.db_path, extra_databases=[queue] if queue else [])

    def owns(self, path: str | Path) -> bool:
        """True if ``path`` is one of the index's own files or inside its directories."""
        return self.owns_real(os.path.realpath(path))

    def owns_real(self, real: str) -> bool:
        """:meth:`owns` for a path already resolved with ``os.path.realpath`` (a scan
        resolves each directory once, not each of its files)."""
        if real in self.files:
            return True
        return any(real == d or real.startswith(d + os.sep) for d in self.dirs)
