"""The streaming benchmark client: httpx with a lean HTTP/1.1 transport.

Precision comes first: every read is timestamped with :func:`time.perf_counter`
the moment the event loop hands it over (inside ``data_received``), before any
parsing. Framing (chunked transfer encoding), SSE splitting and JSON parsing
happen later, per batch of reads and at the end of the request. This keeps
the per-token cost low enough that the client never limits or blurs a
measurement (see ``benchmarks/client_capacity.py``).

Two transports share one request function:

* ``lean`` (default): :class:`LeanTransport`, an ``httpx.AsyncBaseTransport``
  speaking HTTP/1.1 over an ``asyncio.Protocol`` (keep-alive pool, no
  connection limit, read timeout = the largest gap allowed between reads,
  checked by one watchdog per client instead of a timer per read).
* ``httpx``: the stock ``httpx.AsyncHTTPTransport`` (h11) with
  ``Limits(max_connections=None, max_keepalive_connections=None)``, read via
  ``aiter_raw``; used for comparison and for https.

Per-request records (:func:`stream_request`) follow benchmark-metrics.md §1
and §5; a request never raises (except ``CancelledError``, after its partial
record was handed to ``on_sample``).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

_pc = time.perf_counter

#: Default largest gap between two reads of one response (a 10-minute TTFT under overload fits).
DEFAULT_READ_TIMEOUT = 600.0
ERROR_BODY_LIMIT = 2048


# ====================================================================== transport


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection. ``data_received`` only timestamps and stores."""

    __slots__ = (
        "transport",
        "rx",
        "waiter",
        "last",
        "eof",
        "exc",
        "busy",
        "paused",
        "drain_waiter",
        "key",
        "uses",
    )

    def __init__(self, key: tuple[str, int]) -> None:
        self.transport: asyncio.Transport | None = None
        self.rx: list[tuple[float, bytes]] = []
        self.waiter: asyncio.Future[None] | None = None
        self.last = _pc()
        self.eof = False
        self.exc: BaseException | None = None
        self.busy = False
        self.paused = False
        self.drain_waiter: asyncio.Future[None] | None = None
        self.key = key
        self.uses = 0

    # -- protocol callbacks (keep minimal: timestamp first)
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

    def connection_lost(self, exc: Exception | None) -> None:
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

    # -- helpers
    def _wake(self) -> None:
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    def fail(self, exc: BaseException) -> None:
        """Abort the connection and make the pending wait raise ``exc`` (watchdog)."""
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

    def take(self) -> list[tuple[float, bytes]]:
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


class _Dechunk:
    """Incremental decoder of ``Transfer-Encoding: chunked``."""

    __slots__ = ("state", "need", "buf", "extra")

    def __init__(self) -> None:
        self.state = 0  # 0 size line, 1 data, 2 CRLF after data, 3 trailers, 4 done
        self.need = 0
        self.buf = b""
        self.extra = b""

    def feed(self, data: bytes) -> bytes:
        if self.buf:
            data = self.buf + data
            self.buf = b""
        out: list[bytes] = []
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
                    self.buf = data[pos:]
                    break
                try:
                    size = int(data[pos:i].split(b";", 1)[0], 16)
                except ValueError:
                    raise httpx.RemoteProtocolError("malformed chunk size line") from None
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
                    raise httpx.RemoteProtocolError("missing CRLF after chunk data")
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


