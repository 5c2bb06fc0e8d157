"""A small asyncio HTTP/1.1 client for streaming benchmarks (standard library only).

Precision comes first: every read is timestamped with :func:`time.perf_counter`
the moment the event loop hands it over (inside ``data_received``), before any
parsing. De-chunking happens later, per batch of reads
(:meth:`Response.next_batch` returns ``[(arrival_time, bytes), ...]``).

* keep-alive pool per origin, no connection limit (one connection per
  concurrent request); :meth:`HttpClient.warm` opens connections ahead of time
  and records how long each connect took;
* ``Transfer-Encoding: chunked``, ``Content-Length`` and close-delimited bodies;
* timeouts: connect and write per call; the read timeout is the largest gap
  allowed between two reads of one response, checked by one watchdog per
  client (resolution ~1/8 of the timeout, at most 0.25 s) instead of a timer
  per read;
* ``http`` and ``https`` (``ssl`` from the standard library).

Errors are :class:`HTTPError` subclasses whose class names are the
benchmark's error types (``ConnectError``, ``ReadTimeout``, ...).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple
from urllib.parse import urlsplit

from tui.util.aio import cancel_and_wait

_pc = time.perf_counter

DEFAULT_READ_TIMEOUT = 600.0
USER_AGENT = "tunedeck-bench"
HEAD_LIMIT = 65536

#: A body piece with the ``perf_counter`` time its read arrived.
Piece = Tuple[float, bytes]


# ====================================================================== errors


class HTTPError(Exception):
    """Any failure of a request; the class name is the error type recorded for it."""


class InvalidURL(HTTPError, ValueError):
    pass


class ConnectError(HTTPError):
    pass


class RemoteProtocolError(HTTPError):
    pass


class TimeoutException(HTTPError):
    pass


class ConnectTimeout(TimeoutException):
    pass


class ReadTimeout(TimeoutException):
    pass


class WriteTimeout(TimeoutException):
    pass


# ====================================================================== URLs


class Origin(Tuple[str, str, int]):
    """``(scheme, host, port)``."""

    __slots__ = ()

    def __new__(cls, scheme: str, host: str, port: int) -> "Origin":
        return tuple.__new__(cls, (scheme, host, port))

    @property
    def scheme(self) -> str:
        return str(self[0])

    @property
    def host(self) -> str:
        return str(self[1])

    @property
    def port(self) -> int:
        return int(self[2])

    def host_header(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return h if self.port == default else f"{h}:{self.port}"


def split_url(url: str) -> Tuple[Origin, str]:
    """``http://h:p/path?q`` → (Origin, ``/path?q``). :class:`InvalidURL` names what is wrong."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as e:
        raise InvalidURL(f"{url!r}: {e}") from None
    if u.scheme not in ("http", "https"):
        raise InvalidURL(f"{url!r}: expected an http:// or https:// URL")
    if not u.hostname:
        raise InvalidURL(f"{url!r}: no host")
    if port is None:
        port = 443 if u.scheme == "https" else 80
    if not 0 < port < 65536:
        raise InvalidURL(f"{url!r}: port {port} is outside 1..65535")
    target = u.path or "/"
    if u.query:
        target += "?" + u.query
    return Origin(u.scheme, u.hostname, port), target


def base_url(url: str) -> str:
    """``http://h:p`` of a server URL, without a trailing ``/v1``."""
    u = url.rstrip("/")
    if u.endswith("/v1"):
        u = u[:-3]
    return u


# ====================================================================== connection


