"""A multi-node profile → what each node runs, in the order the engine needs.

A profile with ``nodes = ["gpu-a", "gpu-b", …]`` describes one deployment; the first node is the
head (rank 0). tunedeck schedules nothing itself: it drives the engines' own distributed runtimes.

- **SGLang** (``mode = "tp"``): every node runs the same server command with
  ``--nnodes=N --node-rank=i --dist-init-addr=HEAD:PORT``; ``tp`` spans the nodes (``tp / N`` GPUs
  on each). Only the head serves HTTP.
- **vLLM on Ray** (``mode = "ray"``): the head runs ``ray start --head --port=PORT --block``, each
  worker ``ray start --address=HEAD:PORT --block``; then ``ray status`` on the head must show the
  GPUs the placement needs (``tp × pp``), and only then does the head run ``vllm serve …
  --tensor-parallel-size=TP --pipeline-parallel-size=PP --distributed-executor-backend=ray``.
  With ``--sim`` each worker's ``ray start`` runs under the host-side runtime's ``sim ray-node
  --``, which plays the Ray worker processes that hold that node's GPUs for the simulated vLLM.
- **vLLM multi-node data parallel** (``mode = "dp"``): the head runs ``vllm serve …
  --data-parallel-size=DP --data-parallel-size-local=L --data-parallel-address=HEAD
  --data-parallel-rpc-port=PORT``, each worker the same with ``--headless
  --data-parallel-start-rank=i×L``.

Each detached process is a :class:`Step` (one run folder on its node); a ``ray-wait`` step is a
check run between two of them. ``plan.steps`` is the launch order; :meth:`DeploymentPlan.stop_order`
the order that stops it cleanly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tunedeck.profiles.builder import Command, Issue, check_profile, demo_executable, line_of_key, resolve_nccl
from tunedeck.profiles.model import (
    DEFAULT_RENDEZVOUS_PORTS,
    DEPLOY_MODES,
    NODE_RE,
    Deploy,
    NcclPreset,
    ProfileError,
    ServerProfile,
)
from tunedeck.util.records import pick
from tunedeck.util.safety import UnsafeInput, env_command, redact_env

if TYPE_CHECKING:
    from tunedeck.profiles.store import ProfileStore

HEAD, WORKER = "head", "worker"
#: step kinds: a server process, a Ray node, the wait for Ray's GPUs
SERVER, RAY_HEAD, RAY_WORKER, RAY_WAIT = "server", "ray-head", "ray-worker", "ray-wait"
_ADDR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$|^[0-9A-Fa-f:.]+$")


@dataclass(frozen=True, slots=True)
class Step:
    """One thing a node does. ``command`` runs detached in its own run folder (server and Ray
    nodes); a ``ray-wait`` step has ``check`` instead, run on the node until ``ray status``
    shows ``gpus`` GPUs."""

    node: str
    rank: int
    role: str  # head | worker
    kind: str  # server | ray-head | ray-worker | ray-wait
    command: Command | None = None
    check: tuple[str, ...] = ()
    gpus: int = 0  # GPUs this step's process uses on its node (ray-wait: GPUs the cluster must show)
    port: int | None = None  # the HTTP port to probe (the serving process only)
    serves: bool = False  # this step's process answers the API

    @property
    def label(self) -> str:
        return f"{self.node} ({self.role}{'' if self.role == HEAD else f' {self.rank}'}, {self.kind})"

    def jsonable(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "node": self.node,
            "rank": self.rank,
            "role": self.role,
            "kind": self.kind,
            "gpus": self.gpus,
            "port": self.port,
            "serves": self.serves,
        }
        if self.command is not None:
            d.update(self.command.jsonable())
        if self.check:
            d["check"] = list(self.check)
            d["command"] = env_command(list(self.check), {})
        return d


def engine_gpus(mode: str, tp: int, pp: int, dp: int) -> int:
    """GPUs a deployment of ``mode`` uses over all its nodes: tp (SGLang), tp × pp (vLLM on Ray),
    dp × tp (vLLM data parallel)."""
    return {"tp": tp, "ray": tp * pp}.get(mode, dp * tp)


def parallel_sizes(profile: ServerProfile) -> tuple[int, int]:
    """(pp, dp) of a multi-node profile's deployment as the planner takes them: vLLM on Ray's pp
    (default: the node count), vLLM data parallel's dp (default: every GPU of the nodes in ranks
    of tp); 1 where the mode has none."""
    mode, n, g = profile.deploy_mode, len(profile.nodes), profile.deploy.gpus_per_node
    pp = (profile.deploy.pp or n) if mode == "ray" else 1
    dp = (profile.deploy.dp or (n * g) // max(1, profile.tp)) if mode == "dp" else 1
    return pp, dp


def profile_gpus(profile: ServerProfile) -> int:
    """The GPUs a profile's engine runs on, the one count its per-GPU figures divide by: ``tp`` on
    one host; over a deployment's nodes, the GPUs its plan places (:attr:`DeploymentPlan.gpus_needed`)."""
    if len(profile.nodes) < 2:
        return profile.tp
    pp, dp = parallel_sizes(profile)
    return engine_gpus(profile.deploy_mode, profile.tp, pp, dp)