class LeanStream(httpx.AsyncByteStream):
    """Body of a :class:`LeanTransport` response.

    Besides the ordinary ``httpx.AsyncByteStream`` interface (so ``aread()``
    and ``aiter_bytes()`` work), :meth:`next_batch` returns every body piece
    received since the last call with the time its read arrived.
    """

    def __init__(
        self,
        transport: "LeanTransport",
        conn: _Conn,
        first: list[tuple[float, bytes]],
        *,
        chunked: bool,
        length: int | None,
        keepalive: bool,
        request: httpx.Request,
    ) -> None:
        self._transport = transport
        self._conn = conn
        self._pending = first
        self._chunked = _Dechunk() if chunked else None
        self._remaining = length
        self._keepalive = keepalive
        self._request = request
        self.complete = False
        self._closed = False
        if length == 0:
            self.complete = True

    async def next_batch(self) -> list[tuple[float, bytes]] | None:
        """Timed body pieces ``[(perf_counter, bytes), ...]``; None at the end of the body.

        Raises ``httpx.RemoteProtocolError`` when the peer closes before the body is complete.
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
                return self._decode(raw)
            if conn.exc is not None and isinstance(conn.exc, httpx.TimeoutException):
                raise conn.exc
            if conn.eof:
                if self._chunked is None and self._remaining is None:
                    self.complete = True
                    continue
                self._closed = True
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body", request=self._request
                )
            await conn.wait()

    def _decode(self, raw: list[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
        out: list[tuple[float, bytes]] = []
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

    def _finish(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._transport._release(self._conn, reuse=self._keepalive and self.complete)

    async def __aiter__(self):  # type: ignore[override]
        while True:
            batch = await self.next_batch()
            if batch is None:
                return
            for _t, data in batch:
                yield data

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            # An unfinished body: drop the connection so the server aborts the generation.
            self._transport._release(self._conn, reuse=self._keepalive and self.complete)


class LeanTransport(httpx.AsyncBaseTransport):
    """A small, fast HTTP/1.1 transport for streaming benchmarks (http only; https is delegated).

    No connection limit (one connection per concurrent request), unlimited
    keep-alive, read timeout enforced by a watchdog (resolution ~0.25 s).
    """

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._busy: set[_Conn] = set()
        self._watchdog: asyncio.Task[None] | None = None
        self._read_timeout: float | None = None
        self._fallback: httpx.AsyncHTTPTransport | None = None
        self.connections_opened = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            if self._fallback is None:
                self._fallback = httpx.AsyncHTTPTransport(
                    limits=httpx.Limits(max_connections=None, max_keepalive_connections=None)
                )
            return await self._fallback.handle_async_request(request)
        timeouts = request.extensions.get("timeout", {})
        read_to = timeouts.get("read")
        if read_to is not None and (self._read_timeout is None or read_to != self._read_timeout):
            self._read_timeout = read_to
        self._ensure_watchdog()
        host = url.host
        port = url.port or 80
        key = (host, port)
        data = self._serialize(request, await request.aread() if not isinstance(request.stream, httpx.ByteStream) else request.content)
        for attempt in (0, 1):
            conn = self._pop_idle(key)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(host, port, timeouts.get("connect"), request)
            conn.busy = True
            conn.uses += 1
            self._busy.add(conn)
            conn.rx = []
            conn.last = _pc()
            assert conn.transport is not None
            conn.transport.write(data)
            if conn.paused:
                await self._drain(conn, timeouts.get("write"), request)
            request.extensions["tunedeck_written"] = _pc()
            try:
                status, headers, first, reason = await self._read_head(conn, request)
            except httpx.RemoteProtocolError:
                self._release(conn, reuse=False)
                if reused and attempt == 0:
                    continue  # stale keep-alive connection: retry once on a fresh one
                raise
            except BaseException:
                self._release(conn, reuse=False)
                raise
            break
        chunked = False
        length: int | None = None
        keepalive = True
        for k, v in headers:
            lk = k.lower()
            if lk == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
            elif lk == b"content-length":
                try:
                    length = int(v)
                except ValueError:
                    raise httpx.RemoteProtocolError("bad Content-Length", request=request) from None
            elif lk == b"connection" and v.lower() == b"close":
                keepalive = False
        if request.method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            length = 0
            chunked = False
        if not chunked and length is None:
            keepalive = False
        stream = LeanStream(
            self, conn, first, chunked=chunked, length=length, keepalive=keepalive, request=request
        )
        return httpx.Response(
            status,
            headers=headers,
            stream=stream,
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason, "tunedeck": stream},
        )

    @staticmethod
    def _serialize(request: httpx.Request, body: bytes) -> bytes:
        url = request.url
        target = url.raw_path or b"/"
        lines = [request.method.encode() + b" " + target + b" HTTP/1.1"]
        has_len = False
        for k, v in request.headers.raw:
            lk = k.lower()
            if lk == b"content-length":
                has_len = True
            elif lk == b"transfer-encoding":
                continue
            lines.append(k + b": " + v)
        if not has_len and (body or request.method in ("POST", "PUT", "PATCH")):
            lines.append(b"Content-Length: " + str(len(body)).encode())
        return b"\r\n".join(lines) + b"\r\n\r\n" + body

    def _pop_idle(self, key: tuple[str, int]) -> _Conn | None:
        pool = self._idle.get(key)
        while pool:
            c = pool.pop()
            if c.usable and not c.rx:
                return c
            c.close()
        return None

    async def _connect(self, host: str, port: int, timeout: float | None, request: httpx.Request) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _t, conn = await loop.create_connection(lambda: _Conn((host, port)), host, port)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connect to {host}:{port} timed out", request=request) from None
        except OSError as e:
            raise httpx.ConnectError(f"{host}:{port}: {e.strerror or e}", request=request) from None
        self.connections_opened += 1
        return conn

    async def _drain(self, conn: _Conn, timeout: float | None, request: httpx.Request) -> None:
        try:
            async with asyncio.timeout(timeout):
                while conn.paused and not conn.eof:
                    fut = asyncio.get_running_loop().create_future()
                    conn.drain_waiter = fut
                    await fut
        except TimeoutError:
            self._release(conn, reuse=False)
            raise httpx.WriteTimeout("request write timed out", request=request) from None

    async def _read_head(
        self, conn: _Conn, request: httpx.Request
    ) -> tuple[int, list[tuple[bytes, bytes]], list[tuple[float, bytes]], bytes]:
        buf = b""
        while True:
            raw = conn.take()
            for i, (t, data) in enumerate(raw):
                buf += data
                end = buf.find(b"\r\n\r\n")
                if end >= 0:
                    head = buf[:end]
                    rest = buf[end + 4 :]
                    first = [(t, rest)] if rest else []
                    first.extend(raw[i + 1 :])
                    lines = head.split(b"\r\n")
                    parts = lines[0].split(b" ", 2)
                    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
                        raise httpx.RemoteProtocolError("malformed status line", request=request)
                    try:
                        status = int(parts[1])
                    except ValueError:
                        raise httpx.RemoteProtocolError("malformed status code", request=request) from None
                    headers = []
                    for line in lines[1:]:
                        k, sep, v = line.partition(b":")
                        if sep:
                            headers.append((k.strip(), v.strip()))
                    return status, headers, first, parts[2] if len(parts) > 2 else b""
            if len(buf) > 65536:
                raise httpx.RemoteProtocolError("response head too large", request=request)
            if conn.exc is not None and isinstance(conn.exc, httpx.TimeoutException):
                raise conn.exc
            if conn.eof:
                raise httpx.RemoteProtocolError(
                    "server disconnected without sending a response", request=request
                )
            await conn.wait()

    def _release(self, conn: _Conn, *, reuse: bool) -> None:
        conn.busy = False
        self._busy.discard(conn)
        if reuse and conn.usable and not conn.rx:
            self._idle.setdefault(conn.key, []).append(conn)
        else:
            conn.close()

    def _ensure_watchdog(self) -> None:
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            rt = self._read_timeout
            await asyncio.sleep(0.25 if rt is None else min(0.25, max(0.02, rt / 8)))
            if rt is None:
                continue
            now = _pc()
            for conn in list(self._busy):
                if now - conn.last > rt:
                    conn.fail(httpx.ReadTimeout(f"no data for {rt:g} s"))

    async def aclose(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            try:
                await self._watchdog
            except BaseException:
                pass
            self._watchdog = None
        for pool in self._idle.values():
            for c in pool:
                c.close()
        self._idle.clear()
        for c in list(self._busy):
            c.close()
        self._busy.clear()
        if self._fallback is not None:
            await self._fallback.aclose()


# ====================================================================== GC


class quiet_gc:
    """Tune Python's cyclic GC for a timed phase; restores the settings on exit.

    Everything alive before the phase is frozen (never scanned again) and the
    young-generation threshold is raised, so collections stay rare and short:
    at C=256 x 10 ms this cut the client's p99 timestamp lag from ~6 ms to
    ~2 ms (benchmarks/client_capacity.py). Reference cycles are still
    collected, only less often.
    """

    def __init__(self, threshold0: int = 100_000) -> None:
        self.threshold0 = threshold0
        self._old: tuple[int, int, int] | None = None

    def __enter__(self) -> "quiet_gc":
        import gc

        self._old = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(self.threshold0, 50, 100)
        return self

    def __exit__(self, *exc: object) -> None:
        import gc

        if self._old is not None:
            gc.set_threshold(*self._old)
            gc.unfreeze()
            self._old = None


# ====================================================================== client


def make_client(
    *, transport: str = "lean", read_timeout: float | None = DEFAULT_READ_TIMEOUT
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` sized for benchmarks (no pool limits, long read timeout)."""
    timeout = httpx.Timeout(connect=10.0, read=read_timeout, write=30.0, pool=None)
    if transport == "lean":
        lean = LeanTransport()
        client = httpx.AsyncClient(transport=lean, timeout=timeout, trust_env=False)
        client.tunedeck_transport = lean  # type: ignore[attr-defined]
        return client
    if transport == "httpx":
        t = httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None), http2=False
        )
        return httpx.AsyncClient(transport=t, timeout=timeout, trust_env=False)
    raise ValueError(f"transport {transport!r}: expected 'lean' or 'httpx'")


