"""Cross-cutting messages of the dashboard.

The poll workers of :class:`tunedeck.ui.app.TunedeckApp` post these to the app;
each carries an immutable snapshot from :mod:`tunedeck.model` (or a
:class:`tunedeck.model.LinkState`). They describe *state*, so a newer message for the
same host supersedes an older one still waiting in the queue
(``can_replace``): a slow UI skips stale frames instead of falling
behind. Never use ``can_replace`` for events (log lines, bench samples).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from tunedeck.model import DeploymentSummary, GpuStatus, HostStats, LinkState, ServerStats


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


@dataclass
class DeploymentSamples(Message):
    """The multi-node deployments on this machine's records that touch the hosts shown."""

    deployments: tuple[DeploymentSummary, ...]
    """Newest first."""

    def can_replace(self, message: Message) -> bool:
        return type(message) is type(self)


__all__ = ["DeploymentSamples", "GpuSamples", "HostSamples", "HostStateChanged", "LinkState", "ServerSamples"]