#: how a command names tunedeck's host-side runtime before it is on the host: at launch,
#: :func:`tunedeck.services.runtime.sim_argv` puts ``PYTHON -I ${TUNEDECK_HOME}/lib/tunedeck-host-<hash>.pyz``
#: (that host's, the profile's ``python`` first) in its place
HOST_RUNTIME = "tunedeck-host"


@dataclass(frozen=True, slots=True)
class DeploymentPlan:
    """Everything a multi-node profile launches, in launch order (``steps``)."""

    profile: str
    engine: str
    mode: str
    nodes: tuple[str, ...]
    head_address: str
    rendezvous_port: int
    gpus_per_node: int
    tp: int
    pp: int
    dp: int
    http_port: int
    steps: tuple[Step, ...]
    warnings: tuple[Issue, ...] = ()
    sim: bool = False
    #: the profile's interpreter: what runs the host-side runtime (and the simulator) on ``sim``
    python: str = "python3"

    @property
    def head(self) -> str:
        return self.nodes[0]

    @property
    def on_runtime(self) -> bool:
        """Some step runs the host-side runtime (``--sim``: the simulator in place of the engine)."""
        return any(s.command is not None and s.command.argv[:1] == (HOST_RUNTIME,) for s in self.steps)

    @property
    def rendezvous(self) -> str:
        host = f"[{self.head_address}]" if ":" in self.head_address else self.head_address
        return f"{host}:{self.rendezvous_port}"

    @property
    def gpus_needed(self) -> int:
        """GPUs the engine uses over all nodes: tp (SGLang), tp × pp (Ray), dp × tp (vLLM DP)."""
        return engine_gpus(self.mode, self.tp, self.pp, self.dp)

    def node_steps(self, node: str) -> list[Step]:
        return [s for s in self.steps if s.node == node]

    def detached(self) -> list[Step]:
        return [s for s in self.steps if s.command is not None]

    def stop_order(self) -> list[Step]:
        """The serving process first (the API goes away before what it depends on), then the
        workers, then the rest of the head: SGLang and vLLM DP stop the head's server and then
        the workers' ranks; on Ray, vLLM first, then the Ray workers, then the Ray head."""
        det = self.detached()
        first = [s for s in det if s.serves]
        workers = [s for s in det if not s.serves and s.role == WORKER]
        rest = [s for s in det if not s.serves and s.role == HEAD]
        return first + workers + rest

    def jsonable(self) -> dict[str, Any]:
        return {
            **pick(self, "profile", "engine", "mode", "head", "head_address", "rendezvous", "gpus_per_node"),
            **pick(self, "tp", "pp", "dp", "gpus_needed", "http_port", "sim"),
            "nodes": list(self.nodes),
            "steps": [s.jsonable() for s in self.steps],
            "stop_order": [s.label for s in self.stop_order()],
            "warnings": [{"severity": w.severity, "key": w.key, "message": w.message} for w in self.warnings],
        }


