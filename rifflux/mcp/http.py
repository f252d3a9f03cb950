"""The streamable HTTP transport: who may connect, for how long, with how much.

Layers of the app, outermost first, each refusing before anything behind it runs:

1. :class:`RequestDeadlineProtocol` (uvicorn's HTTP/1.1 protocol): a request's head and
   body must arrive within ``RIFFLUX_HTTP_REQUEST_TIMEOUT_SECONDS`` of its first byte
   (of the connection, for the first request), else the client gets 408 and the
   connection is closed. Uvicorn alone waits forever for a head sent one byte a second,
   or for a body that a ``Content-Length`` promised and never came. Between requests
   uvicorn's keep-alive timeout (``KEEP_ALIVE_SECONDS``) closes idle connections. A head
   still incomplete past ``MAX_HEAD_BYTES`` is refused by h11, answered 431 here.
2. :class:`HeadLimitMiddleware`: a complete head over ``MAX_HEAD_BYTES`` or with more
   than ``MAX_HEADERS`` fields gets 431 (h11 bounds only heads still arriving: one that
   arrives whole in a single read passes it at any size).
3. :class:`BearerTokenMiddleware`: with ``RIFFLUX_HTTP_TOKEN`` set, every request needs
   ``Authorization: Bearer <token>`` (the scheme in any case, RFC 9110 §11.1; the token
   compared in constant time), else 401.
4. :class:`WholeBodyFirst`: the request's whole body is read (over
   ``MAX_REQUEST_BODY_BYTES``: 413) before anything behind it sees the request, so the
   caps below count only requests that have fully arrived. A client sending its body a
   byte at a time holds its own connection until the deadline, never a place under a
   cap that honest clients need; bodies still arriving hold at most
   ``MAX_ARRIVING_BODY_BYTES`` per process (past it the oldest gets 408).
5. :class:`~rifflux.mcp.http_sessions.SessionLimiter`: at most
   ``RIFFLUX_HTTP_MAX_SESSIONS`` live sessions; the least recently used idle one is
   closed to make room (with several HTTP workers,
   :class:`~rifflux.mcp.http_sessions.InFlightLimiter`: at most that many requests in
   flight per worker).
6. The MCP SDK's streamable HTTP app: DNS-rebinding protection (local ``Host`` and
   ``Origin`` only, plus the bound address when it is a specific one), its own body
   limit (the same ``MAX_REQUEST_BODY_BYTES``), and a session idle for
   ``RIFFLUX_HTTP_SESSION_IDLE_SECONDS`` is closed.

Right behind the head limit, ``GET /health`` (:class:`HealthRoute`) answers
``{"status": "ok", "name": "rifflux", "version", "mcp_path"}`` without a token: it says
only that a Rifflux server answers here, for a supervisor or a person checking the port.

A server that would listen beyond loopback without ``RIFFLUX_HTTP_TOKEN`` does not
start (:func:`check_bind`, which ``run_server`` calls before anything else): anyone who
can reach the port could search and read the indexed files. The Host check is no
authentication: it stops a browser page, not a client that sends any header it likes.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, ClassVar

import anyio
import structlog
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from rifflux import __version__
from rifflux.config import Settings
from rifflux.errors import ConfigError
from rifflux.mcp.http_sessions import InFlightLimiter, SessionLimiter, delete_session
from rifflux.mcp.tools import ToolContext

log = structlog.get_logger(__name__)

MCP_PATH = "/mcp"
"""Where the streamable HTTP endpoint is mounted."""
HEALTH_PATH = "/health"
"""Where :class:`HealthRoute` answers, token or not."""
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
"""Hosts the DNS-rebinding protection accepts (any port)."""
MAX_REQUEST_BODY_BYTES = 1024 * 1024
"""A larger request body gets 413 before it is parsed (the biggest tool call, a
``reindex`` with a long ``paths`` list, is a few KB)."""
MAX_ARRIVING_BODY_BYTES = 32 * MAX_REQUEST_BODY_BYTES
"""What the request bodies still arriving may hold together in one process; past it the
one that started first gets 408 (:class:`WholeBodyFirst`)."""
MAX_HEAD_BYTES = 16 * 1024
"""A request head (request line and header fields) over this gets 431; an MCP client's
is a few hundred bytes, a bearer token included."""
MAX_HEADERS = 100
"""A request head with more header fields than this gets 431 (an MCP client sends ~10)."""
KEEP_ALIVE_SECONDS = 5
"""How long a connection may sit idle between requests (uvicorn's default, made explicit)."""
READY_POLL_SECONDS = 0.05
"""How often ``serve_http`` looks whether uvicorn has started, to say it serves."""
SDK_SESSION_LOGGERS = ("mcp.server.streamable_http", "mcp.server.streamable_http_manager")
"""They log two INFO lines per session opened and closed: shown at DEBUG only, so a
client that opens thousands of sessions does not write thousands of log lines."""


# -- who may listen where --------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds only the loopback interface: ``localhost`` (and names under
    it, RFC 6761), ``127.0.0.0/8`` or ``::1``. ``0.0.0.0``, ``::`` and ``""`` bind every
    interface; any other name may resolve to anything, so it counts as non-loopback."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str) -> None:
    """Refuse to listen beyond loopback without a bearer token (one line, what to do)."""
    if not token and not is_loopback(host):
        shown = host or "all interfaces"
        raise ConfigError(
            f"refusing to listen on {shown} without RIFFLUX_HTTP_TOKEN: anyone who can "
            "reach the port could search and read your files; set RIFFLUX_HTTP_TOKEN "
            "or bind 127.0.0.1"
        )


