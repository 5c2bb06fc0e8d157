"""Scripted collectors for UI tests, the screenshot script and the cost benchmark.

They follow the protocols in :mod:`tunedeck.collectors.sources`; nothing here touches SSH.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import AsyncIterator, Callable, Iterable, Mapping, Sequence

from tunedeck.hostops.hosts import ByteStream, Command, Host, HostError, RunResult
from tunedeck.model import NA, GpuProcess, GpuSnapshot, GpuStatus, HostStats, ServerStats


def gpu_snapshot(i: int, t: int = 0, **over: object) -> GpuSnapshot:
    """A deterministic H100 at tick ``t``."""
    util = (37 * i + 11 * t) % 101
    fields = dict(
        index=i,
        uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000",
        name="NVIDIA H100 80GB HBM3",
        utilization=float(util),
        memory_used=float(20000 + 7000 * i + 100 * (t % 10)),
        memory_total=81559.0,
        temperature=float(40 + i * 3 + t % 5),
        power_draw=float(120 + 50 * i + t % 7),
        power_limit=700.0,
        clock_sm=float(1980 - 10 * i),
        clock_mem=2619.0,
    )
    fields.update(over)
    return GpuSnapshot(**fields)  # type: ignore[arg-type]


def gpu_status(n: int = 8, t: int = 0, **over: object) -> GpuStatus:
    gpus = tuple(gpu_snapshot(i, t) for i in range(n))
    procs = tuple(
        GpuProcess(
            pid=4000 + i,
            name="python3 -m sglang.launch_server",
            gpu_uuid=g.uuid,
            gpu_index=i,
            used_memory=float(g.memory_used) - 500,
        )
        for i, g in enumerate(gpus)
        if i < 4
    )
    return GpuStatus(state="ok", gpus=gpus, processes=procs, time=1_700_000_000.0 + t, **over)  # type: ignore[arg-type]


def host_stats(t: int = 0, **over: object) -> HostStats:
    fields = dict(
        hostname="gpu-box-01",
        cpu_percent=12.5 + t % 3,
        cpu_count=64,
        mem_used=123.4 * 2**30,
        mem_total=503.8 * 2**30,
        load1=3.21,
        load5=2.80,
        load15=2.55,
        uptime=1_052_460.0,
        time=1_700_000_000.0 + t,
    )
    fields.update(over)
    return HostStats(**fields)  # type: ignore[arg-type]


def server(name: str = "sglang-tuned", state: str = "ready", **over: object) -> ServerStats:
    fields = dict(
        name=name,
        engine="sglang",
        url="http://127.0.0.1:30000",
        state=state,
        model="/models/DeepSeek-V3",
        port=30000,
        running=12.0,
        waiting=3.0,
        kv_cache_usage=0.41,
        gen_throughput=1843.2,
        ttft_p50=0.231,
    )
    fields.update(over)
    return ServerStats(**fields)  # type: ignore[arg-type]


class FakeGpu:
    """Yields scripted GpuStatus values; ``push()`` feeds more; ``hang()`` never yields again."""

    def __init__(self, script: Iterable[GpuStatus] = (), *, interval: float = 0.0) -> None:
        self.queue: asyncio.Queue[GpuStatus] | None = None
        self._pending = list(script)
        self.interval = interval
        self.streams = 0

    def push(self, status: GpuStatus) -> None:
        if self.queue is None:
            self._pending.append(status)
        else:
            self.queue.put_nowait(status)

    async def stream(self) -> AsyncIterator[GpuStatus]:
        self.streams += 1
        if self.queue is None:
            self.queue = asyncio.Queue()
            for s in self._pending:
                self.queue.put_nowait(s)
        while True:
            yield await self.queue.get()
            if self.interval:
                await asyncio.sleep(self.interval)


class TickingGpu:
    """An endless deterministic 8-GPU feed at ``interval`` (demo-like)."""

    def __init__(self, n: int = 8, interval: float = 1.0) -> None:
        self.n, self.interval = n, interval

    async def stream(self) -> AsyncIterator[GpuStatus]:
        t = 0
        while True:
            yield gpu_status(self.n, t)
            t += 1
            await asyncio.sleep(self.interval)


class _Scripted:
    """``_next()`` returns or raises what ``script`` says, in order; the last item repeats.

    An item is a value, an Exception (raised), a callable (called), or ``"hang"``.
    """

    def __init__(self, script: tuple[object, ...], default: object) -> None:
        self.script = list(script) or [default]
        self.calls = 0

    async def _next(self) -> object:
        item = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        if item == "hang":
            await asyncio.Event().wait()
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            return item()
        return item


class FakeHost(_Scripted):
    """A host-stats source: ``sample()`` gives the script's HostStats (see :class:`_Scripted`)."""

    def __init__(self, *script: object) -> None:
        super().__init__(script, host_stats())

    async def sample(self) -> HostStats:
        return await self._next()  # type: ignore[return-value]


