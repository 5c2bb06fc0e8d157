"""A small HTTP/1.1 server on ``asyncio.Protocol`` (keep-alive, chunked streaming), enough for the sim.

No framework and no coroutine per connection or request. The transport hands the bytes
it read to :meth:`HttpProtocol.data_received`, which notes the time (the request's
*arrival*: when the server read it) and queues each complete request; the queue is
routed in one pass once the loop has read every socket that was ready, so a burst of
requests is stamped as it is read, not as each one gets its turn (and a long queue is
routed a slice at a time, with a loop turn in between). Handlers answer at
once or later (from a timer or the scheduler) by writing straight to the transport;
the next request on a keep-alive connection is read when the response has ended.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from email.utils import formatdate
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
MAX_HEAD = 1 << 20
MAX_BODY = 64 << 20
#: seconds of routing queued requests before the loop gets a turn to read its sockets again
ROUTE_SLICE_S = 0.0003
_STATUS_LINES = {s: f"HTTP/1.1 {s} {r}\r\n".encode("latin-1") for s, r in REASONS.items()}
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_TOO_LARGE = b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_END = b"0\r\n\r\n"


class Request:
    """One parsed request; ``arrival`` (``time.monotonic()``) and ``arrival_wall`` say when it was read."""

    __slots__ = ("_query", "arrival", "arrival_wall", "body", "headers", "method", "path", "peer", "target", "version")

    def __init__(
        self,
        method: str,
        target: str,
        version: str,
        headers: dict[str, str],
        body: bytes,
        peer: str,
        arrival: float = 0.0,
        arrival_wall: float = 0.0,
    ) -> None:
        self.method = method
        self.target = target
        plain = target[:1] == "/" and target[:2] != "//" and "?" not in target and "#" not in target
        self.path = target if plain else urlsplit(target).path
        self.version = version
        self.headers = headers
        self.body = body
        self.peer = peer
        self.arrival = arrival
        self.arrival_wall = arrival_wall
        self._query: dict[str, str] | None = None

    @property
    def query(self) -> dict[str, str]:
        if self._query is None:
            self._query = {k: v[-1] for k, v in parse_qs(urlsplit(self.target).query).items()}
        return self._query

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else {}


_date_cache: tuple[int, str] = (0, "")
_head_cache: tuple[int, bytes] = (0, b"")


def http_date() -> str:
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True))
    return _date_cache[1]


def _common_head() -> bytes:
    """The ``date`` and ``server`` lines every response carries (rebuilt once a second)."""
    global _head_cache
    now = int(time.time())
    if _head_cache[0] != now:
        _head_cache = (now, f"date: {formatdate(now, usegmt=True)}\r\nserver: uvicorn\r\n".encode("latin-1"))
    return _head_cache[1]


def frame(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked body."""
    return b"%x\r\n%b\r\n" % (len(data), data)


class Conn:
    """The response side of one request: writes go straight to the transport."""

    __slots__ = ("chunked", "finished", "keep_alive", "on_start", "proto", "req", "started", "status", "transport")

    def __init__(
        self, proto: "HttpProtocol", req: Request, keep_alive: bool, on_start: Callable[[Request, int], None]
    ) -> None:
        self.proto = proto
        self.transport = proto.transport
        self.req = req
        self.status = 0
        self.started = False
        self.chunked = False
        self.keep_alive = keep_alive
        self.finished = False
        self.on_start = on_start

    @property
    def closed(self) -> bool:
        return bool(self.transport.is_closing())

    def _head(self, status: int, headers: bytes) -> bytes:
        self.status = status
        self.started = True
        line = _STATUS_LINES.get(status) or f"HTTP/1.1 {status} OK\r\n".encode("latin-1")
        self.on_start(self.req, status)
        tail = b"\r\n" if self.keep_alive else b"connection: close\r\n\r\n"
        return line + _common_head() + headers + tail

    def send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        """A whole response with a ``content-length``; the connection is free again after it."""
        head = self._head(
            status, b"content-length: %d\r\ncontent-type: %b\r\n" % (len(body), content_type.encode("latin-1"))
        )
        if self.req.method == "HEAD":
            body = b""
        if not self.transport.is_closing():
            self.transport.write(head + body)
        self._finish()

    def send_json(self, status: int, obj: Any) -> None:
        self.send(status, json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))

    def start_stream(self, status: int = 200, content_type: str = "text/event-stream; charset=utf-8") -> None:
        self.chunked = True
        head = self._head(
            status, b"content-type: %b\r\ntransfer-encoding: chunked\r\n" % content_type.encode("latin-1")
        )
        if not self.transport.is_closing():
            self.transport.write(head)

    def write_chunk(self, data: bytes) -> bool:
        """Write one chunk now (no await). False when the client has gone."""
        return self.write_frames(b"%x\r\n%b\r\n" % (len(data), data))

    def write_frames(self, frames: bytes) -> bool:
        """Write chunks already framed (:func:`frame`) in one write. False when the client has gone."""
        t = self.transport
        if t.is_closing():
            return False
        t.write(frames)
        return True

    def end_stream(self, frames: bytes = b"") -> None:
        """Write the framed ``frames`` (if any) and the last chunk in one write; the response has ended."""
        if not self.transport.is_closing():
            self.transport.write(frames + _END)
        self._finish()

    def abort(self) -> None:
        """End an unfinished response by closing the connection (the client sees it cut)."""
        if not self.finished:
            self.finished = True
            self.transport.close()

    def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        self.proto.response_done(self.keep_alive)


Handler = Callable[[Request, Conn], None]