def node_host(node: str) -> str:
    """The host part of a TARGET as a profile names it (``user@host:port`` → ``host``); for an ssh
    alias that is the alias: the caller resolves it (ssh config ``HostName``) where it can."""
    n = node.rsplit("@", 1)[-1]
    if n.startswith("["):
        return n[1 : n.index("]")]
    return n.split(":", 1)[0]


def sim_executable(profile: ServerProfile) -> list[str]:
    """The simulator in place of the engine on any host (``--sim``): the host-side runtime's
    ``sim ENGINE``; nothing needs to be installed there but a Python >= 3.9."""
    return [HOST_RUNTIME, "sim", profile.engine]


def sim_ray_node() -> list[str]:
    """What a worker node's ``ray start`` runs under with ``--sim``: the host-side runtime's
    ``sim ray-node --`` (the real Ray node as its child; see :mod:`tunedeck.sim.raynode`)."""
    return [HOST_RUNTIME, "sim", "ray-node", "--"]


def _err(issues: list[Issue], key: str, message: str) -> None:
    issues.append(Issue("error", key, message))


@dataclass
class _Layout:
    """What the checks of a multi-node profile found: the rendezvous, the parallel sizes, the GPUs
    each node runs, and how to build one node's server command."""

    profile: ServerProfile
    mode: str
    nodes: tuple[str, ...]
    addr: str
    port: int
    http_port: int
    pp: int = 1
    dp: int = 1
    per_node_gpus: list[int] = field(default_factory=list)


def check_deployment(
    profile: ServerProfile,
    *,
    nccl: NcclPreset | None = None,
    head_address: str | None = None,
    sim: bool = False,
    demo: bool = False,
    allow_dangerous: bool = False,
) -> tuple[DeploymentPlan | None, list[Issue]]:
    """The plan for a multi-node ``profile`` and every validation message (the plan is None on
    errors). ``head_address`` is what the workers dial (default: ``[deploy] head_address``, else
    the head's host name); ``sim`` swaps the engine for the simulator on every node (``demo``: the
    demo host's ``tunedeck`` shim)."""
    issues: list[Issue] = []
    nodes = tuple(profile.nodes)
    if len(nodes) < 2:
        return None, [Issue("error", "nodes", "not a multi-node profile (nodes names fewer than two hosts)")]
    mode = profile.deploy_mode
    if mode not in DEPLOY_MODES.get(profile.engine, ()):
        modes = ", ".join(DEPLOY_MODES.get(profile.engine, ()))
        _err(issues, "deploy.mode", f"{mode!r} is not a {profile.engine} mode (one of: {modes})")
        return None, issues
    _check_nodes(nodes, issues)
    lay = _rendezvous(profile, mode, nodes, head_address, issues)
    _SIZES[mode](lay, issues)
    if any(i.severity == "error" for i in issues):
        return None, issues

    exe: list[str] | None = demo_executable(profile.engine) if demo else sim_executable(profile) if sim else None

    def server(managed: Sequence[tuple[str, object]]) -> Command | None:
        cmd, iss = check_profile(
            profile,
            nccl=nccl,
            demo=False,
            allow_dangerous=allow_dangerous,
            executable=exe,
            managed_args=managed,
            managed_key=f"deploy ({mode})",
        )
        issues.extend(i for i in iss if i not in issues)
        return cmd

    if mode == "ray":
        steps = _ray_steps(lay, server, head_address, sim=sim, demo=demo)
    else:
        steps = _server_steps(lay, server)
    if any(i.severity == "error" for i in issues) or any(s.kind != RAY_WAIT and s.command is None for s in steps):
        return None, issues
    plan = DeploymentPlan(
        profile=profile.name,
        engine=profile.engine,
        mode=mode,
        nodes=nodes,
        head_address=lay.addr,
        rendezvous_port=lay.port,
        gpus_per_node=profile.deploy.gpus_per_node,
        tp=profile.tp,
        pp=lay.pp,
        dp=lay.dp,
        http_port=lay.http_port,
        steps=tuple(steps),
        warnings=tuple(i for i in issues if i.severity != "error"),
        sim=sim or demo,
        python=profile.python,
    )
    return plan, issues


