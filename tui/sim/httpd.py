"""A small HTTP/1.1 server on asyncio streams (keep-alive, chunked streaming), enough for the sim.

No framework: one coroutine per connection, responses written straight to the
transport, so hundreds of concurrent SSE streams cost little CPU.
"""

from __future__ import annotations

import asyncio
import json
import time
from email.utils import formatdate
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

REASONS = {
    200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
    411: "Length Required", 413: "Payload Too Large", 422: "Unprocessable Entity", 500: "Internal Server Error",
    503: "Service Unavailable",
}
MAX_BODY = 64 << 20


class Request:
    __slots__ = ("method", "target", "path", "query", "version", "headers", "body", "peer")

    def __init__(self, method: str, target: str, version: str, headers: dict[str, str], body: bytes, peer: str) -> None:
        self.method = method
        self.target = target
        u = urlsplit(target)
        self.path = u.path
        self.query = {k: v[-1] for k, v in parse_qs(u.query).items()}
        self.version = version
        self.headers = headers
        self.body = body
        self.peer = peer

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else {}


_date_cache: tuple[int, str] = (0, "")


def http_date() -> str:
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True))
    return _date_cache[1]


class Conn:
    """The response side of one request."""

    __slots__ = ("writer", "req", "status", "started", "chunked", "keep_alive", "on_start")

    def __init__(self, writer: asyncio.StreamWriter, req: Request, keep_alive: bool,
                 on_start: Callable[[Request, int], None]) -> None:
        self.writer = writer
        self.req = req
        self.status = 0
        self.started = False
        self.chunked = False
        self.keep_alive = keep_alive
        self.on_start = on_start

    @property
    def closed(self) -> bool:
        return self.writer.is_closing()

    def _head(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        self.status = status
        self.started = True
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'OK')}", f"date: {http_date()}", "server: uvicorn"]
        lines += [f"{k}: {v}" for k, v in headers]
        if not self.keep_alive:
            lines.append("connection: close")
        self.on_start(self.req, status)
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        head = self._head(status, [("content-length", str(len(body))), ("content-type", content_type)])
        if self.req.method == "HEAD":
            body = b""
        self.writer.write(head + body)

    def send_json(self, status: int, obj: Any) -> None:
        self.send(status, json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))

    def start_stream(self, status: int = 200, content_type: str = "text/event-stream; charset=utf-8") -> None:
        self.chunked = True
        self.writer.write(self._head(status, [("content-type", content_type), ("transfer-encoding", "chunked")]))

    def write_chunk(self, data: bytes) -> bool:
        """Write one chunk now (no await). False when the client has gone."""
        if self.writer.is_closing():
            return False
        self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        return True

    def end_stream(self) -> None:
        if not self.writer.is_closing():
            self.writer.write(b"0\r\n\r\n")


Handler = Callable[[Request, Conn], Awaitable[None]]


class HttpServer:
    def __init__(self, handler: Handler, on_start: Callable[[Request, int], None]) -> None:
        self.handler = handler
        self.on_start = on_start
        self.server: asyncio.base_events.Server | None = None
        self.conns: set[asyncio.StreamWriter] = set()

    async def start(self, sock: Any) -> None:
        self.server = await asyncio.start_server(self._serve, sock=sock, limit=1 << 20, backlog=1024)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for w in list(self.conns):
            w.close()
        if self.server is not None:
            try:
                await asyncio.wait_for(self.server.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.conns.add(writer)
        peer = writer.get_extra_info("peername")
        peer_s = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "unknown"
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                try:
                    text = head.decode("latin-1")
                    first, *hlines = text.split("\r\n")
                    method, target, version = first.split(" ", 2)
                    headers = {}
                    for h in hlines:
                        if not h:
                            continue
                        k, _, v = h.partition(":")
                        headers[k.strip().lower()] = v.strip()
                except ValueError:
                    writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    return
                body = b""
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    body = await self._read_chunked(reader)
                    if body is None:
                        return
                else:
                    n = headers.get("content-length")
                    if n:
                        try:
                            size = int(n)
                        except ValueError:
                            return
                        if size > MAX_BODY:
                            writer.write(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                            return
                        try:
                            body = await reader.readexactly(size)
                        except (asyncio.IncompleteReadError, ConnectionError):
                            return
                keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
                req = Request(method, target, version, headers, body, peer_s)
                conn = Conn(writer, req, keep, self.on_start)
                try:
                    await self.handler(req, conn)
                except Exception as e:  # a bug in a route: answer 500, keep serving
                    if not conn.started:
                        conn.send_json(500, {"error": {"message": f"{type(e).__name__}: {e}", "type": "InternalServerError", "code": 500}})
                    else:
                        return
                try:
                    await writer.drain()
                except ConnectionError:
                    return
                if not keep or writer.is_closing():
                    return
        finally:
            self.conns.discard(writer)
            try:
                writer.close()
            except Exception:
                pass

    @staticmethod
    async def _read_chunked(reader: asyncio.StreamReader) -> bytes | None:
        out = bytearray()
        try:
            while True:
                line = await reader.readuntil(b"\r\n")
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    return bytes(out)
                out += await reader.readexactly(size)
                await reader.readexactly(2)
                if len(out) > MAX_BODY:
                    return None
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, ConnectionError):
            return None