class _Conn(asyncio.Protocol):
    """One keep-alive connection. ``data_received`` only timestamps and stores."""

    __slots__ = (
        "drain_waiter",
        "eof",
        "exc",
        "last",
        "origin",
        "paused",
        "read_timeout",
        "rx",
        "transport",
        "uses",
        "waiter",
    )

    def __init__(self, origin: Origin) -> None:
        self.transport: Optional[asyncio.Transport] = None
        self.rx: List[Piece] = []
        self.waiter: "Optional[asyncio.Future[None]]" = None
        self.last = _pc()
        self.eof = False
        self.exc: Optional[BaseException] = None
        self.paused = False
        self.drain_waiter: "Optional[asyncio.Future[None]]" = None
        self.origin = origin
        self.uses = 0
        self.read_timeout: Optional[float] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        t = _pc()
        self.rx.append((t, data))
        self.last = t
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.eof = True
        if exc is not None and self.exc is None:
            self.exc = exc
        self._wake()
        d = self.drain_waiter
        if d is not None and not d.done():
            d.set_result(None)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        d = self.drain_waiter
        if d is not None and not d.done():
            d.set_result(None)

    def _wake(self) -> None:
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    def fail(self, exc: BaseException) -> None:
        """Abort the connection; the pending wait raises ``exc`` (watchdog)."""
        if self.exc is None:
            self.exc = exc
        self.eof = True
        if self.transport is not None:
            self.transport.abort()
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_exception(exc)

    async def wait(self) -> None:
        fut = asyncio.get_running_loop().create_future()
        self.waiter = fut
        await fut

    def take(self) -> List[Piece]:
        rx = self.rx
        self.rx = []
        return rx

    @property
    def usable(self) -> bool:
        return not self.eof and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.eof = True
        if self.transport is not None:
            self.transport.abort()


class Dechunk:
    """Incremental decoder of ``Transfer-Encoding: chunked``."""

    __slots__ = ("buf", "extra", "need", "state")

    def __init__(self) -> None:
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
                        raise RemoteProtocolError("chunk size line too long")
                    self.buf = data[pos:]
                    break
                try:
                    size = int(data[pos:i].split(b";", 1)[0], 16)
                except ValueError:
                    raise RemoteProtocolError("malformed chunk size line") from None
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
                    raise RemoteProtocolError("missing CRLF after chunk data")
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


# ====================================================================== request / response


class Request:
    """A request serialized ahead of time (building costs nothing during the timed phase)."""

    __slots__ = ("data", "method", "origin", "target", "url")

    def __init__(self, method: str, url: str, origin: Origin, target: str, data: bytes) -> None:
        self.method = method
        self.url = url
        self.origin = origin
        self.target = target
        self.data = data