class HttpProtocol(asyncio.Protocol):
    """One connection: reads requests one at a time, each only after the previous response ended."""

    def __init__(self, server: "HttpServer") -> None:
        self.server = server
        self.transport: Any = None
        self.buf = bytearray()
        self.busy = False  # a request is being answered: the next one waits in ``buf``
        self.eof = False
        self.paused = False  # the transport's buffer is full: read on only once it has drained
        self.waiting = False  # a response ended while paused
        self.need = 0  # bytes the request in ``buf`` needs before it is complete (0: unknown)
        self.peer = "unknown"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"{peer[0]}:{peer[1]}"
        self.server.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.conns.discard(self)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.waiting:
            self.waiting = False
            self.busy = False
            if self.buf:
                self._parse(time.monotonic(), time.time())

    def eof_received(self) -> bool:
        self.eof = True
        return self.busy  # keep the transport open for the response being written

    def data_received(self, data: bytes) -> None:
        t_wall = time.time()
        t = time.monotonic()
        self.buf += data
        if not self.busy and len(self.buf) >= self.need:
            self._parse(t, t_wall)

    def response_done(self, keep_alive: bool) -> None:
        if not keep_alive or self.eof:
            self.transport.close()
            return
        if self.paused:
            self.waiting = True
            return
        self.busy = False
        if self.buf:
            self._parse(time.monotonic(), time.time())

    def _fail(self, answer: bytes = b"") -> None:
        if answer:
            self.transport.write(answer)
        self.busy = True  # read nothing more
        self.transport.close()

    def _parse(self, t: float, t_wall: float) -> None:
        """Take one complete request from ``buf`` (read at ``t``/``t_wall``) and queue it."""
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                self._fail()
            return
        try:
            first, *lines = buf[:end].decode("latin-1").split("\r\n")
            method, target, version = first.split(" ", 2)
            headers = {}
            for h in lines:
                if h:
                    k, _, v = h.partition(":")
                    headers[k.strip().lower()] = v.strip()
        except ValueError:
            self._fail(_BAD_REQUEST)
            return
        start = end + 4
        if headers.get("transfer-encoding", "").lower() == "chunked":
            try:
                got = _dechunk(buf, start)
            except ValueError:
                self._fail()
                return
            if got is None:
                return
            body, used = got
        else:
            n = headers.get("content-length")
            size = 0
            if n:
                try:
                    size = int(n)
                except ValueError:
                    self._fail()
                    return
                if size > MAX_BODY:
                    self._fail(_TOO_LARGE)
                    return
            if len(buf) < start + size:
                self.need = start + size
                return
            body = bytes(buf[start : start + size])
            used = start + size
        del buf[:used]
        self.need = 0
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        self.busy = True
        self.server.queue(self, Request(method, target, version, headers, body, self.peer, t, t_wall), keep)


def _dechunk(buf: bytearray, pos: int) -> tuple[bytes, int] | None:
    """A chunked request body at ``buf[pos:]``: (body, end offset), None while incomplete."""
    out = bytearray()
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";")[0].strip(), 16)
        pos = eol + 2
        if size == 0:
            eol = buf.find(b"\r\n", pos)  # no trailers expected: the empty line ends the body
            return None if eol < 0 else (bytes(out), eol + 2)
        if len(buf) < pos + size + 2:
            return None
        out += buf[pos : pos + size]
        pos += size + 2
        if len(out) > MAX_BODY:
            raise ValueError("chunked body too large")


class HttpServer:
    """Accepts connections on a bound socket and routes each request to ``handler`` (which must not block)."""

    def __init__(self, handler: Handler, on_start: Callable[[Request, int], None]) -> None:
        self.handler = handler
        self.on_start = on_start
        self.server: asyncio.base_events.Server | None = None
        self.conns: set[HttpProtocol] = set()
        self.loop: Any = None
        self.ready: deque[tuple[HttpProtocol, Request, bool]] = deque()

    async def start(self, sock: Any) -> None:
        self.loop = asyncio.get_running_loop()
        self.server = await self.loop.create_server(lambda: HttpProtocol(self), sock=sock, backlog=1024)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for p in list(self.conns):
            if p.transport is not None:
                p.transport.close()
        if self.server is not None:
            try:
                await asyncio.wait_for(self.server.wait_closed(), 2)
            except asyncio.TimeoutError:
                log.warning("the simulator's listener did not close within 2 s")

    def queue(self, proto: HttpProtocol, req: Request, keep_alive: bool) -> None:
        """Route ``req`` soon: after the loop has read every socket that was ready with it."""
        if not self.ready:
            self.loop.call_soon(self._dispatch)
        self.ready.append((proto, req, keep_alive))

    def _dispatch(self) -> None:
        """Route queued requests for ``ROUTE_SLICE_S``, then give the loop a turn (it reads and stamps more)."""
        ready = self.ready
        until = time.monotonic() + ROUTE_SLICE_S
        while ready:
            proto, req, keep = ready.popleft()
            if not proto.transport.is_closing():  # else the client left before its request was routed
                self._route(proto, req, keep)
            if time.monotonic() >= until:
                break
        if ready:
            self.loop.call_soon(self._dispatch)

    def _route(self, proto: HttpProtocol, req: Request, keep_alive: bool) -> None:
        conn = Conn(proto, req, keep_alive, self.on_start)
        try:
            self.handler(req, conn)
        except Exception as e:  # a bug in a route: answer 500, keep serving
            log.error("route %s %s failed", req.method, req.path, exc_info=True)
            if not conn.started:
                conn.send_json(
                    500, {"error": {"message": f"{type(e).__name__}: {e}", "type": "InternalServerError", "code": 500}}
                )
            else:
                conn.abort()
