"""Reading a response of the benchmark's HTTP client (standard library only): its head
(:func:`read_head`), how its body is framed (:func:`body_framing`: ``Transfer-Encoding: chunked``,
``Content-Length`` or close-delimited) and the body itself, streamed as timed pieces
(:class:`Response`). De-chunking happens per batch of reads, after the timestamps were taken."""

from __future__ import annotations

import json
import time
from typing import Any, List, Optional, Tuple

from tunedeck.bench.httpcore import Piece, RemoteProtocolError, TimeoutException
from tunedeck.bench.httppool import Conn, Pool
from tunedeck.util.http import Dechunk

HEAD_LIMIT = 65536

_pc = time.perf_counter


async def read_head(conn: Conn) -> Tuple[int, str, List[Tuple[bytes, bytes]], List[Piece]]:
    """The status, reason, headers and the first body pieces of the response ``conn`` receives."""
    buf = b""
    while True:
        raw = conn.take()
        for i, (t, data) in enumerate(raw):
            buf += data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                continue
            head = buf[:end]
            rest = buf[end + 4 :]
            first: List[Piece] = [(t, rest)] if rest else []
            first.extend(raw[i + 1 :])
            lines = head.split(b"\r\n")
            parts = lines[0].split(b" ", 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
                raise RemoteProtocolError(f"malformed status line {lines[0][:80]!r}")
            try:
                status = int(parts[1])
            except ValueError:
                raise RemoteProtocolError(f"malformed status code {parts[1][:20]!r}") from None
            if status == 100:  # an interim answer: the real head follows
                buf = b""
                conn.rx[:0] = first
                break
            headers = []
            for line in lines[1:]:
                k, sep, v = line.partition(b":")
                if sep:
                    headers.append((k.strip(), v.strip()))
            reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
            return status, reason, headers, first
        else:
            if len(buf) > HEAD_LIMIT:
                raise RemoteProtocolError("response head too large")
            if isinstance(conn.exc, TimeoutException):
                raise conn.exc
            if conn.eof:
                raise RemoteProtocolError("server disconnected without sending a response")
            await conn.wait()


def body_framing(method: str, status: int, headers: List[Tuple[bytes, bytes]]) -> Tuple[bool, Optional[int], bool]:
    """(chunked, content length or None, keep-alive) of a response's body, by its headers."""
    chunked = False
    length: Optional[int] = None
    keepalive = True
    for k, v in headers:
        lk = k.lower()
        if lk == b"transfer-encoding" and b"chunked" in v.lower():
            chunked = True
        elif lk == b"content-length":
            try:
                length = int(v)
            except ValueError:
                raise RemoteProtocolError(f"bad Content-Length {v[:40]!r}") from None
        elif lk == b"connection" and v.lower() == b"close":
            keepalive = False
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        length = 0
        chunked = False
    if chunked:
        length = None
    elif length is None:
        keepalive = False
    return chunked, length, keepalive


class Response:
    """Status, headers and the streamed body of one response.

    :meth:`next_batch` returns every body piece received since the last call
    with the time its read arrived; :meth:`aread` reads the whole body.
    ``sent``: ``perf_counter`` right before the request's bytes were handed to the socket (on the
    connection that answered: a stale keep-alive connection's attempt does not count);
    ``written``: right after they were.
    """

    def __init__(
        self,
        pool: Pool,
        conn: Conn,
        status: int,
        reason: str,
        headers: List[Tuple[bytes, bytes]],
        first: List[Piece],
        *,
        chunked: bool,
        length: Optional[int],
        keepalive: bool,
        sent: float,
        written: float,
    ) -> None:
        self._pool = pool
        self._gate = pool.gate
        self._conn = conn
        self.status = status
        self.reason = reason
        self.headers = headers
        self.sent = sent
        self.written = written
        self.content = b""
        self._pending = first
        self._chunked = Dechunk(RemoteProtocolError) if chunked else None
        self._remaining = length
        self._keepalive = keepalive
        self.complete = length == 0
        self._closed = False

    @property
    def status_code(self) -> int:
        return self.status

    def header(self, name: str) -> Optional[str]:
        key = name.lower().encode()
        for k, v in self.headers:
            if k.lower() == key:
                return v.decode("latin-1")
        return None

    async def next_batch(self) -> Optional[List[Piece]]:
        """Timed body pieces; None at the end of the body.

        Raises :class:`RemoteProtocolError` when the peer closes before the body
        is complete and :class:`ReadTimeout` when the watchdog gave up on it.
        The client's :class:`~tunedeck.bench.httppool.Gate` is checked first: a loop iteration that
        hands many streams their batches lets a due send go between two of them.
        """
        g = self._gate
        t = _pc()
        if t >= g.due:
            g.fire(t)
        conn = self._conn
        while True:
            if self.complete:
                self._finish()
                return None
            if self._pending:
                raw = self._pending
                self._pending = []
            else:
                raw = conn.take()
            if raw:
                out = self._decode(raw)
                if out or self.complete:
                    return out if out else self._end_empty()
                continue
            if isinstance(conn.exc, TimeoutException):
                self._closed = True
                raise conn.exc
            if conn.eof:
                if self._chunked is None and self._remaining is None:
                    self.complete = True
                    continue
                self._closed = True
                raise RemoteProtocolError("peer closed connection without sending complete message body")
            await conn.wait()

    def _end_empty(self) -> Optional[List[Piece]]:
        self._finish()
        return None

    def _decode(self, raw: List[Piece]) -> List[Piece]:
        out: List[Piece] = []
        dc = self._chunked
        if dc is not None:
            for t, data in raw:
                if dc.state == 4:
                    break
                body = dc.feed(data)
                if body:
                    out.append((t, body))
            if dc.state == 4:
                self.complete = True
                if dc.extra:
                    self._keepalive = False
        elif self._remaining is not None:
            for t, data in raw:
                if len(data) >= self._remaining:
                    if len(data) > self._remaining:
                        self._keepalive = False
                    data = data[: self._remaining]
                    self._remaining = 0
                    if data:
                        out.append((t, data))
                    self.complete = True
                    break
                self._remaining -= len(data)
                out.append((t, data))
        else:
            out = raw
        return out

    async def aread(self, limit: Optional[int] = None) -> bytes:
        """The whole body (at most ``limit`` bytes; the connection is dropped after a cut)."""
        parts: List[bytes] = []
        size = 0
        try:
            while True:
                batch = await self.next_batch()
                if batch is None:
                    break
                for _t, data in batch:
                    parts.append(data)
                    size += len(data)
                if limit is not None and size >= limit:
                    break
        finally:
            await self.aclose()
        body = b"".join(parts)
        self.content = body[:limit] if limit is not None else body
        return self.content

    def json(self) -> Any:
        return json.loads(self.content)

    def _finish(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.release(self._conn, reuse=self._keepalive and self.complete)

    async def aclose(self) -> None:
        """Release the connection; an unfinished body drops it (so the server aborts the generation)."""
        if not self._closed:
            self._closed = True
            self._pool.release(self._conn, reuse=self._keepalive and self.complete)