class FakeServers(_Scripted):
    """A servers source: ``sample()`` gives the script's tuples of ServerStats (see :class:`_Scripted`)."""

    def __init__(self, *script: object) -> None:
        super().__init__(script, (server(),))

    async def sample(self) -> tuple[ServerStats, ...]:
        return await self._next()  # type: ignore[return-value]


class LinkHost(Host):
    """An in-process host holding files, whose link can be cut (a silent drop) and restored.

    ``stream()`` speaks the follow script's protocol (:data:`tunedeck.hostops.hostscripts.FOLLOW_SCRIPT`:
    its pid line, then the file's bytes from the offset in ``argv[4]``, then what :meth:`append`
    adds) and beats every ``heartbeat`` seconds while the link is up. :meth:`cut` makes every open
    stream go silent (no byte, no beat: the laptop must see the loss by the liveness rule) and every
    new stream and command fail; :meth:`restore` brings the link back. ``run()`` answers a process
    check ("ALIVE"), a ``tail -c +N -- PATH`` read, and anything else with an empty success.
    """

    target = "gpu-box-01"

    def __init__(self, files: dict[str, bytes] | None = None) -> None:
        self.files = {k: bytearray(v) for k, v in (files or {}).items()}
        self.up = True
        self.streams = 0
        self.cuts = 0

    def append(self, path: str, data: bytes) -> None:
        self.files.setdefault(path, bytearray()).extend(data)

    def cut(self) -> None:
        self.up = False
        self.cuts += 1

    def restore(self) -> None:
        self.up = True

    def _down(self, what: str) -> HostError:
        return HostError(
            "unreachable", f"connect to 10.0.0.7 port 22: {what}: Connection timed out", target=self.target
        )

    async def _run(self, cmd: Command) -> RunResult:
        if not self.up:
            raise self._down("run")
        if cmd.input and "tail -c" in cmd.input:
            offset, path = int(cmd.argv[3]) - 1, cmd.argv[4]
            data = bytes(self.files.get(path, b"")[offset:])
            return RunResult(0, data.decode("utf-8", "replace"), "", stdout_bytes=data)
        if cmd.input and "ALIVE" in cmd.input:
            return RunResult(0, "ALIVE\n", "")
        return RunResult(0, "", "")

    def stream(self, argv, *, env=None, heartbeat=None):  # type: ignore[no-untyped-def]
        self.streams += 1
        return _LinkStream(self, argv[5], int(argv[4]) - 1, heartbeat or 5.0)

    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        raise self._down("forward")


class _LinkStream(ByteStream):
    def __init__(self, host: LinkHost, path: str, offset: int, beat: float) -> None:
        self.host, self.path, self.pos, self.beat = host, path, offset, beat
        self.closed = False

    async def _chunks(self) -> AsyncIterator[bytes]:
        if not self.host.up:
            raise self.host._down("stream")
        self.last_heard = time.monotonic()
        yield b"4242\n"  # the follow script's pid line
        while not self.closed:
            if self.host.up:
                now = time.monotonic()
                if now - self.last_heard >= self.beat:
                    self.last_heard = now  # the host side's heartbeat on stderr
                data = bytes(self.host.files.get(self.path, b"")[self.pos :])
                if data:
                    self.pos += len(data)
                    self.last_heard = now
                    yield data
                    continue
            await asyncio.sleep(0.02)

    async def aclose(self) -> None:
        self.closed = True


def unreachable(msg: str = "connect to 10.0.0.7 port 22: Connection refused") -> HostError:
    return HostError("unreachable", msg, target="gpu-box-01")


class DeadHost(Host):
    """A host whose link is down: every command, stream and forward raises what SshHost raises
    when the host cannot be reached."""

    target = "gpu-box"

    def _refused(self) -> HostError:
        return HostError("unreachable", "connection refused", target=self.target)

    async def _run(self, cmd: Command) -> RunResult:
        raise self._refused()

    def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, heartbeat: float | None = None
    ) -> ByteStream:
        raise self._refused()

    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        raise self._refused()


__all__ = [
    "NA",
    "Callable",
    "DeadHost",
    "FakeGpu",
    "FakeHost",
    "FakeServers",
    "LinkHost",
    "TickingGpu",
    "gpu_snapshot",
    "gpu_status",
    "host_stats",
    "math",
    "server",
    "time",
    "unreachable",
]
