"""What the dashboard polls: small protocols the app's workers drive.

The real implementations are the collectors in :mod:`tunedeck.collectors`
(``GpuCollector``, ``HostCollector``, ``ServerCollector``); tests and the
screenshot script inject scripted fakes through :func:`tunedeck.ui.app.make_app`.
No Textual here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncGenerator, Callable, Iterable, Protocol, runtime_checkable

from tunedeck.model import GpuStatus, HostStats, ServerStats

if TYPE_CHECKING:  # pragma: no cover
    from tunedeck.hostops.hosts import Host


@runtime_checkable
class GpuSource(Protocol):
    """A long-lived stream of GPU snapshots. Host and driver failures arrive as
    ``GpuStatus(state != "ok")``; the iterator may end (the app restarts it)."""

    def stream(self) -> AsyncGenerator[GpuStatus, None]: ...


@runtime_checkable
class HostSource(Protocol):
    """One sample of the host's CPU/memory/load; raises ``HostError`` when unreachable."""

    async def sample(self) -> HostStats: ...


@runtime_checkable
class ServerSource(Protocol):
    """One sample of every server known on the host (down servers included)."""

    async def sample(self) -> tuple[ServerStats, ...]: ...


@dataclass(frozen=True)
class Sources:
    """The collectors behind one dashboard. ``None`` leaves that panel empty."""

    gpu: GpuSource | None = None
    host: HostSource | None = None
    servers: ServerSource | None = None


BackoffFn = Callable[[int], float]


class WatchedServers:
    """A :class:`ServerSource` over ``tunedeck.collectors.servers.ServerCollector``.

    Watches the servers tunedeck knows on the host
    (``tunedeck.collectors.status.known_servers``: live run folders, re-read every
    ``refresh`` seconds) plus fixed ``extra`` specs (servers given by URL).
    """

    def __init__(self, host: "Host", extra: Iterable[Any] = (), *, refresh: float = 10.0) -> None:
        from tunedeck.collectors.servers import ServerCollector

        self.host = host
        self.extra = tuple(extra)
        self.refresh = refresh
        self.collector = ServerCollector(host, self.extra)
        self._next_refresh = 0.0
        self._next_recheck = 0.0

    async def _known(self) -> tuple[Any, ...]:
        from tunedeck.collectors.status import known_servers
        from tunedeck.hostops.hosts import HostError

        try:
            return tuple(await known_servers(self.host))
        except (HostError, OSError):
            return tuple(s for s in self.collector.specs if s not in self.extra)

    #: a run's server that stops answering has its runs re-listed (and a dead one settled) at
    #: most this often, before the next regular refresh
    RECHECK_S = 3.0

    async def sample(self) -> tuple[ServerStats, ...]:
        now = time.monotonic()
        if now >= self._next_refresh:
            await self._refresh(now)
        if not self.collector.specs:
            return ()
        from tunedeck.hostops.startupstate import reconcile_servers

        rows = await self.collector.sample()
        if any(r.run_id and r.state == "down" for r in rows) and now >= self._next_recheck:
            # a run's server does not answer: loading, or its process died. Re-list the runs now
            # (a dead one is settled from its log) instead of at the next refresh
            self._next_recheck = now + self.RECHECK_S
            await self._refresh(now)
            rows = await self.collector.sample()
        return reconcile_servers(rows)

    async def _refresh(self, now: float) -> None:
        self._next_refresh = now + self.refresh
        known = await self._known()
        names = {s.name for s in self.extra}
        self.collector.set_specs(tuple(s for s in known if s.name not in names) + self.extra)

    async def aclose(self) -> None:
        await self.collector.aclose()


def default_sources(host: "Host", *, interval: float = 1.0, servers: Iterable[Any] = (), sim: bool = False) -> Sources:
    """The real collectors for ``host``: one ``nvidia-smi -lms`` stream, host figures
    (psutil locally, ``/proc`` over SSH) and the servers tunedeck knows there.

    On a remote host all three read the host sampler (:mod:`tunedeck.collectors.sampled`), unless
    ``TUNEDECK_HOST_SAMPLER=off`` (the per-command collectors, e.g. to measure them).

    ``servers``: extra ``ServerSpec`` values to watch besides the ones tunedeck launched.
    ``sim``: a ``--sim`` target, read through the sampler (local too), which gives a host with no
    nvidia-smi of its own the simulated one (the GPUs its sim servers hold).
    """
    import os

    from tunedeck.collectors.gpu import GpuCollector
    from tunedeck.collectors.hoststats import HostCollector

    if (sim or not host.is_local) and os.environ.get("TUNEDECK_HOST_SAMPLER", "on") != "off":
        # one sampler process on the host, one channel; per-command polling only as its fallback
        from tunedeck.collectors.sampled import sampled_sources

        sources: Sources = sampled_sources(host, interval=interval, servers=servers, sim=sim)
        return sources
    return Sources(
        gpu=GpuCollector(host, interval=interval),
        host=HostCollector(host),
        servers=WatchedServers(host, servers),
    )
