"""``tunedeck runs``: servers tunedeck launched on a host (run folders + local records)."""

from __future__ import annotations

import argparse
import json
import logging
import time
from typing import Sequence

from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._cli import fail, noted_table
from tunedeck.commands._runs import age, host_from_args, records_for
from tunedeck.hostops.gpuquery import gpu_memory_used
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.runstop import process_alive
from tunedeck.hostops.runstore import FAILED, LAUNCHING, READY, STARTING, RunRecord, RunStore
from tunedeck.hostops.startupstate import STALLED, describe_gpu_memory
from tunedeck.logparse import advice_for
from tunedeck.model import jsonable
from tunedeck.util.ports import OTHER, OWN, port_owners
from tunedeck.util.safety import redact_argv, visible

log = logging.getLogger(__name__)

#: a live run whose log has not changed this long is stalled (the tracker's default window)
STALL_AFTER = 300.0


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(subparsers, common, "runs")
    p.add_argument("id", nargs="?", metavar="DEPLOYMENT", help="a multi-node deployment: its nodes and their runs")
    p.add_argument("--json", action="store_true", help="print the run records as JSON")
    p.add_argument("--deployments", action="store_true", help="list the multi-node deployments (local records)")
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from tunedeck.commands import _deploy
    from tunedeck.services.deploy import DeploymentStore, reread_deployments

    if args.id is not None:
        dep = _deploy.find(args.id)
        if dep is None:
            return fail("runs", f"no deployment {args.id!r} (tunedeck runs --deployments lists them)")
        dep = (await reread_deployments([dep]))[0]
        return await _deploy.show_deployment(args, dep)
    if args.deployments:
        await reread_deployments()  # every node's processes: a dead deployment reads failed now
        deps = _deploy.list_deployments(args.json)
        if args.json:
            print(json.dumps(deps, indent=2))
        elif deps is None and not DeploymentStore().all():
            print("no deployments")
        return 0
    host = host_from_args(args)
    store = RunStore()
    try:
        recs = await records_for(host, store)
        recs = await refresh_readiness(host, store, recs)
    except HostError as e:
        return fail("runs", str(e))
    finally:
        await host.close()
    members = {m.run_id: (d.deploy_id, m.node) for d in await reread_deployments() for m in d.members}
    if args.json:
        out = []
        for r in recs:
            d = jsonable(r.to_json())
            d["advice"] = advice_for(r.diagnosis, r.proof) if r.status in (FAILED, STALLED) else ""
            if r.run_id in members:
                d["deployment"], d["node"] = members[r.run_id]
            out.append(d)
        print(json.dumps(out, indent=2))
        return 0
    if not recs:
        print(f"no runs on {host.target}")
        _deploy.list_deployments(False)
        return 0
    now = time.time()
    rows = [
        (
            r.run_id,
            r.status,
            r.engine,
            r.port or "-",
            r.pid or "-",
            age(now - (r.created or now)),
            visible(r.profile or " ".join(redact_argv(r.argv))[:60]),
        )
        for r in recs
    ]
    notes = [_notes(r, members.get(r.run_id)) for r in recs]
    headers = ("RUN", "STATUS", "ENGINE", "PORT", "PID", "AGE", "PROFILE / COMMAND")
    print("\n".join(noted_table(headers, rows, notes, under="STATUS", right=(3, 4, 5))))
    _deploy.list_deployments(False)
    return 0


def _notes(r: RunRecord, member: tuple[str, str] | None) -> list[str]:
    """What ``runs`` says under a run's row: its diagnosis, what to do about a failure, and the
    deployment (and node) it is part of."""
    said = []
    if r.diagnosis:
        said.append(r.diagnosis)
        tip = advice_for(r.diagnosis, r.proof) if r.status in (FAILED, STALLED) else ""
        if tip:
            said.append(f"advice: {tip}")
    if member is not None:
        said.append(f"part of deployment {member[0]} (node {member[1]})")
    return said