def _check_nodes(nodes: tuple[str, ...], issues: list[Issue]) -> None:
    seen: dict[str, int] = {}
    for i, n in enumerate(nodes, 1):
        if not isinstance(n, str) or not NODE_RE.match(n):
            _err(issues, "nodes", f"entry {i}: {n!r} is not a host ([user@]host[:port] or an ssh alias)")
        elif n in seen:
            _err(issues, "nodes", f"entry {i}: {n!r} is listed twice (also entry {seen[n]})")
        else:
            seen[n] = i


def _rendezvous(
    profile: ServerProfile, mode: str, nodes: tuple[str, ...], head_address: str | None, issues: list[Issue]
) -> _Layout:
    """The address and port the nodes meet at, checked; Ray-only settings outside Ray are warned of."""
    dep = profile.deploy
    port = dep.port or DEFAULT_RENDEZVOUS_PORTS[mode]
    http_port = profile.effective_port
    if not 1 <= port <= 65535:
        _err(issues, "deploy.port", f"rendezvous port {port} is out of range 1..65535")
    elif port == http_port:
        _err(issues, "deploy.port", f"rendezvous port {port} is also the server's HTTP port (port)")
    addr = (
        head_address
        or dep.head_address
        or (dep.node_addresses[0] if dep.node_addresses else "")
        or (node_host(nodes[0]) if isinstance(nodes[0], str) else "")
    )
    if addr == "local":
        addr = "127.0.0.1"
    if not addr or not _ADDR_RE.match(addr):
        _err(issues, "deploy.head_address", f"{addr!r} is not an address the workers can dial")
    if mode != "ray":
        ray_only = Deploy(mode=dep.mode)
        for key in ("ray_num_cpus", "ray_dashboard", "ray_temp_dir", "node_addresses"):
            if getattr(dep, key) != getattr(ray_only, key):
                issues.append(
                    Issue("warning", f"deploy.{key}", f'only vLLM on Ray (mode = "ray") uses it, not mode {mode!r}')
                )
    return _Layout(profile, mode, nodes, addr, port, http_port)


