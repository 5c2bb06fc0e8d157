"""Several hosts at once: named groups of the config file, the fleet's members and a
one-shot status of every host (``tunedeck status --host A --host B``, ``--host @GROUP``).

Groups live in tunedeck's config file (the one that holds ``[keymap]``: ``$TUNEDECK_CONFIG``,
``./tunedeck.toml`` or ``<config dir>/config.toml``)::

    [groups]
    lab = ["gpu-a", "gpuop@gpu-b:2222", "local"]

and are named on the command line as ``--host @lab`` (repeatable, mixed with plain targets).
Each member is a TARGET as ``--host`` takes it. No Textual here.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from tunedeck.config import load_config, read_config
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.target import parse_target
from tunedeck.model import DeploymentSummary, StatusSnapshot
from tunedeck.services.runtime import RuntimeUnavailable
from tunedeck.services.targets import get_host
from tunedeck.util.safety import UnsafeInput

log = logging.getLogger(__name__)

#: the one-shot status of one host may take this long before it counts as not answering
STATUS_TIMEOUT = 60.0


class GroupError(ValueError):
    """A ``[groups]`` table or an ``@GROUP`` name is wrong (the message names file and key)."""


def is_group(item: str) -> bool:
    """True for ``@NAME`` (a group of the config file), False for a plain target."""
    return item.startswith("@")


def load_groups(path: Path | None = None) -> dict[str, tuple[str, ...]]:
    """``{name: (target, …)}`` from the config file's ``[groups]`` ({} when there is none)."""
    cfg = read_config(path) if path is not None else load_config()
    if cfg.groups_error:
        raise GroupError(cfg.groups_error)
    return dict(cfg.groups)