@dataclass(slots=True)
class RequestSpec:
    """One benchmark request."""

    prompt: str
    #: Prompt length as generated (words); replaced by usage.prompt_tokens when the server reports it.
    prompt_len: int
    output_len: int
    index: int = 0


@dataclass(slots=True)
class EndpointConfig:
    """What is sent with every request."""

    base_url: str
    model: str
    endpoint: str = "completions"  # or "chat"
    ignore_eos: bool = True
    temperature: float = 0.0
    extra_body: dict[str, Any] = field(default_factory=dict)
    request_deadline: float | None = None

    @property
    def url(self) -> str:
        base = self.base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        path = "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"
        return base + path

    def body(self, spec: RequestSpec) -> bytes:
        payload: dict[str, Any] = {"model": self.model, "stream": True,
                                   "stream_options": {"include_usage": True},
                                   "temperature": self.temperature}
        if self.endpoint == "chat":
            payload["messages"] = [{"role": "user", "content": spec.prompt}]
            payload["max_completion_tokens"] = spec.output_len
        else:
            payload["prompt"] = spec.prompt
            payload["max_tokens"] = spec.output_len
        if self.ignore_eos:
            payload["ignore_eos"] = True
        payload.update(self.extra_body)
        return json.dumps(payload, separators=(",", ":")).encode()


