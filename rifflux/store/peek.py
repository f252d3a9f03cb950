"""Read the first bytes of a file that SQLite may hold locks on, without releasing them.

POSIX advisory locks belong to a process and an inode: closing *any* descriptor of a
file drops every lock the process holds on it. SQLite's connections lock the database
file and its wal-index (``-shm``), so opening and closing either beside this process's
own connections would release their locks, and another process could then take the
wal-index for unused and reinitialise it under their mapping (a bus error in a search
was seen), or checkpoint and delete a WAL they still read. So :func:`peek` opens each
file once per inode and never closes the descriptor: one per file a process ever
peeks at (the error paths that use it, :mod:`rifflux.store.faults` and the
not-an-index check, look at a handful).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_descriptors: dict[tuple[int, int], int] = {}
_lock = threading.Lock()


def peek(path: Path | str, size: int) -> bytes | None:
    """Up to ``size`` bytes from the start of ``path``; None when it cannot be read."""
    with _lock:
        try:
            st = os.stat(path)
            fd = _descriptors.get((st.st_dev, st.st_ino))
            if fd is None:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                opened = os.fstat(fd)
                # A file replaced between stat and open: this descriptor names the new
                # inode; when that one is known already, the extra descriptor stays open
                # (closing it would drop the locks on that inode).
                fd = _descriptors.setdefault((opened.st_dev, opened.st_ino), fd)
            return os.pread(fd, size, 0)
        except OSError:
            return None
