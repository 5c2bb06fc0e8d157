"""Polling one host for the dashboard, single-host or fleet: its three chained loops (GPUs, host
figures, servers) as workers of the app in the group ``poll-<target>`` (``exit_on_error=False``;
the next poll starts only after the previous one ended, never ``set_interval`` + ``exclusive``),
each posting its snapshots as messages (:mod:`tunedeck.ui.messages`) keyed by the host; a link that
fails is told with :class:`~tunedeck.ui.messages.HostStateChanged`, a crashed loop is said and
restarted, and the newest snapshots of a host are a :class:`Latest`."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from textual.app import App
from textual.worker import Worker

from tunedeck.collectors.sources import BackoffFn, Sources
from tunedeck.model import GpuStatus, HostStats, LinkState, ServerStats
from tunedeck.ui.messages import GpuSamples, HostSamples, HostStateChanged, ServerSamples

if TYPE_CHECKING:  # pragma: no cover
    from tunedeck.hostops.hosts import Host

log = logging.getLogger(__name__)


#: closes left behind at their timeout, held until they end (asyncio keeps only weak references)
_LEFT_BEHIND: set[asyncio.Future[Any]] = set()


def _leave_behind(what: str, task: asyncio.Future[Any]) -> None:
    """Ask ``task`` to end and let it go; a failure it still ends with is logged then."""
    task.cancel()
    _LEFT_BEHIND.add(task)

    def ended(t: asyncio.Future[Any]) -> None:
        _LEFT_BEHIND.discard(t)
        if not t.cancelled() and (err := t.exception()) is not None:
            log.warning("closing %s failed after its timeout", what, exc_info=err)

    task.add_done_callback(ended)


async def close_logged(what: str, aw: Awaitable[Any], timeout: float = 3.0) -> None:
    """Close something on the way out (leaving the app, switching hosts): a close that fails or
    hangs past ``timeout`` is logged and left behind, never raised into the exit."""
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        _leave_behind(what, task)
        raise
    if not done:
        # left behind: wait_for() would wait for the cancellation too, forever for something
        # that ignores it
        _leave_behind(what, task)
        log.warning("%s did not close within %g s", what, timeout)
    elif not task.cancelled() and (err := task.exception()) is not None:
        log.warning("closing %s failed", what, exc_info=err)


async def close_host(target: str, sources: Sources, host: "Host | None") -> None:
    """Close a host's collectors, then (``host`` given) its connection; see :func:`close_logged`."""
    for source in (sources.gpu, sources.host, sources.servers):
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await close_logged(f"{target}: the {type(source).__name__}", aclose())
    if host is not None:
        await close_logged(f"the connection to {target}", host.close())


@dataclass
class Latest:
    """The newest snapshot of each kind of one host (what a screen draws when it (re)appears)."""

    link: LinkState
    gpu: GpuStatus = field(default_factory=lambda: GpuStatus(state="waiting"))
    host: HostStats | None = None
    servers: tuple[ServerStats, ...] | None = None

    @classmethod
    def connecting(cls, target: str, sources: Sources) -> "Latest":
        """Nothing seen yet of ``target``: connecting, and no GPU feed where there is no collector."""
        latest = cls(link=LinkState(target, "connecting"))
        if sources.gpu is None:
            latest.gpu = GpuStatus(state="no-collector")
        return latest

    def link_from_gpu(self, status: GpuStatus) -> LinkState | None:
        """For a host without a host sampler, whose GPU feed tells the link: the link that
        ``status`` says (connected again; unreachable, with the feed's next attempt as the retry
        time), or None when it says nothing new."""
        if status.state == "ok" and not self.link.ok:
            return LinkState(self.link.target, "connected")
        if status.state == "host-unreachable":
            retry_at = time.monotonic() + max(0.0, status.retry_at - time.time()) if status.retry_at else None
            attempt = self.link.attempt + 1
            return LinkState(self.link.target, "unreachable", attempt, retry_at, status.message, "unreachable")
        return None


def lift_refusal(host: Any) -> None:
    """The user asked to reconnect: a host-key or authentication refusal that ``host`` (an SSH
    host) remembers is lifted for one new attempt."""
    retry = getattr(host, "retry", None)
    if callable(retry):
        retry()


class PollSettings(Protocol):
    """The pace of the loops, read at every poll (the dashboard app: a change applies at once)."""

    interval: float
    sample_timeout: float
    backoff: BackoffFn
    restart_delay: float


