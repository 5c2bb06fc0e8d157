"""One-shot status of a host: GPUs, host figures and servers (``tunedeck status``)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Iterable, Sequence

from tunedeck.collectors.gpu import GpuCollector
from tunedeck.collectors.hoststats import HostCollector
from tunedeck.collectors.servers import ServerCollector, ServerSpec
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.model import GpuStatus, HostStats, ServerStats, StatusSnapshot, jsonable

log = logging.getLogger(__name__)


#: a run that failed stays in the server list this long after it was found dead: its row reads
#: ``failed`` with its cause (the Status screen, ``tunedeck status``), then it is only in ``runs``
RECENT_FAILURE_S = 900.0


async def known_servers(host: Host) -> tuple[ServerSpec, ...]:
    """Servers tunedeck launched on ``host``: one ServerSpec per live run folder on the
    host that has a port (so runs started from another machine or an earlier
    dashboard are found too), and the runs that failed in the last :data:`RECENT_FAILURE_S`.
    The model comes from the local run record when there is one. A run whose process is gone
    while its record still says it lives is re-read first (:func:`settle_ended_runs`).
    """
    from tunedeck.hostops.hostruns import list_host_runs

    runs = await list_host_runs(host)
    await settle_ended_runs(host, runs)
    return servers_of_runs(host, runs)


async def settle_ended_runs(host: Host, runs: Iterable[Any]) -> bool:
    """Re-read ``host``'s runs when one of ``runs`` (``HostRun`` values) has no process while
    its local record still says it is launching, starting or ready: it is settled from its own
    log (failed with its cause, the journal corrected), as ``tunedeck runs`` does, so a view that
    polls the host shows the death within one poll. True when a re-read was done."""
    from tunedeck.hostops.hosts import target_name
    from tunedeck.hostops.runstore import ENDED, RunStore
    from tunedeck.services.journal import reread_runs

    local = {rec.run_id: rec for rec in RunStore().all(target_name(host))}
    dead = [r.run_id for r in runs if not r.alive and r.run_id in local and local[r.run_id].status not in ENDED]
    if not dead:
        return False
    log.info("%s: run(s) %s ended: re-reading them", target_name(host), ", ".join(dead))
    try:
        await reread_runs(host)
    except (HostError, OSError) as e:
        log.warning("%s: re-reading ended runs failed: %s", target_name(host), e)
        return False
    return True


def servers_of_runs(host: Host, runs: Iterable[Any], *, now: float | None = None) -> tuple[ServerSpec, ...]:
    """ServerSpecs of the live runs among ``runs`` (``HostRun`` values) that have a port, and of
    the runs that failed within :data:`RECENT_FAILURE_S` (unless a live run took their port)."""
    from tunedeck.hostops.hosts import target_name
    from tunedeck.hostops.runstore import FAILED, RunStore

    now = time.time() if now is None else now
    runs = list(runs)
    local = {rec.run_id: rec for rec in RunStore().all(target_name(host))}
    live_ports = {r.meta.get("port") for r in runs if r.alive}
    specs: list[ServerSpec] = []
    for run in runs:
        port = run.meta.get("port")
        rec = local.get(run.run_id)
        if not isinstance(port, int):
            continue
        if not run.alive:
            recent = rec is not None and rec.status == FAILED and now - (rec.ended or 0.0) < RECENT_FAILURE_S
            if not recent or port in live_ports:
                continue
        engine = run.meta.get("engine")
        name = run.meta.get("profile") or run.run_id
        specs.append(
            ServerSpec(
                str(name),
                engine if engine in ("sglang", "vllm") else "auto",
                port,
                run_id=run.run_id,
                model=model_from_argv(rec.argv) if rec is not None else "",
            )
        )
    # two live runs with the same profile name: tell them apart by run id
    names = [s.name for s in specs]
    return tuple(
        s if names.count(s.name) == 1 else ServerSpec(f"{s.name}:{s.run_id}", s.engine, s.port, s.run_id, s.model)
        for s in specs
    )


def model_from_argv(argv: Sequence[str]) -> str:
    """The model an engine command line serves (``--model-path``, ``--model``, ``vllm serve MODEL``)."""
    args = list(argv)
    for flag in ("--served-model-name", "--model-path", "--model"):
        for i, a in enumerate(args):
            if a == flag and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(flag + "="):
                return a.split("=", 1)[1]
    if "serve" in args:
        i = args.index("serve")
        if i + 1 < len(args) and not args[i + 1].startswith("-"):
            return args[i + 1]
    return ""


async def collect_status(host: Host, servers: Iterable[ServerSpec] = (), *, cpu_window: float = 0.3) -> StatusSnapshot:
    """GPUs, host stats and servers once, concurrently. Failures become states, never raise.

    ``cpu_window``: seconds between the two host samples that give CPU %
    (0: one sample, CPU % is NA).
    """
    extra = tuple(servers)

    async def gpus() -> GpuStatus:
        return await GpuCollector(host).sample_once()

    async def hoststats() -> HostStats:
        c = HostCollector(host)
        stats = await c.sample()
        if cpu_window > 0:
            await asyncio.sleep(cpu_window)
            stats = await c.sample()
        return stats

    async def server_stats() -> tuple[ServerStats, ...]:
        try:
            known = await known_servers(host)
        except (HostError, OSError):
            known = ()
        names = {s.name for s in extra}
        specs = tuple(s for s in known if s.name not in names) + extra
        if not specs:
            return ()
        from tunedeck.hostops.startupstate import reconcile_servers

        async with ServerCollector(host, specs) as sc:
            return reconcile_servers(await sc.sample())

    g, h, s = await asyncio.gather(gpus(), hoststats(), server_stats(), return_exceptions=True)
    host_error = ""
    stats: HostStats | None = None
    if isinstance(h, BaseException):
        host_error = str(h) if isinstance(h, HostError) else f"{type(h).__name__}: {h}"
    else:
        stats = h
    if isinstance(g, BaseException):
        g = GpuStatus("error", message=f"{type(g).__name__}: {g}")
    if isinstance(s, BaseException):
        s = ()
    return StatusSnapshot(target=host.target, gpus=g, host=stats, servers=tuple(s), host_error=host_error)


def status_json(snap: StatusSnapshot) -> dict[str, Any]:
    """The ``--json`` shape: flat ``gpus``/``host``/``servers`` keys, NA as null."""
    return {
        "target": snap.target,
        "gpu_state": snap.gpus.state,
        "gpu_message": snap.gpus.message,
        "gpus": jsonable(snap.gpus.gpus),
        "processes": jsonable(snap.gpus.processes),
        "host": jsonable(snap.host),
        "host_error": snap.host_error,
        "servers": jsonable(snap.servers),
        "time": snap.gpus.time,
    }
