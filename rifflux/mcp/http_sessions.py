"""A cap on live streamable HTTP sessions: past it the least recently used idle one goes.

Every ``initialize`` over HTTP opens a session that the MCP SDK keeps (a transport, a
server task, memory streams: ~38 KB measured) until the client sends ``DELETE`` or the
session is idle for ``RIFFLUX_HTTP_SESSION_IDLE_SECONDS``. A client that never closes
its sessions grew a server from 296 to 529 MB with 6,000 of them. The SDK's
own ``max_sessions`` refuses new sessions (503) once full, so one careless client would
lock every other out; :class:`SessionLimiter` makes room instead.

Invariants:

- A session is *idle* when no HTTP request of it is in flight (an open GET stream is a
  request in flight, as in the SDK's idle timer). Only idle sessions are closed to make
  room, least recently used first; a busy session is never cut off. When every session
  is busy, the SDK's ``max_sessions`` (set to the same cap) answers 503.
- Sessions are counted, and closed, only through the SDK's public surface: the
  ``mcp-session-id`` header of each request and response, and a ``DELETE`` request (the
  protocol's own way to end a session) handed to the session manager. A closed
  session's id answers 404 "Session not found", and its client initializes again.
- Admission is serialised, and the sessions being opened count towards the cap: a burst
  of ``initialize`` requests closes as many idle sessions as it needs. The SDK's
  ``max_sessions`` is the hard bound; the table never holds a session the SDK refused.
- The idle timeout itself is the SDK's (``session_idle_timeout``); the table forgets an
  entry unused that long, so its counts match what the SDK holds.
- The table is changed on the event loop and read by ``index_status`` from a worker
  thread: its methods take a lock (none of them awaits).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import structlog
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = structlog.get_logger(__name__)

SESSION_HEADER = b"mcp-session-id"
"""The streamable HTTP transport's session header (lower case, as ASGI gives headers)."""

CloseSession = Callable[[str], Awaitable[None]]


@dataclass
class _Session:
    in_flight: int
    last_used: float


class SessionTable:
    """Live sessions in least-recently-used order, with their requests in flight.

    Plain data, no I/O: the limiter decides what to close, the table says which.
    """

    def __init__(self, idle_seconds: float) -> None:
        self.idle_seconds = idle_seconds
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()
        self.peak = 0
        """The most sessions ever live at once."""

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def opened(self, session_id: str, now: float) -> None:
        """A new session, whose opening request is still in flight."""
        with self._lock:
            self._sessions[session_id] = _Session(in_flight=1, last_used=now)
            self.peak = max(self.peak, len(self._sessions))

    def begin(self, session_id: str) -> None:
        """A request of ``session_id`` starts: the session is busy and most recent."""
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None:
                session.in_flight += 1
                self._sessions.move_to_end(session_id)

    def end(self, session_id: str, now: float) -> None:
        """A request of ``session_id`` ended (a session already forgotten is ignored)."""
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None:
                session.in_flight -= 1
                session.last_used = now
                self._sessions.move_to_end(session_id)

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def expire(self, now: float) -> list[str]:
        """Forget the idle sessions unused for ``idle_seconds`` (the SDK has closed them)."""
        with self._lock:
            expired = [
                session_id
                for session_id, session in self._sessions.items()
                if session.in_flight == 0 and now - session.last_used >= self.idle_seconds
            ]
            for session_id in expired:
                del self._sessions[session_id]
            return expired

    def least_recently_used_idle(self) -> str | None:
        """The idle session used longest ago, or None when every session is busy."""
        with self._lock:
            for session_id, session in self._sessions.items():
                if session.in_flight == 0:
                    return session_id
            return None