@dataclass(eq=False)
class Poller:
    """The poll loops of one host (``target``, ``sources``) as workers of ``app``, at the pace of
    ``settings``. ``link_ok`` says whether the app shows the host's link as up (the host loop
    tells a recovery once)."""

    LOOPS = ("gpu", "host", "servers")

    app: App[Any]
    target: str
    sources: Sources
    _: KW_ONLY
    #: the app itself, as a rule: left out of the repr, which names the app already
    settings: PollSettings = field(repr=False)
    link_ok: Callable[[], bool] = field(repr=False)
    _stopped: bool = field(default=False, init=False)

    @property
    def group(self) -> str:
        return f"poll-{self.target}"

    def start(self) -> None:
        self._stopped = False
        for name in self.LOOPS:
            self._start_worker(name)

    async def stop(self, timeout: float = 5.0) -> None:
        """Cancel the poll workers and wait until they (and the processes they hold) ended; a
        crashed loop's restart still pending is dropped."""
        self._stopped = True
        workers = [w for w in self.app.workers if w.group == self.group]
        for w in workers:
            w.cancel()
        if workers:
            await close_logged(
                f"{self.target}: the poll workers",
                asyncio.gather(*(w.wait() for w in workers), return_exceptions=True),
                timeout,
            )

    async def restart(self) -> None:
        """The loops again (reconnect): the old ones end first, their nvidia-smi included, so
        a host never has two of each."""
        await self.stop()
        self.start()

    def crashed(self, worker: Worker[Any]) -> None:
        """``worker``, one of the loops, ended on an error: said (log and link state), and
        started again after ``restart_delay``."""
        err = worker.error
        log.error(
            "%s: the %s collector crashed; restarting it in %g s",
            self.target,
            worker.name,
            self.settings.restart_delay,
            exc_info=err,
        )
        self._set_link(
            LinkState(self.target, "error", last_error=f"{worker.name} collector crashed: {type(err).__name__}: {err}")
        )
        name = worker.name

        def restart() -> None:
            if not self._stopped:
                self._start_worker(name)

        self.app.set_timer(self.settings.restart_delay, restart)

    def _start_worker(self, name: str) -> Worker[None] | None:
        source = {"gpu": self.sources.gpu, "host": self.sources.host, "servers": self.sources.servers}[name]
        if source is None:
            return None
        loop = getattr(self, f"_{name}_loop")
        # the loop's coroutine is made when the worker runs: a worker cancelled before it started
        # (stop() right after start()) leaves no coroutine behind that was never awaited
        return self.app.run_worker(functools.partial(loop, source), name=name, group=self.group, exit_on_error=False)

    def _set_link(self, link: LinkState) -> None:
        self.app.post_message(HostStateChanged(self.target, link))

    async def _gpu_loop(self, source: Any) -> None:
        from tunedeck.hostops.hosts import HostError

        attempt = 0
        while True:
            stream = source.stream()
            try:
                async for status in stream:
                    attempt = 0
                    self.app.post_message(GpuSamples(self.target, status))
            except HostError as e:  # the protocol says it doesn't raise; be safe anyway
                self.app.post_message(
                    GpuSamples(self.target, GpuStatus("host-unreachable", message=str(e), time=time.time()))
                )
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()  # ends the nvidia-smi process now, even when cancelled
            attempt += 1
            await asyncio.sleep(min(self.settings.backoff(attempt), 30.0))

    async def _host_loop(self, source: Any) -> None:
        from tunedeck.hostops.hosts import HostError

        attempt = 0
        while True:
            t0 = time.monotonic()
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that comes as
                # the sample does, and a loop that ignores stop() runs on beside the new one
                async with asyncio.timeout(self.settings.sample_timeout):
                    stats = await source.sample()
            except (HostError, TimeoutError) as e:
                if isinstance(e, HostError):
                    kind, msg, retry = e.kind, e.message, e.retryable
                else:
                    kind, msg, retry = "timeout", f"no answer in {self.settings.sample_timeout:g} s", True
                attempt += 1
                if not retry:
                    self._set_link(LinkState(self.target, "failed", attempt, None, msg, kind))
                    return
                delay = self.settings.backoff(attempt)
                self._set_link(LinkState(self.target, "unreachable", attempt, time.monotonic() + delay, msg, kind))
                await asyncio.sleep(delay)
                continue
            attempt = 0
            if not self.link_ok():
                self._set_link(LinkState(self.target, "connected"))
            self.app.post_message(HostSamples(self.target, stats))
            await asyncio.sleep(max(0.0, self.settings.interval - (time.monotonic() - t0)))

    async def _servers_loop(self, source: Any) -> None:
        from tunedeck.hostops.hosts import HostError

        while True:
            t0 = time.monotonic()
            try:
                async with asyncio.timeout(self.settings.sample_timeout):  # see _host_loop
                    servers = await source.sample()
            except (HostError, TimeoutError):
                pass  # the host loop shows the link state; keep the last figures
            else:
                self.app.post_message(ServerSamples(self.target, tuple(servers)))
            await asyncio.sleep(max(0.0, self.settings.interval - (time.monotonic() - t0)))


__all__ = ["Latest", "PollSettings", "Poller", "close_host", "close_logged", "lift_refusal"]
