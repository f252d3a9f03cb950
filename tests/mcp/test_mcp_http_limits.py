"""HTTP hardening of issue 20 (finding 6), against spawned servers on a free local port.

A session cap with least-recently-used eviction of idle sessions, an idle timeout, a
deadline on reading each request, a body size limit and the refusal to listen beyond
loopback without a token. Raw HTTP (httpx2, sockets) plays the hostile client; a real
MCP client session checks that an honest client is still served.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx2
import pytest
from http_support import (
    HEAD_WITHIN_THE_LIMITS,
    HEADS_OVER_THE_LIMITS,
    INITIALIZE,
    MCP_HEADERS,
    HttpServer,
    http_session,
    slow_bodies,
    start_http_server,
    still_waiting,
)
from mcp_support import (  # noqa: F401  (fixtures)
    REPO_ROOT,
    IndexedTree,
    anyio_backend_fixture,
    shared_tree_fixture,
)
from rifflux_testing import wait_until

from rifflux.mcp.http import MAX_REQUEST_BODY_BYTES

CAP = 3
FLOOD = 1000
SESSION_BYTES = 38_000
"""What one abandoned session cost before the cap (issue 20: 296 → 529 MB for 6,000)."""
IDLE_SECONDS = 1
REQUEST_TIMEOUT_SECONDS = 1
DISCONNECT_BOUND_S = 120.0
"""Generous bound on waiting for a 1 s deadline: it only ends a test whose server never
closes the connection."""
TRICKLE_EVERY_S = 0.3
"""Well within the request deadline: a deadline renewed by each byte would never pass."""
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def capped_server(shared_tree: IndexedTree) -> Iterator[HttpServer]:
    yield from start_http_server(shared_tree, RIFFLUX_HTTP_MAX_SESSIONS=str(CAP))


@pytest.fixture(scope="module")
def strict_server(
    shared_tree: IndexedTree, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HttpServer]:
    """Short idle timeout and request deadline, set through the environment; its log at
    DEBUG, where the SDK says when it closed an idle session."""
    yield from start_http_server(
        shared_tree,
        log=tmp_path_factory.mktemp("strict") / "server.log",
        RIFFLUX_LOG_LEVEL="DEBUG",
        RIFFLUX_HTTP_SESSION_IDLE_SECONDS=str(IDLE_SECONDS),
        RIFFLUX_HTTP_REQUEST_TIMEOUT_SECONDS=str(REQUEST_TIMEOUT_SECONDS),
    )


def initialize(client: httpx2.Client, url: str) -> str:
    """Open a session (and never close it); its id."""
    response = client.post(url, json=INITIALIZE, headers=MCP_HEADERS)
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


def ping(client: httpx2.Client, url: str, session_id: str) -> int:
    headers = MCP_HEADERS | {"mcp-session-id": session_id}
    return client.post(url, json=PING, headers=headers).status_code


# -- the session cap -------------------------------------------------------------------


def test_past_the_cap_the_least_recently_used_idle_session_is_closed(
    capped_server: HttpServer,
) -> None:
    url = capped_server.url
    with httpx2.Client(timeout=10) as client:
        first, second, third = (initialize(client, url) for _ in range(CAP))
        assert ping(client, url, first) == 200  # second is now the least recently used
        fourth = initialize(client, url)
        assert ping(client, url, second) == 404  # closed: "session not found"
        assert {ping(client, url, s) for s in (first, third, fourth)} == {200}
        # The client whose session was closed initializes again and is served.
        assert ping(client, url, initialize(client, url)) == 200


def test_a_session_with_a_request_in_flight_is_never_closed_for_room(
    capped_server: HttpServer,
) -> None:
    url = capped_server.url
    with httpx2.Client(timeout=10) as client:
        busy = initialize(client, url)
        idle = [initialize(client, url) for _ in range(CAP - 1)]
        stream_headers = {"Accept": "text/event-stream", "mcp-session-id": busy}
        # An open GET stream is a request in flight: busy is the oldest but not idle.
        with client.stream("GET", url, headers=stream_headers) as stream:
            assert stream.status_code == 200
            newcomers = [initialize(client, url) for _ in range(CAP - 1)]
            assert ping(client, url, busy) == 200
        assert {ping(client, url, s) for s in idle} == {404}
        assert {ping(client, url, s) for s in newcomers} == {200}


async def test_thousands_of_abandoned_sessions_stay_within_the_cap(
    capped_server: HttpServer,
) -> None:
    url = capped_server.url
    with httpx2.Client(timeout=10) as client:
        for _ in range(CAP * 10):  # Warm the allocator and fill the table.
            initialize(client, url)
        before = capped_server.rss_kb()
        for _ in range(FLOOD):
            initialize(client, url)
        growth = (capped_server.rss_kb() - before) * 1024
    # Uncapped, FLOOD sessions cost ~38 MB (measured 37.9 KB each); capped ~0.3 MB.
    assert growth < FLOOD * SESSION_BYTES / 8, f"RSS grew {growth / 1e6:.1f} MB"
    # A fresh client of the capped-out server is served, and sees the counts.
    async with http_session(url) as session:
        result = await session.call_tool("search_rifflux", {"query": "basil", "top_k": 2})
        assert not result.is_error, result.content
        assert result.structured_content is not None
        assert result.structured_content["count"] > 0
        status = (await session.call_tool("index_status", {})).structured_content
    assert status is not None
    assert status["http_sessions"]["max"] == CAP
    assert status["http_sessions"]["live"] <= CAP
    assert status["http_sessions"]["peak"] == CAP


def test_bodies_sent_a_byte_at_a_time_close_no_session(capped_server: HttpServer) -> None:
    url = capped_server.url
    with httpx2.Client(timeout=10) as client:
        honest = initialize(client, url)
        # Each would open a session; while its body is arriving it makes no room.
        with slow_bodies(capped_server.port, CAP * 3) as attackers:
            assert ping(client, url, honest) == 200
            assert ping(client, url, initialize(client, url)) == 200
            assert all(still_waiting(conn) for conn in attackers)


# -- idle sessions and slow requests ---------------------------------------------------


def test_a_session_idle_past_the_timeout_is_closed(strict_server: HttpServer) -> None:
    """The ping goes out once the server has logged the session's idle timeout: a ping
    before it would itself keep the session alive, however late the timer fired."""
    url = strict_server.url
    log = strict_server.log
    assert log is not None
    with httpx2.Client(timeout=10) as client:
        session_id = initialize(client, url)
        wait_until(lambda: f"Session {session_id} idle timeout" in log.read_text(), timeout=120)
        assert ping(client, url, session_id) == 404
        assert ping(client, url, initialize(client, url)) == 200


def read_until_closed(sock: socket.socket) -> bytes:
    """What arrives until the server closes (a reset after its answer ends it too: the
    server closed with trickled bytes unread)."""
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(4096):
            received += chunk
    return received


@contextlib.contextmanager
def trickling(sock: socket.socket) -> Iterator[None]:
    """Send one byte every ``TRICKLE_EVERY_S`` until the block ends or the server closes."""
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(TRICKLE_EVERY_S):
            try:
                sock.sendall(b"a")
            except OSError:
                return  # The server closed the connection.

    thread = threading.Thread(target=trickle, name="trickle", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize(
    "sent",
    [
        # A POST whose Content-Length promises a body that never comes.
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{",
        # A request head that never ends (slowloris).
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
        b"",  # A connection that sends nothing.
    ],
    ids=["partial-body", "partial-head", "silent"],
)
def test_a_request_not_sent_within_the_deadline_is_disconnected(
    strict_server: HttpServer, sent: bytes
) -> None:
    """A request still incomplete at the deadline gets 408 and the connection closes; a
    started one keeps trickling bytes until then (they do not extend the deadline)."""
    with socket.create_connection(("127.0.0.1", strict_server.port)) as sock:
        sock.settimeout(DISCONNECT_BOUND_S)
        sock.sendall(sent)
        with trickling(sock) if sent else contextlib.nullcontext():
            answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer


@pytest.mark.parametrize("extra", HEADS_OVER_THE_LIMITS.values(), ids=HEADS_OVER_THE_LIMITS)
def test_a_head_over_the_limits_gets_431(strict_server: HttpServer, extra: dict[str, str]) -> None:
    with httpx2.Client(timeout=30) as client:
        response = client.post(strict_server.url, json=INITIALIZE, headers=MCP_HEADERS | extra)
        assert response.status_code == 431, response.text
        assert "16384 bytes or 100 header fields" in response.text
        within = client.post(
            strict_server.url, json=INITIALIZE, headers=MCP_HEADERS | HEAD_WITHIN_THE_LIMITS
        )
        assert within.status_code == 200, within.text


def test_a_head_still_arriving_past_the_limit_gets_431(strict_server: HttpServer) -> None:
    with socket.create_connection(("127.0.0.1", strict_server.port)) as sock:
        sock.settimeout(DISCONNECT_BOUND_S)
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 17_000)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer


def test_a_body_over_the_limit_gets_413(strict_server: HttpServer) -> None:
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "'
    body += b"a" * MAX_REQUEST_BODY_BYTES + b'"}}'
    headers = MCP_HEADERS | {"Content-Type": "application/json"}
    response = httpx2.post(strict_server.url, content=body, headers=headers, timeout=30)
    assert response.status_code == 413


async def test_the_deadline_leaves_an_honest_client_alone(strict_server: HttpServer) -> None:
    async with http_session(strict_server.url) as session:
        for _ in range(3):
            result = await session.call_tool("search_rifflux", {"query": "sun water"})
            assert not result.is_error, result.content


# -- where it may listen ---------------------------------------------------------------


def test_listening_beyond_loopback_without_a_token_is_refused(shared_tree: IndexedTree) -> None:
    host = "0.0.0.0"  # The others (::, LAN addresses, names): test_mcp_http_unit.py.
    run = subprocess.run(
        [sys.executable, "-m", "rifflux.cli", "serve", "--transport", "http", "--host", host],
        env=shared_tree.env(PYTHONPATH=str(REPO_ROOT)),
        cwd=shared_tree.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert run.stderr.splitlines() == [
        f"rifflux: error: refusing to listen on {host} without RIFFLUX_HTTP_TOKEN: anyone "
        "who can reach the port could search and read your files; set RIFFLUX_HTTP_TOKEN "
        "or bind 127.0.0.1"
    ]
