"""Who holds an SQLite database's write lock, best effort, for the one-line error of a
write that could not get it (:func:`index_locked`).

SQLite locks with POSIX advisory locks, which Linux lists with their owner's pid in
``/proc/locks``: in WAL mode the writer holds byte 120 of the ``-shm`` file (the WAL
write lock, what ``BEGIN IMMEDIATE`` and ``BEGIN EXCLUSIVE`` take); in rollback-journal
mode the RESERVED, PENDING or SHARED bytes of the database file itself (from
``0x40000000``). Where no such lock names a process (another host over a network file
system, a process in another pid namespace, no ``/proc``), the processes of this host
that have the file open (``/proc/*/fd``, as ``fuser`` finds them) are named instead.
Nothing here waits on a lock or writes anything.
"""

from __future__ import annotations

import os
from pathlib import Path

from rifflux.errors import IndexLockedError

WAL_WRITE_LOCK_BYTE = 120
"""The ``-shm`` byte whose exclusive lock is SQLite's WAL write lock."""
ROLLBACK_LOCK_FIRST = 0x40000000
ROLLBACK_LOCK_LAST = ROLLBACK_LOCK_FIRST + 511
"""The database file's lock bytes in rollback-journal mode (PENDING, RESERVED, SHARED)."""
MAX_NAMED = 3
"""How many processes a message names."""
COMMAND_CHARS = 80
"""A named process's command line is cut to this many characters."""


def _file_key(path: str) -> tuple[int, int, int] | None:
    """``(major, minor, inode)`` of ``path`` as ``/proc/locks`` writes it, or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.major(st.st_dev), os.minor(st.st_dev), st.st_ino


def _lock_entries(text: str) -> list[tuple[int, tuple[int, int, int], int, int]]:
    """``(pid, (major, minor, inode), start, end)`` of each granted WRITE lock of
    ``/proc/locks`` (a waiter's line, marked ``->``, is not a holder)."""
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[1] == "->" or fields[3] != "WRITE":
            continue
        try:
            pid = int(fields[4])
            major, minor, inode = fields[5].split(":")
            key = (int(major, 16), int(minor, 16), int(inode))
            start = int(fields[6])
            end = ROLLBACK_LOCK_LAST if fields[7] == "EOF" else int(fields[7])
        except ValueError:
            continue
        entries.append((pid, key, start, end))
    return entries


def write_lock_holders(db_path: Path | str) -> list[int]:
    """Pids holding the write lock of the SQLite database at ``db_path`` (``/proc/locks``)."""
    try:
        text = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return []
    database, shm = _file_key(str(db_path)), _file_key(f"{db_path}-shm")
    holders: list[int] = []
    for pid, key, start, end in _lock_entries(text):
        on_shm = key == shm and start <= WAL_WRITE_LOCK_BYTE <= end
        on_db = key == database and start <= ROLLBACK_LOCK_LAST and end >= ROLLBACK_LOCK_FIRST
        if (on_shm or on_db) and pid > 0 and pid not in holders:
            holders.append(pid)
    return holders


def processes_with_open(db_path: Path | str) -> list[int]:
    """Pids of other processes of this host that have the database file open."""
    target = os.path.realpath(db_path)
    found: list[int] = []
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # Gone, or another user's.
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found


def describe_process(pid: int) -> str:
    """``pid N (command line)``; "this process" for our own."""
    if pid == os.getpid():
        return f"this process (pid {pid})"
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return f"pid {pid}"
    command = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
    command = " ".join(command.split())  # One line, whatever the arguments hold.
    if len(command) > COMMAND_CHARS:
        command = command[: COMMAND_CHARS - 1] + "…"
    return f"pid {pid} ({command})" if command else f"pid {pid}"


def index_locked(db_path: Path | str, waited_seconds: float, action: str) -> IndexLockedError:
    """The one-line error for ``action`` (e.g. "reindex") giving up on the write lock of
    the index at ``db_path`` after ``waited_seconds``: who holds it and what to do."""
    holders = write_lock_holders(db_path)
    if holders:
        who = "held by " + ", ".join(describe_process(p) for p in holders[:MAX_NAMED])
    else:
        openers = processes_with_open(db_path)
        if openers:
            named = ", ".join(describe_process(p) for p in openers[:MAX_NAMED])
            more = f" and {len(openers) - MAX_NAMED} more" if len(openers) > MAX_NAMED else ""
            who = f"held by another process; open in {named}{more}"
        else:
            who = "held by a process this host cannot see (another host or container)"
    return IndexLockedError(
        f"the index {db_path} is locked ({who}); {action} waited {waited_seconds:.0f} s "
        "for it: let that process finish or stop it, then try again"
    )
