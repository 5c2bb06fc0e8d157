"""Stopping a deployment in the clean order, and checking every node's GPUs are free."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Mapping

from tunedeck.hostops.gpuquery import compute_apps
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.runstop import stop_run
from tunedeck.hostops.runstore import STOPPED, RunStore
from tunedeck.profiles.deploy import RAY_HEAD, RAY_WORKER
from tunedeck.services.deploy.records import PARTIAL, DeploymentRecord, DeploymentStore, dress_sim

#: seconds a Ray node is given to end on TERM before its process group is killed. Its processes
#: hold no GPU (the engine's workers, stopped first, did), and a head's gcs_server and ``ray start``
#: outwait any grace (measured: a head still up 30 s after TERM, every time); ``ray stop`` itself
#: gives 16 s before it kills.
RAY_NODE_GRACE = 10.0


@dataclass(frozen=True)
class MemberStop:
    node: str
    kind: str
    run_id: str
    state: str
    message: str
    gpu_released: bool | None = None


async def stop(
    rec: DeploymentRecord,
    hosts: Mapping[str, Host],
    *,
    store: DeploymentStore | None = None,
    runstore: RunStore | None = None,
    grace: float = 30.0,
    gpu_wait: float = 60.0,
) -> tuple[list[MemberStop], dict[str, bool | None]]:
    """Stop every member in the clean order; then ask each node whether its GPUs still list any
    process of the deployment's (node → True: free, False: not, None: no nvidia-smi)."""
    store = store or DeploymentStore()
    runstore = runstore or RunStore()
    if rec.sim:
        await dress_sim(hosts)
    out: list[MemberStop] = []
    pids: dict[str, set[int]] = {}
    for m in rec.stop_order():
        run = runstore.load(m.run_id)
        if run is None:
            out.append(MemberStop(m.node, m.kind, m.run_id, "error", f"run {m.run_id}: no local record"))
            continue
        g = min(grace, RAY_NODE_GRACE) if m.kind in (RAY_HEAD, RAY_WORKER) else grace
        try:
            res = await stop_run(hosts[m.node], run, grace=g, gpu_wait=gpu_wait, store=runstore)
        except HostError as e:
            out.append(MemberStop(m.node, m.kind, m.run_id, "error", str(e)))
            continue
        pids.setdefault(m.node, set()).update(res.pids)
        if run.pid:
            pids[m.node].add(run.pid)
        out.append(MemberStop(m.node, m.kind, m.run_id, res.state, res.message, res.gpu_released))
    free: dict[str, bool | None] = {}
    for node in rec.nodes:
        try:
            apps = await compute_apps(hosts[node])
        except HostError:
            free[node] = None
            continue
        free[node] = None if apps is None else not any(p in pids.get(node, set()) for p, _, _ in apps)
    cur = store.load(rec.deploy_id) or rec
    ok = all(s.state in ("stopped", "exited", "stale") for s in out)
    cur.status = STOPPED if ok else PARTIAL
    cur.ended = cur.ended or time.time()
    cur.timeline.append({"t": time.time(), "event": "stopped" if ok else "stop-incomplete", "gpus_free": free})
    store.save(cur)
    rec.status = cur.status
    return out, free