def _sizes_tp(lay: _Layout, issues: list[Issue]) -> None:
    """SGLang multi-node tensor parallelism: tp / nodes ranks on each node."""
    tp, n, g = lay.profile.tp, len(lay.nodes), lay.profile.deploy.gpus_per_node
    if tp % n:
        _err(issues, "tp", f"tp = {tp} is not divisible by the {n} nodes (each node runs tp / nodes ranks)")
    elif tp // n > g:
        _err(issues, "tp", f"tp = {tp} over {n} nodes is {tp // n} GPUs per node; deploy.gpus_per_node is {g}")
    lay.per_node_gpus = [tp // n] * n


def _sizes_ray(lay: _Layout, issues: list[Issue]) -> None:
    """vLLM on Ray: tp × pp GPUs over the cluster (pp defaults to the node count)."""
    tp, n, g = lay.profile.tp, len(lay.nodes), lay.profile.deploy.gpus_per_node
    lay.pp = pp = parallel_sizes(lay.profile)[0]
    need = tp * pp
    if need > n * g:
        _err(issues, "deploy.pp", f"tp × pp = {tp} × {pp} = {need} GPUs, but {n} nodes × {g} = {n * g}")
    elif need <= (n - 1) * g:
        msg = f"tp × pp = {need} GPUs fit on fewer than {n} nodes; Ray may leave a node idle"
        issues.append(Issue("warning", "nodes", msg))
    lay.per_node_gpus = [g] * n


def _sizes_dp(lay: _Layout, issues: list[Issue]) -> None:
    """vLLM data parallelism: dp / nodes ranks of tp GPUs on each node."""
    tp, n, g = lay.profile.tp, len(lay.nodes), lay.profile.deploy.gpus_per_node
    lay.dp = dp = parallel_sizes(lay.profile)[1]
    if dp % n:
        _err(issues, "deploy.dp", f"dp = {dp} is not divisible by the {n} nodes (each runs dp / nodes ranks)")
    elif (dp // n) * tp > g:
        _err(issues, "deploy.dp", f"dp / nodes × tp = {dp // n} × {tp} GPUs per node; deploy.gpus_per_node is {g}")
    elif dp < n:
        _err(issues, "deploy.dp", f"dp = {dp} is fewer than the {n} nodes")
    lay.per_node_gpus = [(dp // n) * tp] * n


#: the parallel-size rules of each deployment mode
_SIZES: dict[str, Callable[[_Layout, list[Issue]], None]] = {"tp": _sizes_tp, "ray": _sizes_ray, "dp": _sizes_dp}


def _managed_args(lay: _Layout, rank: int) -> list[tuple[str, object]]:
    """The flags tunedeck sets on the server of node ``rank`` (SGLang multi-node TP or vLLM DP)."""
    n = len(lay.nodes)
    if lay.mode == "tp":
        return [("nnodes", n), ("node-rank", rank), ("dist-init-addr", f"{_bracket(lay.addr)}:{lay.port}")]
    local = lay.dp // n
    managed: list[tuple[str, object]] = [
        ("data-parallel-size", lay.dp),
        ("data-parallel-size-local", local),
        ("data-parallel-address", lay.addr),
        ("data-parallel-rpc-port", lay.port),
    ]
    if rank:
        managed = [("headless", True), *managed, ("data-parallel-start-rank", rank * local)]
    return managed


def _server_steps(lay: _Layout, server: Callable[[Sequence[tuple[str, object]]], Command | None]) -> list[Step]:
    """One engine per node, the head serving HTTP (SGLang multi-node TP, vLLM DP)."""
    steps = []
    for rank, node in enumerate(lay.nodes):
        cmd = server(_managed_args(lay, rank))
        role = HEAD if rank == 0 else WORKER
        gpus = lay.per_node_gpus[rank]
        port = lay.http_port if rank == 0 else None
        steps.append(Step(node, rank, role, SERVER, cmd, gpus=gpus, port=port, serves=rank == 0))
    return steps


def _ray_steps(
    lay: _Layout,
    server: Callable[[Sequence[tuple[str, object]]], Command | None],
    head_address: str | None,
    *,
    sim: bool,
    demo: bool,
) -> list[Step]:
    """A Ray node on every host, a wait until the cluster has the GPUs, then vLLM on the head."""
    profile, dep, nodes = lay.profile, lay.profile.deploy, lay.nodes
    g = dep.gpus_per_node
    base = server([("pipeline-parallel-size", lay.pp), ("distributed-executor-backend", "ray")])
    env = base.env if base is not None else ()
    ray = dep.ray
    rdv = f"{_bracket(lay.addr)}:{lay.port}"
    steps: list[Step] = []
    for rank, node in enumerate(nodes):
        if rank == 0:
            args = [ray, "start", "--head", f"--port={lay.port}", f"--num-gpus={g}"]
        else:
            args = [ray, "start", f"--address={rdv}", f"--num-gpus={g}"]
        args += _ray_node_options(dep, rank, lay.addr if rank == 0 and (dep.head_address or head_address) else "")
        args.append("--block")
        kind, role = (RAY_HEAD, HEAD) if rank == 0 else (RAY_WORKER, WORKER)
        prefix = 2
        if sim and not demo and rank > 0:
            # the real `ray start` under the runtime's `sim ray-node`, whose stand-ins for Ray's
            # worker processes hold the GPUs the simulated vLLM places on this node
            args = [*sim_ray_node(), *args]
            prefix += len(sim_ray_node())
        steps.append(Step(node, rank, role, kind, _plain(profile.engine, args, env, prefix), gpus=g))
    steps.append(Step(nodes[0], 0, HEAD, RAY_WAIT, check=(ray, "status", f"--address={rdv}"), gpus=profile.tp * lay.pp))
    if base is not None:
        # the engine joins this cluster, not one it finds in the default temp dir or starts itself
        extra = [("RAY_ADDRESS", rdv)]
        if dep.node_addresses:
            extra.append(("VLLM_HOST_IP", dep.node_addresses[0]))  # the head's Ray node, as pinned
        if sim or demo:
            extra.append(("TUNEDECK_SIM_RAY", ray))  # the simulator asks this cluster for its GPUs
        base = _with_env(base, extra)
    steps.append(Step(nodes[0], 0, HEAD, SERVER, base, gpus=0, port=lay.http_port, serves=True))
    return steps


def _bracket(addr: str) -> str:
    return f"[{addr}]" if ":" in addr else addr


def _ray_node_options(dep: Any, rank: int, pinned_head: str) -> list[str]:
    """``ray start`` options from ``[deploy]`` for the node of ``rank``: its address
    (``node_addresses``, else the head's ``head_address`` when one was given), CPUs, dashboard
    (the head only) and temp dir."""
    out: list[str] = []
    ip = dep.node_addresses[rank] if dep.node_addresses else pinned_head
    if ip:
        out.append(f"--node-ip-address={ip}")
    if dep.ray_num_cpus >= 0:
        out.append(f"--num-cpus={dep.ray_num_cpus}")
    if rank == 0 and not dep.ray_dashboard:
        out.append("--include-dashboard=false")
    if dep.ray_temp_dir:
        out.append(f"--temp-dir={dep.ray_temp_dir[rank] if len(dep.ray_temp_dir) > 1 else dep.ray_temp_dir[0]}")
    return out


def _with_env(cmd: Command, extra: Sequence[tuple[str, str]]) -> Command | None:
    """``cmd`` with ``extra`` added to its environment (a name the profile sets itself wins)."""
    have = {k for k, _ in cmd.env}
    env = cmd.env + tuple((k, v) for k, v in extra if k not in have)
    try:
        display = env_command(list(cmd.argv), redact_env(dict(env)))
    except UnsafeInput:
        return None
    return replace(cmd, env=env, display=display)


def _plain(engine: str, argv: list[str], env: tuple[tuple[str, str], ...], prefix_len: int = 2) -> Command | None:
    try:
        display = env_command(argv, redact_env(dict(env)))
    except UnsafeInput:
        return None
    return Command(engine=engine, argv=tuple(argv), env=env, prefix_len=prefix_len, display=display)


def build_deployment(
    profile: ServerProfile,
    *,
    head_address: str | None = None,
    sim: bool = False,
    demo: bool = False,
    nccl: NcclPreset | None = None,
    store: ProfileStore | None = None,
    allow_dangerous: bool = False,
) -> DeploymentPlan:
    """The plan for a multi-node profile; raises :class:`ProfileError` naming the first bad key
    and the file (one line)."""
    if nccl is None:
        nccl = resolve_nccl(profile, store)
    plan, issues = check_deployment(
        profile, nccl=nccl, head_address=head_address, sim=sim, demo=demo, allow_dangerous=allow_dangerous
    )
    if plan is None:
        errors = [i for i in issues if i.severity == "error"] or [Issue("error", "", "cannot build the deployment")]
        first = errors[0]
        more = len(errors) - 1
        msg = first.message + (f" (and {more} more problem{'s' if more > 1 else ''})" if more > 0 else "")
        key = first.key if not first.key.startswith("deploy (") else "flags"
        raise ProfileError(
            msg, path=profile.path or f"profile {profile.name}", key=first.key, line=line_of_key(profile, key)
        )
    return plan


__all__ = [
    "HEAD",
    "HOST_RUNTIME",
    "RAY_HEAD",
    "RAY_WAIT",
    "RAY_WORKER",
    "SERVER",
    "WORKER",
    "DeploymentPlan",
    "Step",
    "build_deployment",
    "check_deployment",
    "engine_gpus",
    "node_host",
    "parallel_sizes",
    "profile_gpus",
    "sim_executable",
    "sim_ray_node",
]