def _header(headers: object, name: bytes) -> str | None:
    for key, value in headers:  # type: ignore[attr-defined]
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class SessionLimiter:
    """ASGI middleware over the streamable HTTP app that keeps at most ``max_sessions``.

    ``close_session`` ends one session by its id (:func:`delete_session`); ``path`` is
    where the MCP endpoint is mounted (other paths pass through untouched).
    """

    def __init__(
        self,
        app: ASGIApp,
        close_session: CloseSession,
        *,
        path: str,
        max_sessions: int,
        idle_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.path = path
        self.max_sessions = max_sessions
        self._close_session = close_session
        self._clock = clock
        self._table = SessionTable(idle_seconds)
        self._opening = 0
        self._admission = anyio.Lock()
        self._at_cap = False

    def status(self) -> dict[str, int]:
        """``{live, peak, max}``: what ``index_status`` shows as ``http_sessions``."""
        self._table.expire(self._clock())
        return {"live": len(self._table), "peak": self._table.peak, "max": self.max_sessions}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        session_id = _header(scope["headers"], SESSION_HEADER)
        if session_id is None and scope["method"] == "POST":
            await self._open(scope, receive, send)
        elif session_id is not None and session_id in self._table:
            await self._serve(session_id, scope, receive, send)
        else:
            await self.app(scope, receive, send)  # The SDK answers (404 for an unknown id).

    async def _serve(self, session_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        status: int | None = None

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self._table.begin(session_id)
        try:
            await self.app(scope, receive, watch)
        finally:
            self._table.end(session_id, self._clock())
            ended = scope["method"] == "DELETE" and status is not None and status < 300
            if status == 404 or ended:
                self._table.forget(session_id)

    async def _open(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._make_room()
        opened: str | None = None
        answered = False

        async def watch(message: Message) -> None:
            nonlocal opened, answered
            if message["type"] == "http.response.start" and not answered:
                answered = True
                self._opening -= 1
                session_id = _header(message.get("headers", ()), SESSION_HEADER)
                if message["status"] < 400 and session_id is not None:
                    opened = session_id
                    self._table.opened(session_id, self._clock())
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if not answered:
                self._opening -= 1
            if opened is not None:
                self._table.end(opened, self._clock())

    async def _make_room(self) -> None:
        """Close idle sessions, least recently used first, until one more fits."""
        async with self._admission:
            self._table.expire(self._clock())
            while len(self._table) + self._opening >= self.max_sessions:
                victim = self._table.least_recently_used_idle()
                if victim is None:
                    break  # All busy: the SDK's own max_sessions answers 503.
                self._table.forget(victim)
                await self._close_session(victim)
                log.debug("mcp.http_session_closed", reason="lru", live=len(self._table))
            full = len(self._table) + self._opening + 1 >= self.max_sessions
            if full and not self._at_cap:
                log.warning(
                    "mcp.http_sessions_at_cap",
                    max_sessions=self.max_sessions,
                    hint="idle sessions are closed, least recently used first "
                    "(RIFFLUX_HTTP_MAX_SESSIONS)",
                )
            self._at_cap = full
            self._opening += 1


def delete_request(session_id: str, path: str) -> Scope:
    """The ASGI scope of ``DELETE path`` for one session, as a local client sends it."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "DELETE",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        # The DNS-rebinding check accepts a local host with any port.
        "headers": [(b"host", b"127.0.0.1:0"), (SESSION_HEADER, session_id.encode())],
        "client": None,
        "server": None,
        "state": {},
    }


def delete_session(handle_request: ASGIApp, path: str) -> CloseSession:
    """A :data:`CloseSession` that sends the session manager a ``DELETE`` for the session.

    ``handle_request`` is ``StreamableHTTPSessionManager.handle_request``: the transport
    terminates (its streams close, its server task ends) and the manager forgets it.
    """

    async def close(session_id: str) -> None:
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(message: Message) -> None:
            pass

        await handle_request(delete_request(session_id, path), receive, discard)

    return close


class InFlightLimiter:
    """ASGI middleware for the stateless transport: at most ``max_in_flight`` requests
    to ``path`` at once in this process; one more gets 503 at once.

    Stateless, no session outlives its request: what a client can make a process hold
    is its requests in flight (a transport, a server task and memory streams each), so
    ``RIFFLUX_HTTP_MAX_SESSIONS`` bounds those instead, per HTTP worker process. The
    transport reads each body whole before this sees the request
    (``rifflux.mcp.http.WholeBodyFirst``): a request still arriving holds no place.
    """

    def __init__(self, app: ASGIApp, *, path: str, max_in_flight: int) -> None:
        self.app = app
        self.path = path
        self.max_in_flight = max_in_flight
        self._in_flight = 0
        self.peak = 0

    def status(self) -> dict[str, int | str]:
        """``{live, peak, max, mode}``: requests in flight now, at most ever, the cap."""
        return {
            "live": self._in_flight,
            "peak": self.peak,
            "max": self.max_in_flight,
            "mode": "stateless",
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        if self._in_flight >= self.max_in_flight:
            response = PlainTextResponse(
                f"more than {self.max_in_flight} requests in flight "
                "(RIFFLUX_HTTP_MAX_SESSIONS); retry shortly",
                status_code=503,
                headers={"Retry-After": "1"},
            )
            await response(scope, receive, send)
            return
        self._in_flight += 1
        self.peak = max(self.peak, self._in_flight)
        try:
            await self.app(scope, receive, send)
        finally:
            self._in_flight -= 1
