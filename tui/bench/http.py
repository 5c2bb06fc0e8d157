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

Errors are :class:`~tui.bench.httpcore.HTTPError` subclasses whose class names
are the benchmark's error types (``ConnectError``, ``ReadTimeout``, ...).

The parts: :mod:`tui.bench.httpcore` (errors, origins and URLs), :mod:`tui.bench.httppool`
(connections and the pool), :mod:`tui.bench.httpresponse` (the response head, its framing and
body); here the requests, built ahead of time, and the client that sends them.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Dict, List, Mapping, Optional

from tui.bench.httpcore import ConnectError, Origin, ReadTimeout, RemoteProtocolError, WriteTimeout, split_url
from tui.bench.httppool import Conn, Pool
from tui.bench.httpresponse import Response, body_framing, read_head

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
    async def send(self, req: Request, *, read_timeout: Optional[float] = None) -> Response:
        """Write ``req`` and read the response head; the body is read with :meth:`Response.next_batch`."""
        pool = self._pool
        if pool.closed:
            raise ConnectError("client is closed")
        rt = self.read_timeout if read_timeout is None else read_timeout
        pool.ensure_watchdog()
        for attempt in (0, 1):
            conn, reused = await pool.acquire(req.origin, rt)
            assert conn.transport is not None
            conn.transport.write(req.data)
            if conn.paused:
                await self._drain(conn)
            written = _pc()
            try:
                status, reason, headers, first = await read_head(conn)
            except RemoteProtocolError:
                pool.release(conn, reuse=False)
                if reused and attempt == 0:
                    continue  # a stale keep-alive connection: once more on a fresh one
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