def transport_security(host: str) -> TransportSecuritySettings:
    """DNS-rebinding protection: local Host/Origin headers, plus ``host`` if specific."""
    hosts = list(LOCAL_HOSTS)
    bound = f"[{host}]" if ":" in host else host
    if bound not in hosts and host not in ("0.0.0.0", "::", ""):
        hosts.append(bound)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{h}:*" for h in hosts],
        allowed_origins=[f"http://{h}:*" for h in hosts],
    )


# -- who may call ----------------------------------------------------------------------


def bearer_credentials(value: bytes) -> bytes | None:
    """The token of an ``Authorization`` value whose scheme is ``Bearer`` in any case."""
    scheme, _, credentials = value.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return credentials.lstrip(b" ")


class BearerTokenMiddleware:
    """Answers 401 to every HTTP request without ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = token.encode()

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                credentials = bearer_credentials(value)
                return credentials is not None and hmac.compare_digest(credentials, self._expected)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._authorized(scope):
            response = PlainTextResponse(
                "missing or invalid bearer token (set Authorization: Bearer <RIFFLUX_HTTP_TOKEN>)",
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="rifflux"'},
            )
            await response(scope, receive, send)
            return
        if scope["type"] == "websocket" and not self._authorized(scope):
            await send({"type": "websocket.close", "code": 1008})
            return
        await self.app(scope, receive, send)


# -- how big a request may be ---------------------------------------------------------

HEAD_TOO_LARGE = (
    f"request head over {MAX_HEAD_BYTES} bytes or {MAX_HEADERS} header fields; "
    "send fewer or shorter headers"
)


def head_size(scope: Scope) -> int:
    """The bytes of the request line and header fields as parsed (h11 drops the
    whitespace around values, so a client's own count may be a little higher)."""
    query = scope["query_string"]
    target = len(scope["raw_path"]) + (len(query) + 1 if query else 0)
    line = len(scope["method"]) + 1 + target + len(" HTTP/1.1\r\n")
    fields = sum(len(name) + len(value) + len(": \r\n") for name, value in scope["headers"])
    return line + fields + len("\r\n")


class HeadLimitMiddleware:
    """Answers 431 to a request whose head is over ``MAX_HEAD_BYTES`` or has more than
    ``MAX_HEADERS`` fields, and closes its connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (
            len(scope["headers"]) > MAX_HEADERS or head_size(scope) > MAX_HEAD_BYTES
        ):
            status = HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
            response = PlainTextResponse(
                HEAD_TOO_LARGE, status_code=status.value, headers={"Connection": "close"}
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


@dataclass
class _Arriving:
    """A request whose body is still arriving: its bytes so far, and how to stop it."""

    size: int = 0
    cancel: anyio.CancelScope = field(default_factory=anyio.CancelScope)


class WholeBodyFirst:
    """Reads each request's whole body before ``app`` sees the request, then replays it.

    Invariants:

    - The limiters behind count a request from the moment they see it; with the body
      read first, a request counts only once it has fully arrived. A client that
      trickles its body holds nothing but its own connection, until the request deadline
      (408) or the budget below closes it.
    - The bodies still arriving in this process hold at most ``max_arriving_bytes``
      together: past it the request whose body started arriving first gets 408 and its
      connection closes, until the rest fits. An honest body arrives in milliseconds, so
      the oldest is the slowest sender's.
    - A body over ``max_body_bytes`` gets 413 as soon as it is declared or read; a client
      that leaves before its body arrived gets no answer.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int, max_arriving_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_arriving_bytes = max_arriving_bytes
        self._arriving: dict[int, _Arriving] = {}  # Insertion order: oldest first.
        self._arriving_bytes = 0

    @property
    def arriving_bytes(self) -> int:
        """The bytes held now by bodies still arriving."""
        return self._arriving_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._declared_size(scope) > self.max_body_bytes:
            await self._refuse(scope, receive, send, HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
            return
        body = bytearray()
        arriving = _Arriving()
        self._arriving[id(arriving)] = arriving
        try:
            with arriving.cancel:
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return  # The client left (or the deadline closed it) first.
                    chunk = message.get("body", b"")
                    body += chunk
                    if len(body) > self.max_body_bytes:
                        await self._refuse(
                            scope, receive, send, HTTPStatus.REQUEST_ENTITY_TOO_LARGE
                        )
                        return
                    if not message.get("more_body", False):
                        break
                    arriving.size += len(chunk)
                    self._arriving_bytes += len(chunk)
                    self._make_room()
        finally:
            self._forget(arriving)
        if arriving.cancel.cancelled_caught:
            await self._refuse(scope, receive, send, HTTPStatus.REQUEST_TIMEOUT)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    def _make_room(self) -> None:
        """Stop the oldest bodies still arriving until the rest fit the budget."""
        while self._arriving_bytes > self.max_arriving_bytes:
            oldest = next(iter(self._arriving.values()))
            self._forget(oldest)
            oldest.cancel.cancel()
            log.debug("mcp.http_slow_body_closed", arriving_bytes=self._arriving_bytes)

    def _forget(self, arriving: _Arriving) -> None:
        if self._arriving.pop(id(arriving), None) is not None:
            self._arriving_bytes -= arriving.size

    @staticmethod
    def _declared_size(scope: Scope) -> int:
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0  # h11 has already refused a malformed Content-Length.
        return 0

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, status: HTTPStatus) -> None:
        text = (
            f"request body over {self.max_body_bytes} bytes; send a smaller request"
            if status is HTTPStatus.REQUEST_ENTITY_TOO_LARGE
            else "request body arriving too slowly while others waited; send it at once"
        )
        response = PlainTextResponse(
            text, status_code=status.value, headers={"Connection": "close"}
        )
        await response(scope, receive, send)


class HealthRoute:
    """``GET``/``HEAD /health``: a small JSON status, before the bearer check. It holds
    nothing private (no path, no index content, no settings), so it needs no token."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._body = {
            "status": "ok",
            "name": "rifflux",
            "version": __version__,
            "mcp_path": MCP_PATH,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != HEALTH_PATH:
            await self.app(scope, receive, send)
            return
        response: Response
        if scope["method"] in ("GET", "HEAD"):
            response = JSONResponse(self._body, headers={"Cache-Control": "no-store"})
        else:
            response = PlainTextResponse(
                f"{HEALTH_PATH} answers GET only", status_code=405, headers={"Allow": "GET, HEAD"}
            )
        await response(scope, receive, send)


# -- how long a request may take to arrive ---------------------------------------------


class RequestDeadlineProtocol(H11Protocol):
    """Uvicorn's h11 protocol with a deadline on reading each request.

    The timer starts when the connection opens and whenever the first byte of a new
    request arrives; it stops once the request's body has been read. When it fires, a
    request that has no response yet is answered 408; the connection is closed either
    way, and a handler still waiting for the body sees ``http.disconnect``. A head that
    h11 refuses for growing past ``MAX_HEAD_BYTES`` unfinished is answered 431, as
    :class:`HeadLimitMiddleware` answers a finished one.
    """

    request_timeout: ClassVar[float] = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._armed_during: object = None  # The request (cycle) current when armed.

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # The first byte of the next request.
        super().data_received(data)
        cycle = self.cycle
        if (
            self._deadline is not None
            and cycle is not None
            and cycle is not self._armed_during
            and not cycle.more_body
        ):
            self._disarm()  # Head and body are in: the request is the app's now.

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._armed_during = self.cycle
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self.request_timeout, self._on_deadline)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _on_deadline(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        answered = cycle is not None and cycle is not self._armed_during and cycle.response_started
        if not answered:
            self._answer(
                HTTPStatus.REQUEST_TIMEOUT,
                f"request not received within {self.request_timeout:g} s",
            )
        log.info("mcp.http_request_timeout", client=self.client, seconds=self.request_timeout)
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """h11 refused the request; 431 when it refused a head still incomplete past
        ``MAX_HEAD_BYTES`` (its receive buffer holds what it could not parse)."""
        pending, _ = self.conn.trailing_data
        if len(pending) <= MAX_HEAD_BYTES:
            super().send_400_response(msg)
            return
        self._disarm()
        self._answer(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, HEAD_TOO_LARGE)
        self.transport.close()

    def _answer(self, status: HTTPStatus, text: str) -> None:
        """Write a whole plain-text response that says the connection closes."""
        body = f"{text}\n".encode()
        self.transport.write(
            f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode()
            + b"content-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )


def deadline_protocol(seconds: float) -> type[RequestDeadlineProtocol]:
    """:class:`RequestDeadlineProtocol` with ``seconds`` as its deadline."""
    return type("RequestDeadlineProtocol", (RequestDeadlineProtocol,), {"request_timeout": seconds})


# -- the app and the server ------------------------------------------------------------


def http_app(
    server: MCPServer, settings: Settings, host: str, *, stateless: bool = False
) -> tuple[ASGIApp, SessionLimiter | InFlightLimiter]:
    """The streamable HTTP app at ``/mcp`` behind the layers of this module (the bearer
    check only when a token is set); and its limiter, whose ``status()`` is
    ``index_status``'s ``http_sessions``.

    ``stateless``: the SDK's stateless mode with JSON responses (no session outlives its
    request, so any process may answer any request: several HTTP workers), capped by
    requests in flight; else sessions, capped by :class:`SessionLimiter`.
    """
    sdk_app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=stateless,
        stateless_http=stateless,
        transport_security=transport_security(host),
        host=host,
        max_request_body_size=MAX_REQUEST_BODY_BYTES,
        session_idle_timeout=settings.http_session_idle_seconds,
        # A backstop behind the limiter: 503 only when every session is busy.
        max_sessions=settings.http_max_sessions,
    )
    limiter: SessionLimiter | InFlightLimiter
    if stateless:
        limiter = InFlightLimiter(sdk_app, path=MCP_PATH, max_in_flight=settings.http_max_sessions)
    else:
        limiter = SessionLimiter(
            sdk_app,
            delete_session(server.session_manager.handle_request, MCP_PATH),
            path=MCP_PATH,
            max_sessions=settings.http_max_sessions,
            idle_seconds=settings.http_session_idle_seconds,
        )
    app: ASGIApp = WholeBodyFirst(limiter, MAX_REQUEST_BODY_BYTES, MAX_ARRIVING_BODY_BYTES)
    if settings.http_token:
        app = BearerTokenMiddleware(app, settings.http_token)
    return HeadLimitMiddleware(HealthRoute(app)), limiter


async def serve_http(
    server: MCPServer,
    context: ToolContext,
    host: str,
    port: int,
    *,
    sock: socket.socket | None = None,
    stateless: bool = False,
    on_ready: Callable[[], None] | None = None,
    worker: int | None = None,
) -> None:
    """Serve ``server`` on ``host:port`` until stopped; ``index_status`` then also shows
    the live sessions (``http_sessions``).

    ``sock``: an already listening socket to accept on instead of binding (an HTTP
    worker's, shared with the others); ``on_ready`` is called once it accepts;
    ``worker`` names the HTTP worker in the log."""
    settings = context.settings
    if settings.log_level != "DEBUG":
        for name in SDK_SESSION_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    app, limiter = http_app(server, settings, host, stateless=stateless)
    context.http_sessions = limiter.status
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=deadline_protocol(settings.http_request_timeout_seconds),
        ws="none",  # MCP has no WebSocket transport; an upgrade stays a plain request.
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        log_config=None,
        log_level=settings.log_level.lower(),
        access_log=False,
    )
    uvicorn_server = uvicorn.Server(config)

    async def announce() -> None:
        while not uvicorn_server.started:
            if uvicorn_server.should_exit:
                return
            await asyncio.sleep(READY_POLL_SECONDS)
        log.info(
            "mcp.http_serving",
            url=f"http://{host}:{port}{MCP_PATH}",
            pid=os.getpid(),
            worker=worker,
            stateless=stateless,
            bearer_token=bool(settings.http_token),
            max_sessions=settings.http_max_sessions,
            session_idle_seconds=settings.http_session_idle_seconds,
            request_timeout_seconds=settings.http_request_timeout_seconds,
        )
        if on_ready is not None:
            on_ready()

    announcer = asyncio.create_task(announce())
    try:
        await uvicorn_server.serve(sockets=None if sock is None else [sock])
    finally:
        announcer.cancel()
