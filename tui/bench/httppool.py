"""The benchmark HTTP client's connections (standard library only): :class:`Conn`, one keep-alive
connection whose ``data_received`` only timestamps and stores, and :class:`Pool`, the idle ones per
origin (no limit: one connection per concurrent request) with the one watchdog that enforces read
timeouts for all busy connections (resolution ~1/8 of the timeout, at most 0.25 s), and the
:class:`Gate` every read checks, so a scheduled send that fell due goes out ahead of the reads."""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

from tunedeck.bench.httpcore import ConnectError, ConnectTimeout, HTTPError, Origin, Piece, ReadTimeout
from tunedeck.util.aio import cancel_and_wait

_pc = time.perf_counter


def _nothing(t: float) -> None:
    """A disarmed gate's action (never called: its due time is infinite)."""


class Gate:
    """A moment the read path watches for, so that a scheduled send goes ahead of the reads.

    Every read that arrives (``Conn.data_received``) and every batch a response hands over
    (:meth:`~tunedeck.bench.httpresponse.Response.next_batch`) compares the time with :attr:`due`:
    one float comparison while nothing is due. At or after it, :attr:`fire` is called with the
    time, synchronously, from that callback: an event loop iteration that processes a burst of
    reads (every stream's tokens of one decode step) no longer holds back a request that fell due
    in the middle of it. ``fire`` must not raise (it runs inside another connection's callback)
    and moves :attr:`due` on (to ``inf`` when nothing more is scheduled).
    """

    __slots__ = ("due", "fire")

    def __init__(self) -> None:
        self.due = math.inf
        self.fire: Callable[[float], None] = _nothing

    @property
    def armed(self) -> bool:
        return self.fire is not _nothing

    def arm(self, due: float, fire: Callable[[float], None]) -> None:
        self.fire = fire
        self.due = due

    def disarm(self) -> None:
        self.due = math.inf
        self.fire = _nothing


class Conn(asyncio.Protocol):
    """One keep-alive connection. ``data_received`` only timestamps, stores and checks the gate."""

    __slots__ = (
        "drain_waiter",
        "eof",
        "exc",
        "gate",
        "last",
        "origin",
        "paused",
        "read_timeout",
        "rx",
        "transport",
        "uses",
        "waiter",
    )

    def __init__(self, origin: Origin, gate: Gate) -> None:
        self.gate = gate
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
        g = self.gate
        if t >= g.due:
            g.fire(t)

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


class Pool:
    """Idle keep-alive connections per origin and the busy ones; closing it closes them all."""

    def __init__(self, *, connect_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self._idle: Dict[Origin, List[Conn]] = {}
        self._busy: Set[Conn] = set()
        self._watchdog: "Optional[asyncio.Task[None]]" = None
        self._ssl: Optional[ssl.SSLContext] = None
        #: checked by every read of every connection (:class:`Gate`)
        self.gate = Gate()
        self.connections_opened = 0
        #: seconds each new connection took to open (TCP, plus TLS for https)
        self.connect_times: List[float] = []
        self.closed = False

    async def acquire(self, origin: Origin, read_timeout: Optional[float]) -> Tuple[Conn, bool]:
        """A connection to ``origin`` marked busy (an idle one, else a new one) and whether it was reused."""
        conn = self._pop_idle(origin)
        reused = conn is not None
        if conn is None:
            conn = await self.connect(origin)
        self._take(conn, read_timeout)
        return conn, reused

    def acquire_idle(self, origin: Origin, read_timeout: Optional[float]) -> Optional[Conn]:
        """An idle connection to ``origin`` marked busy, without waiting; None when there is none."""
        conn = self._pop_idle(origin)
        if conn is not None:
            self._take(conn, read_timeout)
        return conn

    def _take(self, conn: Conn, read_timeout: Optional[float]) -> None:
        conn.uses += 1
        conn.read_timeout = read_timeout
        self._busy.add(conn)
        conn.rx = []
        conn.last = _pc()

    def _pop_idle(self, origin: Origin) -> Optional[Conn]:
        pool = self._idle.get(origin)
        while pool:
            c = pool.pop()
            if c.usable and not c.rx:
                return c
            c.close()
        return None

    def idle_count(self, origin: Origin) -> int:
        return sum(1 for c in self._idle.get(origin, ()) if c.usable)

    async def warm(self, origin: Origin, n: int) -> List[float]:
        """Open connections to ``origin`` until ``n`` are idle; their connect times (s).

        A connection that fails to open is skipped (the request that needs it
        later reports the failure).
        """
        need = max(0, n - self.idle_count(origin))
        if not need:
            return []
        times: List[float] = []

        async def one() -> None:
            t = _pc()
            try:
                conn = await self.connect(origin)
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

    async def connect(self, origin: Origin) -> Conn:
        loop = asyncio.get_running_loop()
        ctx = None
        if origin.scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ctx = self._ssl
        t = _pc()
        try:
            _tr, conn = await asyncio.wait_for(
                loop.create_connection(lambda: Conn(origin, self.gate), origin.host, origin.port, ssl=ctx),
                self.connect_timeout,
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

    def release(self, conn: Conn, *, reuse: bool) -> None:
        """``conn`` is no longer busy: back to the idle ones when ``reuse`` and it is clean, else closed."""
        self._busy.discard(conn)
        if reuse and conn.usable and not conn.rx and not self.closed:
            self._idle.setdefault(conn.origin, []).append(conn)
        else:
            conn.close()

    def ensure_watchdog(self) -> None:
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
        self.closed = True
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