def expand_targets(items: Sequence[str], groups: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """The targets named by ``items`` (plain targets and ``@GROUP`` names), in order, each once.

    Raises :class:`GroupError` for an unknown group and ``UnsafeInput`` for a bad target."""
    out: list[str] = []
    for item in items:
        if is_group(item):
            if groups is None:
                groups = load_groups()
            name = item[1:]
            if name not in groups:
                where = load_config().path
                known = ", ".join(sorted(groups)) or "none"
                raise GroupError(
                    f"no group {name!r} in {where or 'the config file (there is none)'} ([groups]; known: {known})"
                )
            members: Sequence[str] = groups[name]
        else:
            parse_target(item)
            members = (item,)
        for m in members:
            if m not in out:
                out.append(m)
    return out


# ---------------------------------------------------------------------- members


@dataclass(frozen=True)
class FleetMember:
    """One host of the fleet view: its target, its Host (one SSH connection) and its sources
    (one host sampler), built like the single-host dashboard's."""

    target: str
    host: Host | None
    sources: Any  # tunedeck.collectors.sources.Sources


def fleet_members(
    targets: Iterable[str],
    *,
    interval: float = 1.0,
    make_host: Callable[[str], Host] | None = None,
    sim: bool = False,
) -> list[FleetMember]:
    """A member per target: no connection is made yet (each connects in its own poll loop)."""
    from tunedeck.collectors.sources import default_sources

    out = []
    for t in targets:
        host = (make_host or get_host)(t)
        out.append(FleetMember(t, host, default_sources(host, interval=interval, sim=sim)))
    return out


# ---------------------------------------------------------------------- one-shot status


@dataclass(frozen=True)
class FleetStatus:
    """One host's answer to ``tunedeck status``: its snapshot, or why it did not answer."""

    target: str
    snapshot: StatusSnapshot | None = None
    error: HostError | None = None

    @property
    def answered(self) -> bool:
        return self.snapshot is not None


async def host_status(
    target: str,
    servers: Iterable[Any] = (),
    *,
    timeout: float = STATUS_TIMEOUT,
    make_host: Callable[[str], Host] | None = None,
    sim: bool = False,
) -> FleetStatus:
    """Connect to ``target`` (one connection) and read its status once; never raises.

    A host that refuses or cannot be reached (unreachable, auth, host key) is an entry with
    its error, as is one that does not answer within ``timeout`` seconds."""
    from tunedeck.collectors.status import collect_status

    try:
        host = (make_host or get_host)(target)
    except UnsafeInput as e:
        return FleetStatus(target, error=HostError("invalid-input", str(e), target=target))
    except HostError as e:
        return FleetStatus(target, error=e)
    try:
        connect = getattr(host, "connect", None)
        if connect is not None:
            await asyncio.wait_for(connect(), timeout)
        if sim:
            from tunedeck.services import runtime

            await asyncio.wait_for(runtime.ensure_sim(host), timeout)  # its simulated GPUs
        snap = await asyncio.wait_for(collect_status(host, servers), timeout)
        return FleetStatus(target, snapshot=snap)
    except HostError as e:
        log.warning("%s: status: %s", target, e)
        return FleetStatus(target, error=e)
    except (asyncio.TimeoutError, TimeoutError):
        log.warning("%s: status: no answer in %g s", target, timeout)
        return FleetStatus(target, error=HostError("timeout", f"no answer in {timeout:g} s", target=target))
    except RuntimeUnavailable as e:
        log.warning("%s: status: --sim: %s", target, e)
        return FleetStatus(target, error=HostError("error", f"--sim: {e}", target=target))
    except OSError as e:
        log.warning("%s: status: %s", target, e)
        return FleetStatus(target, error=HostError("unreachable", f"{type(e).__name__}: {e}", target=target))
    finally:
        try:
            await asyncio.wait_for(host.close(), 5)
        except Exception as e:  # noqa: BLE001 - the answer is in; closing must not hide it
            log.warning("%s: closing the connection failed: %r", target, e)


async def fleet_status(
    targets: Sequence[str],
    servers: Iterable[Any] = (),
    *,
    timeout: float = STATUS_TIMEOUT,
    make_host: Callable[[str], Host] | None = None,
    sim: bool = False,
) -> list[FleetStatus]:
    """:func:`host_status` of every target at once (one connection each), in the given order."""
    extra = tuple(servers)
    return list(
        await asyncio.gather(*(host_status(t, extra, timeout=timeout, make_host=make_host, sim=sim) for t in targets))
    )


def fleet_json(entries: Sequence[FleetStatus]) -> dict[str, Any]:
    """``{"hosts": [...]}``: each host's usual ``status --json`` object, or
    ``{"target": T, "error": {"kind": K, "message": M}}`` for a host that did not answer."""
    from tunedeck.collectors.status import status_json

    hosts: list[dict[str, Any]] = []
    for e in entries:
        if e.snapshot is not None:
            hosts.append(status_json(e.snapshot))
        else:
            err = e.error or HostError("error", "no answer", target=e.target)
            hosts.append({"target": e.target, "error": {"kind": err.kind, "message": err.message}})
    return {"hosts": hosts}


def _same_host(a: str, b: str) -> bool:
    """Two TARGETs naming the same host (``gpu-a`` and ``gpuop@gpu-a:22`` do not: the user and
    port are part of the target)."""
    if a == b:
        return True
    try:
        return parse_target(a) == parse_target(b)
    except UnsafeInput:
        return False


def deployments_on(targets: Sequence[str], store: Any = None) -> tuple[DeploymentSummary, ...]:
    """The deployments of this machine's records (not stopped) with a node among ``targets``,
    newest first. Reads local files: call it off the event loop."""
    from tunedeck.services.deploy import DeploymentStore

    out = []
    for rec in (store or DeploymentStore()).all():
        if rec.status == "stopped" or not any(_same_host(n, t) for n in rec.nodes for t in targets):
            continue
        out.append(
            DeploymentSummary(
                deploy_id=rec.deploy_id,
                profile=rec.profile,
                engine=rec.engine,
                mode=rec.mode,
                nodes=tuple(rec.nodes),
                status=rec.status,
                http_port=rec.http_port,
                diagnosis=rec.diagnosis,
                first_failed=rec.first_failed,
                created=rec.created,
                targets=tuple(next((t for t in targets if _same_host(n, t)), None) for n in rec.nodes),
            )
        )
    out.sort(key=lambda d: d.created, reverse=True)
    return tuple(out)


__all__ = [
    "FleetMember",
    "FleetStatus",
    "GroupError",
    "deployments_on",
    "expand_targets",
    "fleet_json",
    "fleet_members",
    "fleet_status",
    "host_status",
    "is_group",
    "load_groups",
]
