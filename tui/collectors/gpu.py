"""GPU collector: one long-lived ``nvidia-smi -lms`` stream per host.

:meth:`GpuCollector.stream` yields a :class:`~tunedeck.model.GpuStatus` per
block of query lines (one line per GPU). It never spawns a process per poll:
the query runs as one ``nvidia-smi --query-gpu=… -lms N`` under
``timeout`` on the host (so it cannot outlive a lost link for long and is
rotated every ``lifetime`` seconds). A watchdog closes the stream when no
block arrives within ``max(10 s, 5 × interval)`` and reports
``unresponsive``; a new query process is started only after the previous one
has exited, so there is never more than one per host. The compute-process
list comes from a separate, slower, chained ``--query-compute-apps`` poll
joined on ``gpu_uuid``. Host and driver failures become states
(``GpuStatus.state``) followed by a retry with backoff; nothing raises.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from typing import Any, AsyncGenerator, Sequence

from tunedeck.collectors.smi import (
    QUERY_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    STATE_LABELS,
    classify_failure,
    join_processes,
    parse_compute_apps,
    parse_gpu_line,
    parse_query_gpu,
)
from tunedeck.hostops.hosts import ByteStream, Host, HostError
from tunedeck.model import GpuProcess, GpuSnapshot, GpuStatus
from tunedeck.util.aio import cancel_and_wait, within
from tunedeck.util.retry import Backoff
from tunedeck.util.safety import visible

NVIDIA_SMI = "nvidia-smi"

#: Lines kept while the consumer is not iterating (the oldest are dropped).
_MAX_QUEUED_LINES = 4096

#: Per-command limit for one-shot nvidia-smi calls on the host (``timeout -k 2 10``).
ONESHOT_TIMEOUT = 10


def query_argv(interval: float | None = None, *, lifetime: int = 3600, smi: str = NVIDIA_SMI) -> list[str]:
    """The query command; with ``interval`` it loops (``-lms``) for at most ``lifetime`` s."""
    base = [
        smi,
        "--query-gpu=" + ",".join(QUERY_GPU_FIELDS),
        "--format=csv,noheader,nounits",
    ]
    if interval is None:
        return ["timeout", "-k", "2", str(ONESHOT_TIMEOUT), *base]
    ms = max(100, round(interval * 1000))
    return ["timeout", "-k", "5", str(int(lifetime)), *base, "-lms", str(ms)]


def apps_argv(smi: str = NVIDIA_SMI) -> list[str]:
    return [
        "timeout",
        "-k",
        "2",
        str(ONESHOT_TIMEOUT),
        smi,
        "--query-compute-apps=" + ",".join(QUERY_APPS_FIELDS),
        "--format=csv,noheader,nounits",
    ]


def not_understood(line: str) -> str:
    """The GPU panel's message for nvidia-smi output that holds no GPU row (host text: made safe)."""
    return f"nvidia-smi output not understood: {visible(line.strip())[:120]!s}"


def host_error_status(exc: BaseException, retry_at: float = 0.0) -> GpuStatus:
    """A GpuStatus for a failure of the host link itself."""
    if isinstance(exc, HostError):
        msg = f"{exc.kind}: {exc.message}" if exc.kind not in exc.message else exc.message
    else:
        msg = f"{type(exc).__name__}: {exc}"
    return GpuStatus("host-unreachable", message=msg, time=time.time(), retry_at=retry_at)


class _Blocks:
    """Groups query lines into blocks (one line per GPU)."""

    def __init__(self) -> None:
        self.cur: dict[int, GpuSnapshot] = {}
        self.known: int | None = None
        self.emitted = False

    def feed(self, gpu: GpuSnapshot) -> list[tuple[GpuSnapshot, ...]]:
        out: list[tuple[GpuSnapshot, ...]] = []
        if gpu.index in self.cur:
            # a repeated index starts the next block
            if not self.emitted:
                out.append(self._sorted())
            self.known = len(self.cur)
            self.cur = {}
            self.emitted = False
        self.cur[gpu.index] = gpu
        if self.known is not None and len(self.cur) >= self.known and not self.emitted:
            out.append(self._sorted())
            self.emitted = True
        return out

    def flush(self) -> tuple[GpuSnapshot, ...]:
        """End the current (first) block now; its size becomes the known size."""
        self.known = len(self.cur)
        self.emitted = True
        return self._sorted()

    def _sorted(self) -> tuple[GpuSnapshot, ...]:
        return tuple(self.cur[k] for k in sorted(self.cur))


