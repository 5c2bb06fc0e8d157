"""An asyncio TCP proxy for fault injection without root (reliability.md §7).

Put it in front of the sshd fixture and point an ``SshHost`` at ``127.0.0.1:<proxy.port>``
(the known_hosts line must then name the proxy's port: :meth:`ChaosProxy.known_hosts_line`).

Modes (switch at any time with :meth:`ChaosProxy.set_mode`):

* ``pass``      forward bytes both ways;
* ``blackhole`` keep every socket open but hold the bytes (a dead link the kernel does not
  notice: only keepalives can tell);
* ``cut``       abort every connection (``transport.abort()``: an RST); new ones are
  accepted and aborted at once.

``accepted`` lists the monotonic time of every accepted client connection (one per
connection attempt), so tests can measure the gaps a backoff leaves between attempts.
"""

from __future__ import annotations

import asyncio
import time

MODES = ("pass", "blackhole", "cut")


class _Link:
    def __init__(self, proxy: "ChaosProxy", client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.client_r, self.client_w = client_r, client_w
        self.server_w: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        try:
            server_r, self.server_w = await asyncio.open_connection(self.proxy.upstream_host, self.proxy.upstream_port)
        except OSError:
            self.abort()
            return
        self.tasks = [
            asyncio.ensure_future(self._pump(self.client_r, self.server_w)),
            asyncio.ensure_future(self._pump(server_r, self.client_w)),
        ]
        try:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        finally:
            self.abort()

    async def _pump(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            data = await r.read(65536)
            if not data:
                break
            if self.proxy.mode == "blackhole":
                continue  # swallow: the peer never hears of it, the socket stays open
            if self.proxy.mode == "cut":
                break
            w.write(data)
            await w.drain()
        self.abort()

    def abort(self) -> None:
        for w in (self.client_w, self.server_w):
            if w is not None:
                try:
                    w.transport.abort()
                except Exception:  # noqa: BLE001 - already gone
                    pass
        for t in self.tasks:
            if not t.done() and t is not asyncio.current_task():
                t.cancel()
        self.proxy.links.discard(self)


class ChaosProxy:
    """``async with ChaosProxy(port) as p:`` listens on a free loopback port."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1", mode: str = "pass") -> None:
        self.upstream_host, self.upstream_port = upstream_host, upstream_port
        self.mode = mode
        self.links: set[_Link] = set()
        self.accepted: list[float] = []
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown chaos mode {mode!r}")
        self.mode = mode
        if mode == "cut":
            for link in list(self.links):
                link.abort()

    def known_hosts_line(self, key_type: str, key_b64: str) -> str:
        return f"[127.0.0.1]:{self.port} {key_type} {key_b64}"

    async def _accept(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.accepted.append(time.monotonic())
        link = _Link(self, r, w)
        if self.mode == "cut":
            link.abort()
            return
        self.links.add(link)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await link.run()
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def __aenter__(self) -> "ChaosProxy":
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for link in list(self.links):
            link.abort()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            await asyncio.wait_for(self._server.wait_closed(), 2)
        except asyncio.TimeoutError:
            pass
