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
* ``http`` and ``https`` (``ssl`` from the standard library);
* :meth:`HttpClient.write_now` writes a request on an idle connection without waiting, from any
  callback (the scheduled sends the pool's :class:`~tunedeck.bench.httppool.Gate` fires);
  :meth:`HttpClient.send` then reads its response.

Errors are :class:`~tunedeck.bench.httpcore.HTTPError` subclasses whose class names
are the benchmark's error types (``ConnectError``, ``ReadTimeout``, ...).

The parts: :mod:`tunedeck.bench.httpcore` (errors, origins and URLs), :mod:`tunedeck.bench.httppool`
(connections and the pool), :mod:`tunedeck.bench.httpresponse` (the response head, its framing and
body); here the requests, built ahead of time, and the client that sends them.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Dict, List, Mapping, Optional

from tunedeck.bench.httpcore import ConnectError, Origin, ReadTimeout, RemoteProtocolError, WriteTimeout, split_url
from tunedeck.bench.httppool import Conn, Gate, Pool
from tunedeck.bench.httpresponse import Response, body_framing, read_head

_pc = time.perf_counter

DEFAULT_READ_TIMEOUT = 600.0
USER_AGENT = "tunedeck-bench"


class Request:
    """A request serialized ahead of time (building costs nothing during the timed phase)."""

    __slots__ = ("data", "method", "origin", "target", "url")

    def __init__(self, method: str, url: str, origin: Origin, target: str, data: bytes) -> None:
        self.method = method
        self.url = url
        self.origin = origin
        self.target = target
        self.data = data


class Written:
    """A request written on a connection (:meth:`HttpClient.write_now`, :meth:`HttpClient.write`),
    whose response :meth:`HttpClient.response` reads. ``sent``/``written``: ``perf_counter`` right
    before the request's bytes were handed to the socket and once all of them were; ``reused``:
    the connection had served a request before (it may have been closed by the server since)."""

    __slots__ = ("conn", "reused", "sent", "written")

    def __init__(self, conn: Conn, reused: bool, sent: float, written: float) -> None:
        self.conn = conn
        self.reused = reused
        self.sent = sent
        self.written = written


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
        self.write_timeout = write_timeout
        self.headers: Dict[str, str] = dict(headers or {})
        #: at most this many requests start writing per event-loop iteration (0: no limit), so a
        #: burst of sends (a wave of C=1,024) cannot hold back the reads of the responses already
        #: arriving, whose timestamps are taken when the loop hands them over
        self.sends_per_tick = 0
        self._sent_this_tick = 0
        self._tick_armed = False
        self._pool = Pool(connect_timeout=connect_timeout)

    @property
    def connections_opened(self) -> int:
        return self._pool.connections_opened

    @property
    def gate(self) -> Gate:
        """The gate every read of this client's connections checks (:class:`~tunedeck.bench.httppool.Gate`)."""
        return self._pool.gate

    @property
    def connect_times(self) -> List[float]:
        """Seconds each new connection took to open (TCP, plus TLS for https)."""
        return self._pool.connect_times

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
    def write_now(self, req: Request) -> Optional[Written]:
        """Write ``req`` on an idle connection to its origin at once (no await: callable from any
        callback, such as a :class:`~tunedeck.bench.httppool.Gate`'s); None when no idle connection
        is ready (:meth:`write` opens one). :meth:`response` reads the answer."""
        pool = self._pool
        if pool.closed:
            return None
        conn = pool.acquire_idle(req.origin, self.read_timeout)
        if conn is None:
            return None
        pool.ensure_watchdog()
        return self._write(conn, req, True)

    async def write(self, req: Request, *, read_timeout: Optional[float] = None) -> Written:
        """Write ``req`` on an idle connection, else on a new one (connect and write timeouts apply)."""
        pool = self._pool
        if pool.closed:
            raise ConnectError("client is closed")
        pool.ensure_watchdog()
        conn, reused = await pool.acquire(req.origin, self.read_timeout if read_timeout is None else read_timeout)
        w = self._write(conn, req, reused)
        if conn.paused:
            await self._drain(conn)
            w.written = _pc()
        return w

    def _write(self, conn: Conn, req: Request, reused: bool) -> Written:
        assert conn.transport is not None
        sent = _pc()
        conn.transport.write(req.data)  # the pool hands out open transports only (Conn.usable)
        return Written(conn, reused, sent, _pc())

    async def send(self, req: Request, *, read_timeout: Optional[float] = None) -> Response:
        """Write ``req`` and read the response head; the body is read with :meth:`Response.next_batch`."""
        return await self.response(req, await self.write(req, read_timeout=read_timeout), read_timeout=read_timeout)

    async def response(self, req: Request, w: Written, *, read_timeout: Optional[float] = None) -> Response:
        """The response head to ``req``, written as ``w``; the body is read with :meth:`Response.next_batch`.

        A reused keep-alive connection the server had closed gets the request once more, on a
        new connection (the response's ``sent`` is then that write's)."""
        pool = self._pool
        conn = w.conn
        if read_timeout is not None:
            conn.read_timeout = read_timeout
        while True:
            try:
                if conn.paused:  # written by write_now: the rest drains here
                    await self._drain(conn)
                    w.written = _pc()
                status, reason, headers, first = await read_head(conn)
            except RemoteProtocolError:
                pool.release(conn, reuse=False)
                if w.reused:  # a stale keep-alive connection: once more, and only once
                    w = await self.write(req, read_timeout=read_timeout)
                    w.reused = False
                    conn = w.conn
                    continue
                raise
            except BaseException:
                pool.release(conn, reuse=False)
                raise
            break
        try:
            chunked, length, keepalive = body_framing(req.method, status, headers)
        except RemoteProtocolError:
            pool.release(conn, reuse=False)
            raise
        return Response(
            pool,
            conn,
            status,
            reason,
            headers,
            first,
            chunked=chunked,
            length=length,
            keepalive=keepalive,
            sent=w.sent,
            written=w.written,
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
        return await self._pool.warm(origin, n)

    def idle_count(self, url: str) -> int:
        origin, _ = split_url(url)
        return self._pool.idle_count(origin)

    # ---------------------------------------------------------------- writing
    async def _drain(self, conn: Conn) -> None:
        async def wait_resumed() -> None:
            while conn.paused and not conn.eof:
                fut = asyncio.get_running_loop().create_future()
                conn.drain_waiter = fut
                await fut

        try:
            await asyncio.wait_for(wait_resumed(), self.write_timeout)
        except asyncio.TimeoutError:
            self._pool.release(conn, reuse=False)
            raise WriteTimeout(f"request write timed out after {self.write_timeout:g} s") from None

    async def aclose(self) -> None:
        await self._pool.aclose()