class Live:
    """Running counters shared by the request tasks of one process (for progress lines)."""

    __slots__ = ("t0", "bins", "in_flight")

    def __init__(self, t0: float | None = None) -> None:
        self.t0 = _pc() if t0 is None else t0
        self.bins: dict[int, int] = {}
        self.in_flight = 0

    def add(self, t: float, n: int) -> None:
        k = int(t - self.t0)
        self.bins[k] = self.bins.get(k, 0) + n


_DONE = b"[DONE]"


class _SSE:
    """Incremental SSE reader for one response.

    ``feed(t, body)`` gets each body piece with the time its read arrived; every
    event block completed by that piece is parsed at once (after the timestamp
    was taken, so parsing never delays a stamp) and, when it is an output event
    (non-empty ``choices``), its time is appended to ``times``.
    """

    __slots__ = ("buf", "sep", "times", "usage", "done", "finish", "bad", "error", "chat", "events")

    def __init__(self, chat: bool = False, keep: bool = False) -> None:
        self.buf = b""
        self.sep = b""
        self.times: list[float] = []
        self.usage: Any = None
        self.done = False
        self.finish: Any = None
        self.bad = 0
        self.error: str | None = None
        self.chat = chat
        #: raw (time, block) pairs, kept only on request (precision checks)
        self.events: list[tuple[float, bytes]] | None = [] if keep else None

    def feed(self, t: float, data: bytes) -> None:
        if self.buf:
            data = self.buf + data
        sep = self.sep
        if not sep:
            sep = self.sep = b"\r\n\r\n" if b"\r\n" in data[:512] else b"\n\n"
        ls = len(sep)
        start = 0
        while True:
            i = data.find(sep, start)
            if i < 0:
                break
            self.block(t, data[start:i])
            start = i + ls
        self.buf = data[start:] if start < len(data) else b""

    def end(self, t: float) -> None:
        """The body ended: a last event without its blank line still counts."""
        rest = self.buf.strip()
        self.buf = b""
        if rest:
            self.block(t, rest)

    def block(self, t: float, block: bytes) -> None:
        if self.events is not None:
            self.events.append((t, block))
        if self.done:
            return
        if block.startswith(b"data: ") and b"\n" not in block:
            payload = block[6:].rstrip(b"\r")
        else:
            parts = []
            for line in block.split(b"\n"):
                line = line.rstrip(b"\r")
                if line.startswith(b"data:"):
                    v = line[5:]
                    parts.append(v[1:] if v.startswith(b" ") else v)
                elif not line or line.startswith(b":"):
                    continue
                elif line.startswith((b"event:", b"id:", b"retry:")):
                    continue
                else:
                    self.bad += 1
            if not parts:
                return
            payload = b"\n".join(parts)
        if payload == _DONE:
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            self.bad += 1
            return
        if not isinstance(obj, dict):
            self.bad += 1
            return
        usage = obj.get("usage")
        if usage:
            self.usage = usage
        choices = obj.get("choices")
        if choices:
            c0 = choices[0] if isinstance(choices[0], dict) else {}
            fr = c0.get("finish_reason")
            if fr:
                self.finish = fr
            if self.chat and not self.times:
                delta = c0.get("delta") or {}
                # vLLM 0.33.0 skips the role-only opening chunk (no content of any kind yet).
                if delta.get("role") and not fr and not delta.get("content") \
                        and not delta.get("reasoning_content") and not delta.get("reasoning") \
                        and not delta.get("tool_calls"):
                    return
            self.times.append(t)
        elif obj.get("error") is not None:
            err = obj["error"]
            self.error = err.get("message", str(err)) if isinstance(err, dict) else str(err)


