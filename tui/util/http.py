"""One small HTTP/1.1 request over asyncio streams (standard library only).

For control calls next to a server — ``/health``, ``/flush_cache``,
``/metrics`` — made by the startup tracker and the host-side A/B runtime, which
run with a bare host Python. Plain ``http://`` only; the body is read whole.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import List, Type
from urllib.parse import urlsplit

MAX_BODY = 8 * 1024 * 1024


class HttpError(Exception):
    """Connection refused, reset, timed out, or an answer that is not HTTP."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


async def request(method: str, url: str, *, timeout: float = 5.0, body: bytes = b"") -> Response:
    """``method url`` with ``Connection: close``; raises :class:`HttpError` on any failure."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise HttpError(f"{url}: only http://HOST:PORT/PATH is supported")
    host, port = parts.hostname, parts.port or 80
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
        f"Accept: */*\r\nContent-Length: {len(body)}\r\n"
        + ("Content-Type: application/json\r\n" if body else "")
        + "\r\n"
    ).encode("latin-1")

    async def go() -> Response:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(head + body)
            await writer.drain()
            raw = await reader.read(MAX_BODY + 65536)
            while True:
                more = await reader.read(65536)
                if not more or len(raw) > MAX_BODY:
                    break
                raw += more
        finally:
            writer.close()
        return _parse(raw, url)

    try:
        return await asyncio.wait_for(go(), timeout)
    except asyncio.TimeoutError:
        raise HttpError(f"{url}: no answer within {timeout:g} s") from None
    except OSError as e:
        raise HttpError(f"{url}: {e.strerror or e}") from None


def _parse(raw: bytes, url: str) -> Response:
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        raise HttpError(f"{url}: the connection closed before a complete answer")
    lines = head.split(b"\r\n")
    status_line = lines[0].split(None, 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/") or not status_line[1].isdigit():
        raise HttpError(f"{url}: not an HTTP answer ({lines[0][:60]!r})")
    chunked = any(ln.lower().startswith(b"transfer-encoding:") and b"chunked" in ln.lower() for ln in lines[1:])
    if not chunked:
        return Response(int(status_line[1]), rest)
    try:
        body = Dechunk().feed(rest)
    except HttpError as e:
        raise HttpError(f"{url}: {e}") from None
    return Response(int(status_line[1]), body)


class Dechunk:
    """Incremental decoder of ``Transfer-Encoding: chunked``: :meth:`feed` returns the body bytes
    of each piece as it comes; a malformed body raises ``error`` (the caller's error type)."""

    __slots__ = ("buf", "error", "extra", "need", "state")

    def __init__(self, error: Type[Exception] = HttpError) -> None:
        self.error = error
        self.state = 0  # 0 size line, 1 data, 2 CRLF after data, 3 trailers, 4 done
        self.need = 0
        self.buf = b""
        self.extra = b""

    def feed(self, data: bytes) -> bytes:
        if self.buf:
            data = self.buf + data
            self.buf = b""
        out: List[bytes] = []
        pos = 0
        n = len(data)
        while pos < n:
            st = self.state
            if st == 1:
                take = self.need if self.need < n - pos else n - pos
                out.append(data[pos : pos + take])
                pos += take
                self.need -= take
                if self.need == 0:
                    self.state = 2
            elif st == 0:
                i = data.find(b"\r\n", pos)
                if i < 0:
                    if n - pos > 1024:
                        raise self.error("chunk size line too long")
                    self.buf = data[pos:]
                    break
                try:
                    size = int(data[pos:i].split(b";", 1)[0], 16)
                except ValueError:
                    raise self.error("malformed chunk size line") from None
                pos = i + 2
                if size:
                    self.need = size
                    self.state = 1
                else:
                    self.state = 3
            elif st == 2:
                if n - pos < 2:
                    self.buf = data[pos:]
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise self.error("missing CRLF after chunk data")
                pos += 2
                self.state = 0
            elif st == 3:
                i = data.find(b"\r\n", pos)
                if i < 0:
                    self.buf = data[pos:]
                    break
                if i == pos:
                    self.state = 4
                pos = i + 2
            else:
                self.extra = data[pos:]
                break
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    @property
    def done(self) -> bool:
        return self.state == 4