class GpuCollector:
    """GPU status of one host.

    ``interval``: seconds between blocks of the ``-lms`` stream.
    ``proc_interval``: seconds between ``--query-compute-apps`` polls
    (default ``max(5, 5 × interval)``). ``watchdog``: seconds without a
    block before the stream counts as unresponsive (default
    ``max(10, 5 × interval)``). ``max_backoff``: cap of the retry delay.
    """

    def __init__(
        self,
        host: Host,
        interval: float = 1.0,
        *,
        proc_interval: float | None = None,
        watchdog: float | None = None,
        max_backoff: float = 30.0,
        lifetime: int = 3600,
    ) -> None:
        self.host = host
        self.interval = float(interval)
        self.proc_interval = proc_interval if proc_interval is not None else max(5.0, 5 * self.interval)
        self.watchdog = watchdog if watchdog is not None else max(10.0, 5 * self.interval)
        self.max_backoff = max_backoff
        self.lifetime = lifetime
        self._procs: tuple[GpuProcess, ...] = ()
        self._last_block = 0.0  # monotonic time of the last good block
        self._gpus: tuple[GpuSnapshot, ...] = ()
        self._proc_task: asyncio.Task[None] | None = None
        #: how many query streams this collector has started (for tests and diagnostics)
        self.starts = 0

    # ------------------------------------------------------------------ one-shot
    async def sample_once(self) -> GpuStatus:
        """One query and one process listing (for ``tunedeck status``)."""
        try:
            r = await self.host.run(query_argv(smi=self.host.nvidia_smi), timeout=ONESHOT_TIMEOUT + 5)
        except HostError as exc:
            return host_error_status(exc)
        except OSError as exc:
            return GpuStatus("error", message=str(exc), time=time.time())
        if r.timed_out or r.lost:
            state = "unresponsive" if r.timed_out else "host-unreachable"
            return GpuStatus(state, message=r.stderr.strip() or STATE_LABELS[state], time=time.time())
        failure = classify_failure(r.exit_status, r.stdout + "\n" + r.stderr)
        if failure is not None:
            return GpuStatus(failure[0], message=failure[1], time=time.time())
        gpus = parse_query_gpu(r.stdout)
        if not gpus and r.stdout.strip():
            return GpuStatus("error", message=not_understood(r.stdout.strip().splitlines()[0]), time=time.time())
        procs = await self._poll_processes_once(gpus)
        return GpuStatus("ok", gpus, procs or (), time=time.time())

    async def _poll_processes_once(self, gpus: Sequence[GpuSnapshot]) -> tuple[GpuProcess, ...] | None:
        """Compute processes joined to ``gpus``; None when the listing failed.

        Runs as a stream so that cancelling the poll (the collector closing)
        always ends and reaps the process.
        """
        out = await _collect(self.host, apps_argv(self.host.nvidia_smi), ONESHOT_TIMEOUT + 5)
        if out is None or out[0] != 0:
            return None
        return join_processes(parse_compute_apps(out[1]), gpus)

    # ------------------------------------------------------------------ stream
    async def stream(self) -> AsyncGenerator[GpuStatus, None]:
        """Yield a GpuStatus per block, and error states between retries. Runs until closed."""
        backoff = Backoff(1.0, self.max_backoff)
        stream: ByteStream | None = None
        reader: asyncio.Task[None] | None = None
        try:
            while True:
                got_block = False
                failure: GpuStatus | None = None
                stream = None
                reader = None
                q: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
                rotated = False
                try:
                    stream = self.host.stream(
                        query_argv(self.interval, lifetime=self.lifetime, smi=self.host.nvidia_smi)
                    )
                    self.starts += 1
                    reader = asyncio.create_task(self._read(stream, q))
                    blocks = _Blocks()
                    noise: collections.deque[str] = collections.deque(maxlen=6)
                    started = progress = time.monotonic()
                    while True:
                        item = await self._next_item(q, blocks, progress)
                        kind = item[0]
                        if kind == "pause":
                            # first block: its size is unknown until an index repeats;
                            # a short pause after a burst of lines also ends it
                            got_block = True
                            backoff.reset()
                            yield self._on_block(blocks.flush())
                            continue
                        if kind == "line":
                            gpu = parse_gpu_line(item[1])
                            if gpu is None:
                                if item[1].strip():
                                    noise.append(item[1].strip())
                                continue
                            progress = time.monotonic()
                            for block in blocks.feed(gpu):
                                got_block = True
                                backoff.reset()
                                yield self._on_block(block)
                            continue
                        if kind == "end" and got_block and self._planned_end(item[1], started):
                            rotated = True  # planned end: the lifetime ran out
                        else:
                            failure = self._failure(item, noise)
                        break
                except HostError as exc:  # raised by host.stream() itself
                    failure = host_error_status(exc)
                except OSError as exc:
                    failure = GpuStatus("error", message=f"{type(exc).__name__}: {exc}", time=time.time())
                # ---- the stream ended: make sure its process is gone before any restart
                if reader is not None:
                    await cancel_and_wait([reader], f"{self.host.target}: nvidia-smi reader")
                if stream is not None:
                    closing = asyncio.create_task(_close_quietly(stream))
                    stream = None
                    while not closing.done():
                        await asyncio.wait({closing}, timeout=max(self.watchdog, 5.0))
                        if not closing.done():
                            yield GpuStatus(
                                "unresponsive",
                                message="waiting for the previous nvidia-smi to exit",
                                time=time.time(),
                            )
                if rotated:
                    continue
                if failure is None:
                    failure = GpuStatus("error", message="nvidia-smi stream ended", time=time.time())
                await self._stop_proc_poll()
                self._procs = ()
                delay = backoff.next()
                retry_at = time.time() + delay
                msg = failure.message
                yield GpuStatus(failure.state, message=msg, time=failure.time, retry_at=retry_at)
                await asyncio.sleep(delay)
        finally:
            if reader is not None:
                await cancel_and_wait([reader], f"{self.host.target}: nvidia-smi reader")
            if stream is not None:
                await _close_quietly(stream)
            await self._stop_proc_poll()

    async def _next_item(self, q: asyncio.Queue[tuple[Any, ...]], blocks: _Blocks, progress: float) -> tuple[Any, ...]:
        """The reader's next item; ``("pause",)`` when the first block's lines paused (the block is
        complete), ``("silent",)`` when no GPU row came for the watchdog's time (it counts from the
        last GPU row, ``progress``, not the last line)."""
        if blocks.known is None and blocks.cur and not blocks.emitted:
            try:
                return await within(q.get(), min(0.25, self.interval / 2))
            except asyncio.TimeoutError:
                return ("pause",)
        left = progress + self.watchdog - time.monotonic()
        if left <= 0:
            return ("silent",)
        try:
            return await within(q.get(), left)
        except asyncio.TimeoutError:
            return ("silent",)

    def _planned_end(self, status: int | None, started: float) -> bool:
        """The query stream ended as planned: its lifetime ran out."""
        return status == 0 or (status in (124, 137) and time.monotonic() - started >= self.lifetime - 1)

    def _failure(self, item: tuple[Any, ...], noise: Sequence[str]) -> GpuStatus:
        """What the stream's end (``item``: silent, its exit, or a reader error) says went wrong."""
        kind = item[0]
        if kind == "silent":
            # still running but no rows: a recognised error text names the state
            known = classify_failure(None, "\n".join(noise)) if noise else None
            if known is not None and known[0] != "error":
                return GpuStatus(known[0], message=known[1], time=time.time())
            if noise:  # it printed, but nothing a GPU row: say what, not "no output"
                return GpuStatus("error", message=not_understood(noise[0]), time=time.time())
            return GpuStatus(
                "unresponsive", message=f"no output from nvidia-smi for {self.watchdog:g} s", time=time.time()
            )
        if kind == "end":
            status, tail = item[1], item[2]
            text = "\n".join(noise) + "\n" + tail
            f = classify_failure(status, text)
            if f is None:
                f = ("error", _first_line(text) or f"nvidia-smi exited (status {status})")
            return GpuStatus(f[0], message=f[1], time=time.time())
        exc = item[1]
        if kind == "hosterr":
            return host_error_status(exc)
        if isinstance(exc, FileNotFoundError):
            return GpuStatus("no-nvidia-smi", message=f"{exc.filename or 'timeout'}: not found", time=time.time())
        return GpuStatus("error", message=f"{type(exc).__name__}: {exc}", time=time.time())

    def _on_block(self, block: tuple[GpuSnapshot, ...]) -> GpuStatus:
        self._gpus = block
        self._last_block = time.monotonic()
        if self._proc_task is None or self._proc_task.done():
            self._proc_task = asyncio.create_task(self._proc_loop())
        return GpuStatus("ok", block, join_processes(self._procs, block), time=time.time())

    async def _stop_proc_poll(self) -> None:
        task, self._proc_task = self._proc_task, None
        if task is not None:
            await cancel_and_wait([task], f"{self.host.target}: GPU process poll")

    async def _read(self, stream: ByteStream, q: asyncio.Queue[tuple[Any, ...]]) -> None:
        buf = b""
        # The caller closes the stream (and waits for its process to exit).
        try:
            async for chunk in stream:
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if q.qsize() >= _MAX_QUEUED_LINES:  # nobody is reading: keep the newest
                        q.get_nowait()
                    q.put_nowait(("line", line.decode("utf-8", "replace")))
                if len(buf) > 1 << 16:  # no newline in 64 KiB: not our output
                    buf = b""
            if buf:
                q.put_nowait(("line", buf.decode("utf-8", "replace")))
            q.put_nowait(("end", stream.exit_status, stream.stderr_tail))
        except asyncio.CancelledError:
            raise
        except HostError as exc:
            q.put_nowait(("hosterr", exc))
        except Exception as exc:  # noqa: BLE001 - reported as a state, never raised
            q.put_nowait(("oserr", exc))

    async def _proc_loop(self) -> None:
        """Chained ``--query-compute-apps`` poll; only while the query stream is healthy."""
        while True:
            fresh = time.monotonic() - self._last_block < max(self.watchdog, 2 * self.interval)
            if fresh:
                procs = await self._poll_processes_once(self._gpus)
                if procs is not None:
                    self._procs = procs
            await asyncio.sleep(self.proc_interval)


async def _collect(host: Host, argv: Sequence[str], timeout: float) -> tuple[int | None, str] | None:
    """Run ``argv`` through ``host.stream``; (exit status, stdout), or None on a host error or timeout."""
    try:
        stream = host.stream(argv)
    except (HostError, OSError):
        return None
    chunks: list[bytes] = []

    async def read() -> None:
        async for chunk in stream:
            chunks.append(chunk)

    try:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns a result that
        # arrives together with a cancel instead of raising, and the poll would go on
        async with asyncio.timeout(timeout):
            await read()
    except (HostError, OSError, asyncio.TimeoutError):
        return None
    finally:
        await _close_quietly(stream)
    return stream.exit_status, b"".join(chunks).decode("utf-8", "replace")


async def _close_quietly(stream: ByteStream) -> None:
    with contextlib.suppress(Exception):
        await stream.aclose()


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""