def new_sample(spec: RequestSpec) -> dict[str, Any]:
    return {
        "index": spec.index,
        "success": False,
        "error_type": "",
        "error": "",
        "ttft": 0.0,
        "itl": [],
        "latency": 0.0,
        "prompt_len": spec.prompt_len,
        "output_tokens": 0,
        "tokens_per_event": 0.0,
        "usage_present": False,
        "start_time": 0.0,
        "wall_start": 0.0,
        "client_queue_time": 0.0,
        "send_time": 0.0,
        "elapsed": 0.0,
        "bad_lines": 0,
        "finish_reason": None,
    }


_HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}


def prepare(client: httpx.AsyncClient, ep: EndpointConfig, spec: RequestSpec) -> httpx.Request:
    """Build the request ahead of time (so building costs nothing during the timed phase)."""
    return client.build_request("POST", ep.url, content=ep.body(spec), headers=_HEADERS)


async def stream_request(
    client: httpx.AsyncClient,
    ep: EndpointConfig,
    spec: RequestSpec,
    *,
    request: httpx.Request | None = None,
    queued_at: float | None = None,
    live: Live | None = None,
    keep_events: bool = False,
    on_partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Send one streaming request and return its record. Never raises except on cancel.

    ``request``: prebuilt by :func:`prepare` (else built here). ``queued_at``
    is when the request became due (the slot wait counts as
    ``client_queue_time``). With ``keep_events`` the record also holds
    ``_events``: ``[(perf_counter, SSE block bytes), ...]`` for precision checks.
    ``on_partial`` receives the partial record when the request is cancelled.
    """
    s = new_sample(spec)
    chat = ep.endpoint == "chat"
    sse = _SSE(chat, keep_events)
    status = 0
    resp: httpx.Response | None = None
    written: list[float] = []
    req = request if request is not None else prepare(client, ep, spec)
    lean_tr = getattr(client, "tunedeck_transport", None)
    if lean_tr is None:

        async def trace(name: str, info: dict[str, Any]) -> None:
            if name == "http11.send_request_body.complete":
                written.append(_pc())

        req.extensions["trace"] = trace
    if live is not None:
        live.in_flight += 1
    st = _pc()
    s["start_time"] = st
    s["wall_start"] = time.time()
    if queued_at is not None:
        s["client_queue_time"] = max(0.0, st - queued_at)
    try:
        try:
            async with asyncio.timeout(ep.request_deadline):
                if lean_tr is not None and req.url.scheme == "http":
                    # Straight to our transport: skips httpx's auth/redirect/cookie layers per request.
                    resp = await lean_tr.handle_async_request(req)
                else:
                    resp = await client.send(req, stream=True)
                status = resp.status_code
                w = req.extensions.get("tunedeck_written") or (written[0] if written else None)
                s["send_time"] = (w - st) if w is not None else 0.0
                if status != 200:
                    raw = b""
                    try:
                        async for piece in resp.aiter_raw():
                            raw += piece
                            if len(raw) >= ERROR_BODY_LIMIT:
                                break
                    except httpx.HTTPError:
                        pass
                    s["error_type"] = "HTTPStatus"
                    s["error"] = f"HTTP {status} {resp.reason_phrase}: " + raw[:ERROR_BODY_LIMIT].decode(
                        "utf-8", "replace"
                    )
                else:
                    lean = resp.extensions.get("tunedeck")
                    feed = sse.feed
                    times = sse.times
                    if lean is not None:
                        nb = lean.next_batch
                        while True:
                            batch = await nb()
                            if batch is None:
                                break
                            n0 = len(times)
                            for t, data in batch:
                                feed(t, data)
                            if live is not None and len(times) > n0:
                                live.add(batch[-1][0], len(times) - n0)
                    else:
                        async for data in resp.aiter_raw():
                            t = _pc()
                            n0 = len(times)
                            feed(t, data)
                            if live is not None and len(times) > n0:
                                live.add(t, len(times) - n0)
                    sse.end(times[-1] if times else _pc())
        except TimeoutError:
            s["error_type"] = "DeadlineExceeded"
            s["error"] = f"request exceeded its {ep.request_deadline:g} s deadline"
        except httpx.RemoteProtocolError as e:
            if status == 200:
                s["error_type"] = "IncompleteStream"
                s["error"] = f"RemoteProtocolError: {e}"[:ERROR_BODY_LIMIT]
            else:
                s["error_type"] = type(e).__name__
                s["error"] = str(e)[:ERROR_BODY_LIMIT]
        except asyncio.CancelledError:
            s["error_type"] = "Cancelled"
            s["error"] = "cancelled before the response ended"
            _finish(s, sse, st, status)
            if on_partial is not None:
                on_partial(s)
            raise
        except Exception as e:  # noqa: BLE001 - a request never raises
            s["error_type"] = type(e).__name__
            s["error"] = (str(e) or type(e).__name__)[:ERROR_BODY_LIMIT]
        finally:
            if resp is not None:
                try:
                    await resp.aclose()
                except Exception:  # noqa: BLE001
                    pass
        _finish(s, sse, st, status)
    finally:
        if live is not None:
            live.in_flight -= 1
    return s


def _finish(s: dict[str, Any], sse: _SSE, st: float, status: int) -> None:
    s["elapsed"] = _pc() - st
    times = sse.times
    if sse.events is not None:
        s["_events"] = sse.events
    s["bad_lines"] = sse.bad
    s["finish_reason"] = sse.finish
    usage = sse.usage
    if isinstance(usage, dict):
        s["usage_present"] = True
        ct = usage.get("completion_tokens")
        if isinstance(ct, int):
            s["output_tokens"] = ct
        pt = usage.get("prompt_tokens")
        if isinstance(pt, int):
            s["prompt_len"] = pt
    if times:
        s["ttft"] = times[0] - st
        s["itl"] = [b - a for a, b in zip(times, times[1:])]
        s["latency"] = times[-1] - st
        if not s["usage_present"]:
            s["output_tokens"] = len(times)  # no tokenizer: one token per output event
        s["tokens_per_event"] = s["output_tokens"] / len(times)
    if s["error_type"] or status != 200:
        return
    if sse.error is not None:
        s["error_type"] = "StreamError"
        s["error"] = str(sse.error)[:ERROR_BODY_LIMIT]
    elif sse.bad:
        s["error_type"] = "MalformedSSE"
        s["error"] = f"{sse.bad} malformed SSE line(s)"
    elif not times:
        s["error_type"] = "EmptyStream"
        s["error"] = "Never received a valid chunk to calculate TTFT."
    elif not sse.done and not sse.finish:
        s["error_type"] = "IncompleteStream"
        s["error"] = "stream ended without [DONE] or a finish_reason"
    else:
        s["success"] = True
