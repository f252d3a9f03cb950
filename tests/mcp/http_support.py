"""Helpers for the streamable HTTP tests: a spawned server on a free local port, and
client sessions over it (test modules import what they use, as from ``mcp_support``)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_support import IndexedTree, server_command
from rifflux_testing import free_port

BOOT_TIMEOUT_S = 120.0
"""Generous: the bound only ends a test whose server never serves."""
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
HEADS_OVER_THE_LIMITS = {
    "20-KB": {"X-Pad": "a" * 20_000},
    "1000-fields": {f"X-Field-{i}": "v" for i in range(1000)},
}
"""Extra headers that put a request head over 16 KiB or 100 fields (431)."""
HEAD_WITHIN_THE_LIMITS = {"X-Pad": "a" * 14_000} | {f"X-Field-{i}": "v" for i in range(80)}
"""Extra headers that leave a request head just within both limits."""
TRICKLE_EVERY_S = 0.5
TRICKLE_BOUND_S = 90.0
"""A slow-body attack stops by itself after this long, whatever the test does."""


@dataclass(frozen=True)
class HttpServer:
    url: str
    port: int
    pid: int
    log: Path | None = None
    """The server's stderr (its log lines), when the test asked for it."""

    def rss_kb(self) -> int:
        """The server process's resident memory (``python -m rifflux.mcp`` execs, so the
        spawned process is the server)."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
        return int(line.split()[1])


def answers_http(port: int) -> bool:
    """Whether a server on ``port`` answers an HTTP request (``GET /health``) at once."""
    request = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as conn:
            conn.sendall(request.encode())
            return conn.recv(16).startswith(b"HTTP/1.1 ")
    except OSError:
        return False


def wait_until_listening(proc: subprocess.Popen[bytes], port: int) -> None:
    """Until the server answers HTTP: a port accepts connections once it is bound, which
    with HTTP worker processes is before any of them serves (they queue meanwhile)."""
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}")
        if answers_http(port):
            return
        time.sleep(0.1)
    raise AssertionError(f"server did not answer on {port} within {BOOT_TIMEOUT_S}s")


def start_http_server(
    tree: IndexedTree, log: Path | None = None, **env: str
) -> Iterator[HttpServer]:
    """A server over ``tree`` on a free port, its stderr written to ``log`` if given."""
    port = free_port()
    with contextlib.ExitStack() as files:
        stderr = subprocess.DEVNULL if log is None else files.enter_context(log.open("ab"))
        proc = subprocess.Popen(
            server_command("--transport", "http", "--port", str(port)),
            env=tree.env(**env),
            cwd=tree.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        wait_until_listening(proc, port)
        yield HttpServer(url=f"http://127.0.0.1:{port}/mcp", port=port, pid=proc.pid, log=log)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@asynccontextmanager
async def http_session(
    url: str, headers: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@contextmanager
def slow_bodies(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections to ``127.0.0.1:port`` that each send an MCP POST's head and
    then its promised body one byte every ``TRICKLE_EVERY_S`` (never all of it), until
    the block ends or ``TRICKLE_BOUND_S`` has passed; they close when the block ends."""
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{"
    ).encode()
    stop = threading.Event()
    conns: list[socket.socket] = []

    def trickle() -> None:
        deadline = time.monotonic() + TRICKLE_BOUND_S
        while not stop.wait(TRICKLE_EVERY_S) and time.monotonic() < deadline:
            for conn in conns:
                try:
                    conn.send(b" ")
                except OSError:
                    continue  # Closed by the server: that connection's attack is over.

    thread = threading.Thread(target=trickle, name="slow-bodies", daemon=True)
    try:
        for _ in range(count):
            conn = socket.create_connection(("127.0.0.1", port))
            conns.append(conn)
            conn.sendall(head)
            conn.setblocking(False)
        wait_until_read(port, [conn.getsockname()[1] for conn in conns])
        thread.start()
        yield conns
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()
        for conn in conns:
            conn.close()


def wait_until_read(port: int, clients: list[int]) -> None:
    """Wait until the server on ``port`` has accepted the connections from the local
    ``clients`` ports and read every byte they sent (its receive queues in
    ``/proc/net/tcp`` are empty), so that it has seen each request's head."""
    local = f"0100007F:{port:04X}"
    remotes = {f"0100007F:{client:04X}" for client in clients}
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while True:
        unread = set(remotes)
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1] == local and fields[2] in unread and fields[4].endswith(":00000000"):
                unread.discard(fields[2])
        if not unread:
            return
        assert time.monotonic() < deadline, f"{len(unread)} connections still unread"
        time.sleep(0.05)


def still_waiting(conn: socket.socket) -> bool:
    """Whether the server has neither answered nor closed ``conn`` (non-blocking)."""
    try:
        conn.recv(1)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False  # A byte of an answer, or the end of the stream.
