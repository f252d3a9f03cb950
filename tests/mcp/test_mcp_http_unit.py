"""The HTTP transport's pieces in process: bind check, bearer parsing, settings, the
session table, the session cap over the SDK's real app under concurrent clients, and the
budget of request bodies still arriving."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import anyio
import httpx2
import pytest
from http_support import INITIALIZE, MCP_HEADERS
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    shared_tree_fixture,
)
from starlette.responses import PlainTextResponse
from starlette.types import Message, Receive, Scope, Send

from rifflux.config import Settings
from rifflux.errors import ConfigError
from rifflux.mcp.http import (
    MCP_PATH,
    WholeBodyFirst,
    bearer_credentials,
    check_bind,
    http_app,
    is_loopback,
    transport_security,
)
from rifflux.mcp.http_sessions import InFlightLimiter, SessionTable
from rifflux.mcp.server import build_server
from rifflux.mcp.tools import ToolContext


def test_dns_rebinding_protection_allows_local_hosts_and_the_bound_host() -> None:
    local = transport_security("127.0.0.1")
    assert local.enable_dns_rebinding_protection
    assert local.allowed_hosts == ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    assert "http://localhost:*" in local.allowed_origins
    assert "10.0.0.5:*" in transport_security("10.0.0.5").allowed_hosts
    assert transport_security("0.0.0.0").allowed_hosts == local.allowed_hosts


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("app.localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.0.0.5", False),
        ("192.168.1.20", False),
        ("fe80::1", False),
        ("example.org", False),
        ("localhost.example.org", False),
    ],
)
def test_only_loopback_addresses_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_bind_beyond_loopback_needs_a_token() -> None:
    check_bind("127.0.0.1", "")
    check_bind("0.0.0.0", "s3cret")
    for host in ("0.0.0.0", "::", "192.168.1.20", "example.org"):
        with pytest.raises(ConfigError) as refused:
            check_bind(host, "")
        assert str(refused.value) == (
            f"refusing to listen on {host} without RIFFLUX_HTTP_TOKEN: anyone who can reach "
            "the port could search and read your files; set RIFFLUX_HTTP_TOKEN or bind 127.0.0.1"
        )
    with pytest.raises(ConfigError, match="refusing to listen on all interfaces"):
        check_bind("", "")


@pytest.mark.parametrize(
    ("value", "token"),
    [
        (b"Bearer abc", b"abc"),
        (b"bearer abc", b"abc"),
        (b"BEARER abc", b"abc"),
        (b"  Bearer   abc  ", b"abc"),
        (b"Basic abc", None),
        (b"abc", None),
        (b"Bearerabc", None),
        (b"", None),
    ],
)
def test_the_bearer_scheme_is_case_insensitive(value: bytes, token: bytes | None) -> None:
    assert bearer_credentials(value) == token


def test_http_settings_defaults_and_environment() -> None:
    defaults = Settings.from_env({})
    assert defaults.http_max_sessions == 100
    assert defaults.http_session_idle_seconds == 600.0
    assert defaults.http_request_timeout_seconds == 30.0
    settings = Settings.from_env(
        {
            "RIFFLUX_HTTP_MAX_SESSIONS": "7",
            "RIFFLUX_HTTP_SESSION_IDLE_SECONDS": "1.5",
            "RIFFLUX_HTTP_REQUEST_TIMEOUT_SECONDS": "2",
        }
    )
    assert settings.http_max_sessions == 7
    assert settings.http_session_idle_seconds == 1.5
    assert settings.http_request_timeout_seconds == 2.0


def test_http_workers_default_to_the_usable_cpus() -> None:
    assert Settings.from_env({}).http_workers == len(os.sched_getaffinity(0))
    assert Settings.from_env({"RIFFLUX_HTTP_WORKERS": "3"}).http_workers == 3


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RIFFLUX_HTTP_MAX_SESSIONS", "0"),
        ("RIFFLUX_HTTP_SESSION_IDLE_SECONDS", "inf"),
        ("RIFFLUX_HTTP_SESSION_IDLE_SECONDS", "0"),
        ("RIFFLUX_HTTP_REQUEST_TIMEOUT_SECONDS", "nan"),
        ("RIFFLUX_HTTP_REQUEST_TIMEOUT_SECONDS", "-1"),
        ("RIFFLUX_HTTP_WORKERS", "0"),
    ],
)
def test_invalid_http_settings_are_refused_in_one_line(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"^{name}='{value}' is invalid: expected"):
        Settings.from_env({name: value})


def test_the_table_offers_the_least_recently_used_idle_session() -> None:
    table = SessionTable(idle_seconds=60)
    for at, session_id in enumerate(["a", "b", "c"]):
        table.opened(session_id, now=at)
        table.end(session_id, now=at)
    assert table.least_recently_used_idle() == "a"
    table.begin("a")  # a is busy, and now the most recent.
    assert table.least_recently_used_idle() == "b"
    table.begin("b")
    table.begin("c")
    assert table.least_recently_used_idle() is None  # All busy: nothing to close.
    table.end("b", now=10)
    assert table.least_recently_used_idle() == "b"
    table.forget("b")
    table.end("b", now=11)  # A request of a forgotten session ends: ignored.
    assert "b" not in table
    assert len(table) == 2
    assert table.peak == 3


def test_the_table_forgets_sessions_idle_past_the_timeout() -> None:
    table = SessionTable(idle_seconds=5)
    table.opened("old", now=0)
    table.end("old", now=0)
    table.opened("busy", now=0)  # Its opening request is still in flight.
    table.opened("new", now=3)
    table.end("new", now=3)
    assert table.expire(now=6) == ["old"]  # busy is in flight, new was used 3 s ago.
    assert ("old" in table, "busy" in table, "new" in table) == (False, True, True)


@pytest.fixture(name="capped_context")
def capped_context_fixture(shared_tree: IndexedTree) -> Iterator[ToolContext]:
    settings = shared_tree.settings().with_overrides(http_max_sessions=4)
    ctx = ToolContext.from_settings(settings, cwd=shared_tree.root)
    yield ctx
    ctx.close()


@pytest.mark.anyio
async def test_concurrent_initializes_never_exceed_the_cap(capped_context: ToolContext) -> None:
    server = build_server(capped_context.settings, context=capped_context)
    app, sessions = http_app(server, capped_context.settings, "127.0.0.1")
    transport = httpx2.ASGITransport(app=app)
    statuses: list[int] = []
    async with (
        server.session_manager.run(),
        httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client,
    ):

        async def initialize() -> None:
            response = await client.post(MCP_PATH, json=INITIALIZE, headers=MCP_HEADERS)
            statuses.append(response.status_code)

        for _ in range(5):
            async with anyio.create_task_group() as group:
                for _ in range(12):
                    group.start_soon(initialize)
            assert sessions.status()["live"] <= 4
        # Once the burst is over, every newcomer gets room (idle sessions are closed).
        for _ in range(10):
            await initialize()
    assert sessions.status() == {"live": 4, "peak": 4, "max": 4}
    # While all sessions are busy opening, the SDK's backstop answers 503; never more.
    assert set(statuses) <= {200, 503}
    assert statuses[-10:] == [200] * 10


@pytest.mark.anyio
async def test_stateless_requests_in_flight_past_the_cap_get_503() -> None:
    release = anyio.Event()
    entered = 0

    async def held(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal entered
        entered += 1
        await release.wait()
        await PlainTextResponse("ok")(scope, receive, send)

    limiter = InFlightLimiter(held, path=MCP_PATH, max_in_flight=2)
    transport = httpx2.ASGITransport(app=limiter)
    statuses: list[int] = []
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:

        async def post() -> None:
            statuses.append((await client.post(MCP_PATH, json={})).status_code)

        async with anyio.create_task_group() as group:
            group.start_soon(post)
            group.start_soon(post)
            while entered < 2:
                await anyio.sleep(0.01)
            await post()  # The third, while two are held.
            assert limiter.status() == {"live": 2, "peak": 2, "max": 2, "mode": "stateless"}
            release.set()
        await post()  # Room again once they ended.
    assert statuses == [503, 200, 200, 200]


class TricklingClient:
    """An ASGI client that sends 100 bytes of its body, then nothing until it leaves."""

    def __init__(self) -> None:
        self.chunks = [b"a" * 100]
        self.answers: list[Message] = []
        self.gone = anyio.Event()

    async def receive(self) -> Message:
        if self.chunks:
            return {"type": "http.request", "body": self.chunks.pop(), "more_body": True}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.answers.append(message)

    def status(self) -> int | None:
        return self.answers[0]["status"] if self.answers else None


async def wait_for(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_bodies_arriving_past_the_budget_close_the_oldest_first() -> None:
    served: list[bytes] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        served.append((await receive())["body"])
        await PlainTextResponse("ok")(scope, receive, send)

    guard = WholeBodyFirst(app, max_body_bytes=1000, max_arriving_bytes=250)
    scope: Scope = {"type": "http", "method": "POST", "path": MCP_PATH, "headers": []}
    first, second, third = slow = [TricklingClient() for _ in range(3)]
    async with anyio.create_task_group() as group:
        group.start_soon(guard, scope, first.receive, first.send)
        await wait_for(lambda: guard.arriving_bytes == 100)
        group.start_soon(guard, scope, second.receive, second.send)
        await wait_for(lambda: guard.arriving_bytes == 200)
        group.start_soon(guard, scope, third.receive, third.send)
        # 300 bytes arriving > 250: the oldest is closed, the others keep arriving.
        await wait_for(lambda: first.status() is not None)
        assert [client.status() for client in slow] == [408, None, None]
        assert guard.arriving_bytes == 200

        answers: list[Message] = []
        messages = iter([{"type": "http.request", "body": b"{}", "more_body": False}])

        async def receive_whole() -> Message:
            return next(messages, {"type": "http.disconnect"})

        async def record(message: Message) -> None:
            answers.append(message)

        await guard(scope, receive_whole, record)  # A whole body is served meanwhile.
        assert answers[0]["status"] == 200 and served == [b"{}"]
        second.gone.set()
        third.gone.set()
    assert [client.status() for client in slow] == [408, None, None]
    assert guard.arriving_bytes == 0
