"""Starting a deployment's steps in the engine's order."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Callable, Mapping, Sequence

from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.launcher import LaunchRefused
from tunedeck.hostops.launcher import launch as launch_run
from tunedeck.hostops.runstore import FAILED, STARTING, RunStore, new_run_id
from tunedeck.profiles.deploy import RAY_HEAD, RAY_WAIT, RAY_WORKER, DeploymentPlan, Step
from tunedeck.services import runtime
from tunedeck.services.deploy.logs import read_log
from tunedeck.services.deploy.records import DeploymentRecord, DeploymentStore, Member
from tunedeck.services.deploy.stop import stop
from tunedeck.util.safety import UnsafeInput

log = logging.getLogger(__name__)


async def launch(
    plan: DeploymentPlan,
    hosts: Mapping[str, Host],
    *,
    store: DeploymentStore | None = None,
    runstore: RunStore | None = None,
    on_event: Callable[[str], None] | None = None,
    ray_poll: float = 1.0,
    ray_wait: float = 180.0,
) -> DeploymentRecord:
    """Start every step in the plan's order; returns the saved record. A node that cannot start
    ends the launch: what already started is stopped again, the record says which node and why."""
    store = store or DeploymentStore()
    runstore = runstore or RunStore()
    say = on_event or (lambda _m: None)
    rec = DeploymentRecord(
        deploy_id=new_run_id(),
        profile=plan.profile,
        engine=plan.engine,
        mode=plan.mode,
        nodes=list(plan.nodes),
        rendezvous=plan.rendezvous,
        http_port=plan.http_port,
        created=time.time(),
        sim=plan.sim,
    )
    rec.timeline.append({"t": rec.created, "event": "launching"})
    store.save(rec)  # the deployment exists locally before anything runs
    node_logs: dict[str, str] = {}  # node → the run folder of the process started there
    for step in plan.steps:
        host = hosts[step.node]
        try:
            if step.kind == RAY_WAIT:
                say(f"waiting for `ray status` on {step.node} to show {step.gpus} GPUs")
                t0 = time.monotonic()
                ray_nodes = sum(1 for s in plan.steps if s.kind in (RAY_HEAD, RAY_WORKER))
                have, per_node = await wait_ray_gpus(
                    host, step.check, step.gpus, timeout=ray_wait, poll=ray_poll, nodes=ray_nodes
                )
                if have < step.gpus:
                    waited = round(time.monotonic() - t0)
                    bare = await ray_bare_nodes(plan, hosts, step, node_logs)
                    text = ray_short_of_gpus(have, step.gpus, per_node, len(plan.nodes), waited, bare)
                    raise RayShortOfGpus(text, bare[0] if bare else step.node)
                continue
            cmd = step.command
            assert cmd is not None
            run = await launch_run(
                host,
                await runtime.sim_argv(host, cmd.argv, python=plan.python),
                cmd.env_dict,
                engine=plan.engine if step.kind == "server" else "other",
                port=step.port,
                profile=plan.profile,
                store=runstore,
                check=False,
            )
        except (LaunchRefused, HostError, OSError, ValueError, runtime.RuntimeUnavailable) as e:
            rec.status = FAILED
            rec.first_failed = e.node if isinstance(e, RayShortOfGpus) else step.node
            rec.diagnosis = f"{step.node} ({step.kind}) did not start: {e}"
            rec.ended = time.time()
            rec.timeline.append({"t": rec.ended, "event": "launch-failed", "node": step.node, "message": str(e)})
            store.save(rec)  # the caller reports rec.diagnosis once (the CLI's error line)
            if rec.members:
                await stop(rec, hosts, store=store, runstore=runstore, grace=10, gpu_wait=30)
                rec.status = FAILED
                store.save(rec)
            return rec
        rec.members.append(Member(step.node, step.rank, step.role, step.kind, run.run_id, step.serves, step.port))
        if run.run_dir:
            node_logs[step.node] = run.run_dir
        rec.timeline.append(
            {"t": time.time(), "event": "started", "node": step.node, "kind": step.kind, "run_id": run.run_id}
        )
        store.save(rec)
        say(f"{step.label}: run {run.run_id} (pid {run.pid})")
    rec.status = STARTING
    store.save(rec)
    return rec


_RAY_GPU_RE = re.compile(r"([\d.]+)/([\d.]+) GPU")


class RayShortOfGpus(LaunchRefused):
    """The Ray cluster never showed the GPUs the placement needs; ``node`` is the deployment's
    node to blame (one that joined without GPUs, else the head that waited)."""

    def __init__(self, text: str, node: str) -> None:
        super().__init__(text)
        self.node = node


def ray_short_of_gpus(
    have: float, need: int, per_node: Sequence[float], nodes: int, waited: float, bare_nodes: Sequence[str] = ()
) -> str:
    """Why a Ray placement cannot start: the GPUs Ray shows, each joined node's, and which
    nodes joined without any (by name when Ray's node addresses told them apart)."""
    text = f"Ray shows {have:g} of the {need} GPUs the placement needs after {waited:g} s"
    if per_node:
        text += f"; {len(per_node)} of the {nodes} nodes joined, with {', '.join(f'{g:g}' for g in per_node)} GPUs"
    bare = max(len(bare_nodes), sum(1 for g in per_node if g == 0))
    if bare:
        which = f": {', '.join(bare_nodes)}" if bare_nodes else ""
        text += (
            f" ({bare} node{'s' if bare > 1 else ''} joined without GPUs{which}; its ray start's --num-gpus, "
            "or CUDA_VISIBLE_DEVICES on it)"
        )
    return text


#: asks the cluster for each live node's address and GPUs (run by the engine's Python, which has
#: Ray; ``ray status`` names nodes by id only). One line: an argument may hold no control character
RAY_NODES_CODE = (
    "import json, sys, ray; "
    'ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False); '
    'print(json.dumps([[n.get("NodeManagerAddress"), (n.get("Resources") or {}).get("GPU", 0)] '
    'for n in ray.nodes() if n.get("Alive")]))'
)

_NODE_IP_RE = re.compile(r"Local node IP: (\S+)")


def ray_node_address(argv: Sequence[str], log: str) -> str | None:
    """The address a node's Ray registered with: its ``--node-ip-address``, else what its
    ``ray start`` printed ("Local node IP: …")."""
    for arg in argv:
        if arg.startswith("--node-ip-address="):
            return arg.split("=", 1)[1]
    m = _NODE_IP_RE.search(log)
    return m.group(1) if m else None


async def ray_bare_nodes(
    plan: DeploymentPlan, hosts: Mapping[str, Host], wait: Step, node_logs: Mapping[str, str]
) -> list[str]:
    """The deployment's nodes whose Ray joined the cluster without GPUs ([] when it cannot be
    told: the cluster or a node's address could not be read; logged)."""
    address = next((a.split("=", 1)[1] for a in wait.check if a.startswith("--address=")), None)
    if address is None:
        return []
    try:
        r = await hosts[wait.node].run([plan.python, "-c", RAY_NODES_CODE, address], timeout=60)
    except (HostError, UnsafeInput) as e:  # the refusal stands without the names
        log.warning("ray nodes on %s: %s", wait.node, e)
        return []
    try:
        nodes = json.loads(r.stdout.strip().splitlines()[-1]) if r.ok and r.stdout.strip() else None
    except ValueError:
        nodes = None
    if not isinstance(nodes, list):
        log.warning("ray nodes on %s: exit %s: %s", wait.node, r.exit_status, (r.stderr or r.stdout)[-500:])
        return []
    bare_ips = {str(ip) for ip, gpus in nodes if not gpus}
    out: list[str] = []
    for step in plan.steps:
        if step.kind not in (RAY_HEAD, RAY_WORKER) or step.command is None or step.node in out:
            continue
        run_dir = node_logs.get(step.node)
        text = await read_log(hosts[step.node], run_dir, 64 << 10) if run_dir else ""
        if ray_node_address(step.command.argv, text) in bare_ips:
            out.append(step.node)
    return out


def ray_node_gpus(status: str) -> list[float]:
    """The GPUs of each node in ``ray status -v`` output (its ``Node: …`` blocks), in its order."""
    out: list[float] = []
    for block in re.split(r"^Node: ", status, flags=re.M)[1:]:
        m = _RAY_GPU_RE.search(block)
        out.append(float(m.group(2)) if m else 0.0)
    return out


async def wait_ray_gpus(
    host: Host,
    check: Sequence[str],
    need: int,
    *,
    timeout: float,
    poll: float = 1.0,
    nodes: int = 0,
    settle: float = 5.0,
) -> tuple[float, list[float]]:
    """Poll ``ray status -v`` until the cluster shows ``need`` GPUs; returns how many it showed
    last and each node's GPUs (so a node that joined without its GPUs is named by its count).

    A Ray node declares its GPUs when it joins: once all ``nodes`` of the deployment have joined
    and the figures have held for ``settle`` seconds, a cluster still short of GPUs stays short,
    so the wait ends there rather than at ``timeout`` (the operator hears of a worker started
    without GPUs in seconds, not minutes)."""
    deadline = time.monotonic() + timeout
    have = 0.0
    per_node: list[float] = []
    argv = [*check, "-v"] if "-v" not in check else list(check)
    held: tuple[float, list[float]] | None = None
    held_since = 0.0
    while True:
        r = await host.run(argv, timeout=60)
        now = time.monotonic()
        m = _RAY_GPU_RE.search(r.stdout)
        if m:
            have = float(m.group(2))
            per_node = ray_node_gpus(r.stdout)
            if have >= need:
                return have, per_node
            if nodes and len(per_node) >= nodes:
                if held != (have, per_node):
                    held, held_since = (have, per_node), now
                elif now - held_since >= settle:
                    log.info("ray: all %d nodes joined with %g of %d GPUs; the wait ends", nodes, have, need)
                    return have, per_node
            else:
                held = None
        if now >= deadline:
            return have, per_node
        await asyncio.sleep(poll)