async def _quiet_logs(host: Host, recs: Sequence[RunRecord], after: float = STALL_AFTER) -> dict[str, float]:
    """Run ids (of live runs) whose log has not changed for ``after`` seconds, with that age."""
    from tunedeck.hostops.reread import log_ages

    dirs = {r.run_dir: r.run_id for r in recs if r.run_dir and r.pid}
    if not dirs:
        return {}
    out = {dirs[d]: age for d, age in (await log_ages(host, list(dirs))).items() if age >= after}
    if not out:
        return out
    live: dict[str, float] = {}
    for rec in recs:
        if rec.run_id in out and rec.pid and await process_alive(host, rec.pid, rec.starttime):
            live[rec.run_id] = out[rec.run_id]
    return live


async def _own_ready(host: Host, answered: Sequence[RunRecord]) -> set[str]:
    """The runs whose ``/health`` 200 came from their own process tree (another process on the
    port is not the run); where the listener cannot be told, the run's own log decides."""
    from tunedeck.hostops.reread import log_state

    out: set[str] = set()
    for r in answered:
        if r.port is None:
            continue
        owner = await port_owners(host, r.port, session=r.pid, run_id=r.run_id)
        if owner.state == OWN:
            out.add(r.run_id)
        elif owner.state == OTHER:
            log.warning("runs: port %s of run %s answers for %s", r.port, r.run_id, owner.describe())
        elif r.run_dir:
            st = await log_state(host, r.run_dir, r.engine)
            if st.ready_line is not None and st.failure is None:
                out.add(r.run_id)
    return out


async def refresh_readiness(host: Host, store: RunStore, recs: Sequence[RunRecord]) -> list[RunRecord]:
    """Runs still ``starting`` (launched without ``--wait``, or whose waiter went away) are asked
    once over HTTP (``/health``, through the SSH forward on a remote host); a ready answer is
    saved in the record, so ``runs`` never shows a serving run as starting. A live one whose log
    has not moved for the stall window is saved as ``stalled`` with the GPU memory held, even
    when nobody was watching it."""
    from tunedeck.collectors.servers import ServerCollector, ServerSpec

    pending = [r for r in recs if r.status in (STARTING, LAUNCHING) and r.port and not r.ended_]
    if not pending:
        return list(recs)
    specs = [
        ServerSpec(r.run_id, r.engine if r.engine in ("sglang", "vllm") else "auto", r.port, run_id=r.run_id)
        for r in pending
    ]
    try:
        async with ServerCollector(host, specs) as sc:
            stats = await sc.sample()
    except (HostError, OSError) as e:
        log.warning("runs: readiness probe on %s failed: %s", host.target, visible(e))
        return list(recs)
    answered = {s.name for s in stats if s.state == "ready"}
    ready = await _own_ready(host, [r for r in pending if r.run_id in answered])
    quiet = await _quiet_logs(host, [r for r in pending if r.run_id not in ready])
    held = await gpu_memory_used(host) if quiet else None
    out = []
    for r in recs:
        now = time.time()
        if r.run_id in ready:
            r.status = READY
            r.timeline.append({"t": now, "event": "ready", "by": "runs"})
            store.update(r.run_id, status=READY, timeline=r.timeline)
        elif r.run_id in quiet and r.status != STALLED:
            # nobody watched it stall: a live process whose log has not moved for the stall window
            mins = quiet[r.run_id] / 60
            holds = f"; holds {describe_gpu_memory([held[i] for i in sorted(held)])}" if held else ""
            r.status = STALLED
            r.diagnosis = f"stalled: no log output for {mins:.0f} min, the process is still running{holds}"
            r.timeline.append({"t": now, "event": STALLED, "by": "runs", "diagnosis": r.diagnosis})
            store.update(r.run_id, status=STALLED, diagnosis=r.diagnosis, timeline=r.timeline)
        out.append(r)
    return out
