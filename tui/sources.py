"""What the dashboard polls: small protocols the app's workers drive.

The real implementations are the collectors in :mod:`tui.collectors`
(``GpuCollector``, ``HostCollector``, ``ServerCollector``); tests and the
screenshot script inject scripted fakes through :func:`tui.app.make_app`.
No Textual here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, AsyncIterator, Callable, Protocol, runtime_checkable

from tui.model import GpuStatus, HostStats, ServerStats

if TYPE_CHECKING:  # pragma: no cover
    from tui.services.hosts import Host


@runtime_checkable
class GpuSource(Protocol):
    """A long-lived stream of GPU snapshots. Host and driver failures arrive as
    ``GpuStatus(state != "ok")``; the iterator may end (the app restarts it)."""

    def stream(self) -> AsyncIterator[GpuStatus]: ...


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


def backoff(attempt: int, *, base: float = 1.0, cap: float = 60.0) -> float:
    """Delay before retry ``attempt`` (1-based): exponential, capped, with equal jitter
    (half fixed, half random), so a countdown never reads 0 s and many dashboards
    don't reconnect in lockstep."""
    d = min(cap, base * 2 ** max(0, attempt - 1))
    return d / 2 + random.uniform(0, d / 2)


BackoffFn = Callable[[int], float]


def default_sources(host: "Host", *, interval: float = 1.0) -> Sources:
    """The real collectors for ``host`` (those present in :mod:`tui.collectors`)."""
    try:
        from tui.collectors.gpu import GpuCollector  # type: ignore[import-not-found]
    except ImportError:
        GpuCollector = None  # type: ignore[assignment,misc]  # noqa: N806
    try:
        from tui.collectors.host import HostCollector  # type: ignore[import-not-found]
    except ImportError:
        HostCollector = None  # type: ignore[assignment,misc]  # noqa: N806
    return Sources(
        gpu=GpuCollector(host, interval=interval) if GpuCollector else None,
        host=HostCollector(host) if HostCollector else None,
        servers=None,
    )
