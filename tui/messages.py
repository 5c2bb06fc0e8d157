"""Cross-cutting messages of the dashboard.

The poll workers of :class:`tui.app.TunedeckApp` post these to the app;
each carries an immutable snapshot from :mod:`tui.model` (or a
:class:`LinkState`). They describe *state*, so a newer message for the
same host supersedes an older one still waiting in the queue
(``can_replace``): a slow UI skips stale frames instead of falling
behind. Never use ``can_replace`` for events (log lines, bench samples).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from tui.model import GpuStatus, HostStats, ServerStats


@dataclass(frozen=True, slots=True)
class LinkState:
    """The connection state of one target host, as the banner and header show it."""

    target: str
    """The host as the user named it."""
    state: str
    """``connecting`` | ``connected`` | ``unreachable`` (retrying) | ``failed`` (not retried:
    auth or host-key errors) | ``error`` (a collector crashed; restarted)."""
    attempt: int = 0
    """Failed attempts in a row (0 while connected)."""
    retry_at: float | None = None
    """``time.monotonic()`` of the next attempt, or None when none is scheduled."""
    last_error: str = ""
    """The last error's message."""
    kind: str = ""
    """The :class:`tui.services.hosts.HostError` kind of the last error, if any."""

    @property
    def ok(self) -> bool:
        return self.state == "connected"


@dataclass
class _HostMessage(Message):
    host: str
    """Target host the snapshot belongs to."""

    def can_replace(self, message: Message) -> bool:
        return type(message) is type(self) and getattr(message, "host", None) == self.host


@dataclass
class GpuSamples(_HostMessage):
    """A new :class:`GpuStatus` (all GPUs and processes, or why they can't be read)."""

    status: GpuStatus
    """The snapshot."""


@dataclass
class HostSamples(_HostMessage):
    """New CPU/memory/load/uptime figures of the host."""

    stats: HostStats
    """The snapshot."""


@dataclass
class ServerSamples(_HostMessage):
    """New figures for every server known on the host."""

    servers: tuple[ServerStats, ...]
    """One snapshot per server."""


@dataclass
class HostStateChanged(_HostMessage):
    """The link to the host changed state (or its retry countdown was re-armed)."""

    link: LinkState
    """The new state."""


__all__ = ["GpuSamples", "HostSamples", "HostStateChanged", "LinkState", "ServerSamples"]
