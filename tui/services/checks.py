"""Pre-flight as the launch will run it: the engine, the demo's simulator, or (``--sim``) the
simulator from the host-side runtime, shipped to the host first.

Every way to launch (``launch``, an A/B, the dashboard) checks through :func:`preflight_for`,
so a ``--sim`` target is never checked (or refused) for an engine it will not run.
"""

from __future__ import annotations

from typing import Any, Collection

from tunedeck.hostops.hosts import Host
from tunedeck.profiles.deploy import sim_executable
from tunedeck.profiles.model import ServerProfile
from tunedeck.profiles.preflight import PreflightReport, preflight
from tunedeck.services import runtime


async def preflight_for(
    host: Host,
    profile: ServerProfile,
    *,
    demo: bool = False,
    sim: bool = False,
    store: Any = None,
    allow_dangerous: bool = False,
    use_cache: bool = True,
) -> PreflightReport:
    """:func:`tunedeck.profiles.preflight.preflight` for what will run on ``host``. With ``sim`` (and
    not the demo, whose simulator is on its PATH) the runtime is ensured there (the profile's
    python first) and its ``sim ENGINE`` answers the version, help and backend questions; its
    simulated nvidia-smi answers the GPU one. Raises :class:`runtime.RuntimeUnavailable` and
    :class:`~tunedeck.hostops.hosts.HostError` as :func:`runtime.ensure` does."""
    exe: list[str] | None = None
    on_host: list[str] | None = None
    if sim and not demo:
        exe = sim_executable(profile)
        on_host = await runtime.sim_argv(host, exe, python=profile.python)
    return await preflight(
        host,
        profile,
        demo=demo,
        store=store,
        allow_dangerous=allow_dangerous,
        use_cache=use_cache,
        executable=exe,
        probe_executable=on_host,
    )


def refusal(label: str, report: PreflightReport, *, ignore: Collection[str] = ()) -> str | None:
    """One line naming what pre-flight found wrong with a side (``label``: "A (base)"), or None.

    ``ignore``: finding codes that do not refuse here (an A/B that stops tunedeck's running servers
    first ignores ``port.in-use``: a port still held after that stop fails the launch, diagnosed)."""
    errors = [f.message for f in report.errors if f.code not in ignore]
    if report.ok or (not errors and report.command is not None):
        return None
    errors = errors or ["no command could be built"]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{label}: pre-flight failed: {errors[0]}{more}"


__all__ = ["preflight_for", "refusal"]