class Response:
    """Status, headers and the streamed body of one response.

    :meth:`next_batch` returns every body piece received since the last call
    with the time its read arrived; :meth:`aread` reads the whole body.
    ``written``: ``perf_counter`` right after the request was handed to the socket.
    """

    def __init__(
        self,
        client: "HttpClient",
        conn: _Conn,
        status: int,
        reason: str,
        headers: List[Tuple[bytes, bytes]],
        first: List[Piece],
        *,
        chunked: bool,
        length: Optional[int],
        keepalive: bool,
        written: float,
    ) -> None:
        self._client = client
        self._conn = conn
        self.status = status
        self.reason = reason
        self.headers = headers
        self.written = written
        self.content = b""
        self._pending = first
        self._chunked = Dechunk() if chunked else None
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
        """
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
        self._client._release(self._conn, reuse=self._keepalive and self.complete)

    async def aclose(self) -> None:
        """Release the connection; an unfinished body drops it (so the server aborts the generation)."""
        if not self._closed:
            self._closed = True
            self._client._release(self._conn, reuse=self._keepalive and self.complete)


# ====================================================================== client


class HttpClient:
    """Keep-alive HTTP/1.1 client with no connection limit. Use as ``async with HttpClient() as c``.

    ``headers``: sent with every request (a request's own headers win).
    """

    def __init__(
        self,
        *,
        read_timeout: Optional[float] = DEFAULT_READ_TIMEOUT,
        connect_timeout: float = 10.0,
        write_timeout: float = 30.0,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self.write_timeout = write_timeout
        self.headers: Dict[str, str] = dict(headers or {})
        #: at most this many requests start writing per event-loop iteration (0: no limit), so a
        #: burst of sends (a wave of C=1,024) cannot hold back the reads of the responses already
        #: arriving, whose timestamps are taken when the loop hands them over
        self.sends_per_tick = 0
        self._sent_this_tick = 0
        self._tick_armed = False
        self._idle: Dict[Origin, List[_Conn]] = {}
        self._busy: Set[_Conn] = set()
        self._watchdog: "Optional[asyncio.Task[None]]" = None
        self._ssl: Optional[ssl.SSLContext] = None
        self.connections_opened = 0
        #: seconds each new connection took to open (TCP, plus TLS for https)
        self.connect_times: List[float] = []
        self._closed = False

    async def __aenter__(self) -> "HttpClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---------------------------------------------------------------- building
    async def send_turn(self) -> None:
        """Wait for this loop iteration's share of sends (:attr:`sends_per_tick`): the count is
        reset by a callback queued at the first send of an iteration, which runs at the start
        of the next one, before the requests that yielded for their turn."""
        if not self.sends_per_tick:
            return
        # a turn is one loop iteration (not an event): yield until the iteration's count was reset
        while self._sent_this_tick >= self.sends_per_tick:  # noqa: ASYNC110
            await asyncio.sleep(0)
        self._sent_this_tick += 1
        if not self._tick_armed:
            self._tick_armed = True
            asyncio.get_running_loop().call_soon(self._new_tick)

    def _new_tick(self) -> None:
        self._sent_this_tick = 0
        self._tick_armed = False

    def build(self, method: str, url: str, body: bytes = b"", headers: Optional[Mapping[str, str]] = None) -> Request:
        origin, target = split_url(url)
        hdrs: Dict[str, str] = {"host": origin.host_header(), "user-agent": USER_AGENT, "accept": "*/*"}
        for src in (self.headers, headers or {}):
            for k, v in src.items():
                hdrs[k.lower()] = v
        hdrs.pop("content-length", None)
        hdrs.pop("transfer-encoding", None)
        lines = [f"{method} {target} HTTP/1.1"]
        lines.extend(f"{k}: {v}" for k, v in hdrs.items())
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(f"content-length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return Request(method, url, origin, target, head + body)

    # ---------------------------------------------------------------- sending
    async def send(self, req: Request, *, read_timeout: Optional[float] = None) -> Response:
        """Write ``req`` and read the response head; the body is read with :meth:`Response.next_batch`."""
        if self._closed:
            raise ConnectError("client is closed")
        rt = self.read_timeout if read_timeout is None else read_timeout
        self._ensure_watchdog()
        for attempt in (0, 1):
            conn = self._pop_idle(req.origin)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(req.origin)
            conn.uses += 1
            conn.read_timeout = rt
            self._busy.add(conn)
            conn.rx = []
            conn.last = _pc()
            assert conn.transport is not None
            conn.transport.write(req.data)
            if conn.paused:
                await self._drain(conn)
            written = _pc()
            try:
                status, reason, headers, first = await self._read_head(conn)
            except RemoteProtocolError:
                self._release(conn, reuse=False)
                if reused and attempt == 0:
                    continue  # a stale keep-alive connection: once more on a fresh one
                raise
            except BaseException:
                self._release(conn, reuse=False)
                raise
            break
        assert conn is not None  # the loop ends only by ``break`` with a connection, or raises
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
                    self._release(conn, reuse=False)
                    raise RemoteProtocolError(f"bad Content-Length {v[:40]!r}") from None
            elif lk == b"connection" and v.lower() == b"close":
                keepalive = False
        if req.method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            length = 0
            chunked = False
        if chunked:
            length = None
        elif length is None:
            keepalive = False
        return Response(
            self,
            conn,
            status,
            reason,
            headers,
            first,
            chunked=chunked,
            length=length,
            keepalive=keepalive,
            written=written,
        )

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes = b"",
        headers: Optional[Mapping[str, str]] = None,
        timeout: float = 10.0,
        limit: int = 1 << 24,
    ) -> Response:
        """A whole request (body read, at most ``limit`` bytes) within ``timeout`` seconds overall."""
        req = self.build(method, url, body, headers)

        async def go() -> Response:
            r = await self.send(req, read_timeout=timeout)
            await r.aread(limit)
            return r

        try:
            return await asyncio.wait_for(go(), timeout)
        except asyncio.TimeoutError:
            raise ReadTimeout(f"{method} {url}: no complete answer within {timeout:g} s") from None

    async def get(self, url: str, *, timeout: float = 10.0) -> Response:
        return await self.request("GET", url, timeout=timeout)

    async def post_json(self, url: str, obj: Any, *, timeout: float = 10.0) -> Response:
        body = json.dumps(obj, separators=(",", ":")).encode()
        return await self.request("POST", url, body=body, headers={"content-type": "application/json"}, timeout=timeout)

    async def warm(self, url: str, n: int) -> List[float]:
        """Open connections to ``url``'s origin until ``n`` are idle in the pool; their connect times (s).

        A connection that fails to open is skipped (the request that needs it
        later reports the failure).
        """
        origin, _ = split_url(url)
        have = sum(1 for c in self._idle.get(origin, ()) if c.usable)
        need = max(0, n - have)
        if not need:
            return []
        times: List[float] = []

        async def one() -> None:
            t = _pc()
            try:
                conn = await self._connect(origin)
            except HTTPError:
                return
            times.append(_pc() - t)
            self._idle.setdefault(origin, []).append(conn)

        # at most 64 connects in flight: a burst of SYNs beyond the listen backlog only adds retries
        sem = asyncio.Semaphore(64)

        async def gated() -> None:
            async with sem:
                await one()

        await asyncio.gather(*(gated() for _ in range(need)))
        return times

    # ---------------------------------------------------------------- pool
    def _pop_idle(self, origin: Origin) -> Optional[_Conn]:
        pool = self._idle.get(origin)
        while pool:
            c = pool.pop()
            if c.usable and not c.rx:
                return c
            c.close()
        return None

    def idle_count(self, url: str) -> int:
        origin, _ = split_url(url)
        return sum(1 for c in self._idle.get(origin, ()) if c.usable)

    async def _connect(self, origin: Origin) -> _Conn:
        loop = asyncio.get_running_loop()
        ctx = None
        if origin.scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ctx = self._ssl
        t = _pc()
        try:
            _tr, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Conn(origin), origin.host, origin.port, ssl=ctx), self.connect_timeout
            )
        except asyncio.TimeoutError:
            raise ConnectTimeout(
                f"connect to {origin.host}:{origin.port} timed out after {self.connect_timeout:g} s"
            ) from None
        except ssl.SSLError as e:
            raise ConnectError(f"{origin.host}:{origin.port}: TLS: {e.reason or e}") from None
        except OSError as e:
            raise ConnectError(f"{origin.host}:{origin.port}: {e.strerror or e}") from None
        self.connect_times.append(_pc() - t)
        self.connections_opened += 1
        return conn

    async def _drain(self, conn: _Conn) -> None:
        async def wait_resumed() -> None:
            while conn.paused and not conn.eof:
                fut = asyncio.get_running_loop().create_future()
                conn.drain_waiter = fut
                await fut

        try:
            await asyncio.wait_for(wait_resumed(), self.write_timeout)
        except asyncio.TimeoutError:
            self._release(conn, reuse=False)
            raise WriteTimeout(f"request write timed out after {self.write_timeout:g} s") from None

    async def _read_head(self, conn: _Conn) -> Tuple[int, str, List[Tuple[bytes, bytes]], List[Piece]]:
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

    def _release(self, conn: _Conn, *, reuse: bool) -> None:
        self._busy.discard(conn)
        if reuse and conn.usable and not conn.rx and not self._closed:
            self._idle.setdefault(conn.origin, []).append(conn)
        else:
            conn.close()

    def _ensure_watchdog(self) -> None:
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            rts = [c.read_timeout for c in self._busy if c.read_timeout is not None]
            step = 0.25 if not rts else min(0.25, max(0.02, min(rts) / 8))
            await asyncio.sleep(step)
            now = _pc()
            for conn in list(self._busy):
                rt = conn.read_timeout
                if rt is not None and now - conn.last > rt:
                    conn.fail(ReadTimeout(f"no data for {rt:g} s"))
            if not self._busy:
                return  # idle (a dashboard probing once a second): the next send starts it again

    async def aclose(self) -> None:
        self._closed = True
        if self._watchdog is not None:
            await cancel_and_wait([self._watchdog], "HTTP client watchdog")
            self._watchdog = None
        for pool in self._idle.values():
            for c in pool:
                c.close()
        self._idle.clear()
        for c in list(self._busy):
            c.close()
        self._busy.clear()
