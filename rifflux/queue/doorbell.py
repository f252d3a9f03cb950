"""Wake the SQLite broker's consumers in other processes as soon as a message is queued.

Without it, a consumer in another process notices an enqueue only at its next poll: up
to :data:`~rifflux.queue.sqlite_broker.MAX_POLL_SECONDS` (1 s) for an idle worker, which
was most of the time between a watched file's write and its job's plan starting.

Each process that consumes binds one Unix datagram socket in Linux's abstract namespace
(no file, gone with the process, even after kill -9) and registers its name as an empty
file in a folder beside the broker database. An enqueue sends the queue's name to every
registered socket, without blocking; the listener thread of the receiving process wakes
its waiting consumers, which then read the database as on any poll. A name whose socket
is gone (its process died) is deregistered by the first sender that finds it so.

The doorbell only shortens waits: a lost, late or forged datagram costs at most one
extra read of the queue, and polling stays as it was, so delivery never depends on it.
Where abstract sockets do not exist (not Linux) or the folder cannot be written, the
doorbell does nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import structlog

from rifflux.store.own_files import DOORBELL_SUFFIX

log = structlog.get_logger(__name__)

# The abstract socket name of a registered listener: this prefix and its file's name.
NAME_PREFIX = b"\0rifflux-doorbell-"
# Longest queue name a datagram carries (Dramatiq queue names are short).
MAX_DATAGRAM = 256

SUPPORTED = sys.platform.startswith("linux")


class Doorbell:
    """The doorbell of one broker database: ring on enqueue, listen while consuming."""

    def __init__(self, broker_path: Path) -> None:
        self.folder = broker_path.with_name(broker_path.name + DOORBELL_SUFFIX)
        self._lock = threading.Lock()
        self._sender: socket.socket | None = None
        self._listener: socket.socket | None = None
        self._registered: Path | None = None
        self._pid = os.getpid()

    def ring(self, queue_name: str) -> None:
        """Tell every listening process that ``queue_name`` changed (never blocks)."""
        if not SUPPORTED:
            return
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        if not names:
            return
        payload = queue_name.encode()[:MAX_DATAGRAM]
        own = self._registered.name if self._registered is not None else None
        sender = self._sending_socket()
        for name in names:
            if name == own:
                continue  # this process's consumers were woken in-process
            try:
                sender.sendto(payload, NAME_PREFIX + name.encode())
            except (ConnectionRefusedError, FileNotFoundError):
                # Its process is gone: nobody binds that name any more.
                with contextlib.suppress(OSError):
                    os.unlink(self.folder / name)
            except OSError:
                pass  # a full socket buffer: that process has wake-ups pending anyway

    def listen(self, wake: Callable[[str], None]) -> None:
        """Bind this process's socket (once) and call ``wake(queue_name)`` for every
        datagram, on a daemon thread."""
        if not SUPPORTED:
            return
        with self._lock:
            self._forget_if_forked()
            if self._listener is not None:
                return
            name = uuid.uuid4().hex
            try:
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                listener.bind(NAME_PREFIX + name.encode())
                self.folder.mkdir(exist_ok=True)
                registration = self.folder / name
                registration.touch()
            except OSError as exc:
                log.info("queue.doorbell_unavailable", reason=str(exc))
                return
            self._listener, self._registered = listener, registration
        threading.Thread(
            target=self._serve, args=(listener, wake), name="rifflux-doorbell", daemon=True
        ).start()

    def close(self) -> None:
        """Stop listening and deregister; ringing still works."""
        with self._lock:
            if self._pid != os.getpid():
                self._forget_if_forked()
                return
            listener, self._listener = self._listener, None
            registration, self._registered = self._registered, None
            sender, self._sender = self._sender, None
        if registration is not None:
            with contextlib.suppress(OSError):
                registration.unlink()
        for sock in (listener, sender):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _serve(self, listener: socket.socket, wake: Callable[[str], None]) -> None:
        while True:
            try:
                payload = listener.recv(MAX_DATAGRAM)
            except OSError:
                return  # closed
            if not payload:
                return
            wake(payload.decode(errors="replace"))

    def _sending_socket(self) -> socket.socket:
        with self._lock:
            self._forget_if_forked()
            if self._sender is None:
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.setblocking(False)
            return self._sender

    def _forget_if_forked(self) -> None:
        """A forked child shares no socket or thread with its parent (call under lock)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._sender = self._listener = None
            self._registered = None
