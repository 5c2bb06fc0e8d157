"""Multi-node deployments: launched, watched and stopped as one unit.

A deployment is the plan of a multi-node profile (:mod:`tui.profiles.deploy`) put on its nodes:
one run folder per detached process on its node (the launcher's own), one deployment id recorded
here (``state_dir()/deployments/<id>.json``) with its member runs. Nothing is scheduled by
tunedeck: the nodes run SGLang's launcher, or Ray and vLLM.

- :func:`preflight` runs on every node: GPU count and architecture, the engine version (equal on
  all nodes), nothing alive and no foreign GPU process, the rendezvous port free on the head, and
  the head reachable *from each worker* (a listener on the head's rendezvous port, a TCP connect
  run on the worker).
- :func:`launch` starts the steps in the engine's order (head first), waiting for ``ray status``
  where the plan says so.
- :func:`watch` follows every member with the startup tracker; :func:`triage` names the node that
  failed first and its proving line, not the one that timed out last.
- :func:`stop` stops the members serving process first, then the workers, then the rest of the
  head, and checks that every node's GPUs hold none of their processes.
- :func:`merged_log` reads every member's log with a node tag on each line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence

from tui.hostops.hosts import Host, HostError, parse_target, target_name
from tui.hostops.launcher import LaunchRefused, compute_apps, list_host_runs, stop_run
from tui.hostops.launcher import launch as launch_run
from tui.hostops.runstore import FAILED, READY, STARTING, STOPPED, RunRecord, RunStore, check_run_id, new_run_id
from tui.hostops.tracker import STALLED, StartupTracker
from tui.model import StartupProgress
from tui.profiles.deploy import RAY_WAIT, DeploymentPlan, Step, node_host
from tui.profiles.model import ServerProfile
from tui.services import runtime
from tui.util.files import atomic_write_json
from tui.util.paths import state_dir
from tui.util.safety import visible

log = logging.getLogger(__name__)

LAUNCHING, PARTIAL = "launching", "partial"
#: failure kinds that are symptoms of a peer's failure (a rank that hangs in NCCL or waits at the
#: rendezvous until its timeout): on a tie, a node with another kind failed first
SECONDARY_KINDS = frozenset({"nccl", "rendezvous", "terminated", "watchdog"})

HostFactory = Callable[[str], Host]


# ============================================================================ records


@dataclass
class Member:
    """One detached process of a deployment: its node, its place, its run."""

    node: str
    rank: int
    role: str
    kind: str
    run_id: str
    serves: bool = False
    port: int | None = None

    @property
    def tag(self) -> str:
        return self.node if self.kind == "server" else f"{self.node}:{self.kind}"


@dataclass
class DeploymentRecord:
    deploy_id: str
    profile: str
    engine: str
    mode: str
    nodes: list[str]
    rendezvous: str
    http_port: int
    created: float
    sim: bool = False
    members: list[Member] = field(default_factory=list)
    status: str = LAUNCHING
    diagnosis: str | None = None
    proof: str | None = None
    first_failed: str | None = None
    ended: float | None = None
    timeline: list[dict[str, Any]] = field(default_factory=list)

    @property
    def head(self) -> str:
        return self.nodes[0]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def result_meta(self) -> dict[str, Any]:
        """What a benchmark result records of the deployment it measured."""
        return {
            "id": self.deploy_id,
            "profile": self.profile,
            "engine": self.engine,
            "mode": self.mode,
            "nodes": list(self.nodes),
            "head": self.head,
            "sim": self.sim,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "DeploymentRecord":
        data = dict(d)
        data["members"] = [Member(**m) for m in data.get("members", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def stop_order(self) -> list[Member]:
        """The serving process, then the workers, then the rest of the head (see the plan)."""
        first = [m for m in self.members if m.serves]
        workers = [m for m in self.members if not m.serves and m.role == "worker"]
        rest = [m for m in self.members if not m.serves and m.role == "head"]
        return first + workers + rest


class DeploymentStore:
    """Local deployment records, one JSON file each, written atomically."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or state_dir() / "deployments"

    def path(self, deploy_id: str) -> Path:
        return self.root / f"{check_run_id(deploy_id)}.json"

    def save(self, rec: DeploymentRecord) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path(rec.deploy_id), rec.to_json(), mode=0o600)

    def load(self, deploy_id: str) -> DeploymentRecord | None:
        try:
            return DeploymentRecord.from_json(json.loads(self.path(deploy_id).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def all(self) -> list[DeploymentRecord]:
        out = []
        for p in sorted(self.root.glob("*.json")) if self.root.is_dir() else ():
            rec = self.load(p.stem)
            if rec is not None:
                out.append(rec)
        out.sort(key=lambda r: r.created)
        return out

    def find(self, ident: str) -> DeploymentRecord | None:
        """A deployment by id or unique prefix."""
        if not re.match(r"^[0-9a-f]{1,32}$", ident or ""):
            return None
        hits = [r for r in self.all() if r.deploy_id.startswith(ident)]
        exact = [r for r in hits if r.deploy_id == ident]
        return exact[0] if exact else hits[-1] if len(hits) == 1 else None

    def for_run(self, run_id: str) -> DeploymentRecord | None:
        for r in self.all():
            if any(m.run_id == run_id for m in r.members):
                return r
        return None


# ============================================================================ addresses


def resolve_head_address(profile: ServerProfile) -> str | None:
    """What the workers dial: ``[deploy] head_address`` (else the first of ``node_addresses``),
    else the head's host name after ``~/.ssh/config`` (an alias's ``HostName``); None leaves it to
    the plan builder."""
    if profile.deploy.head_address or profile.deploy.node_addresses or not profile.nodes:
        return None
    head = profile.nodes[0]
    if head == "local":
        return "127.0.0.1"
    try:
        from tui.hostops.sshconfig import resolve_endpoint

        return resolve_endpoint(parse_target(head)).host
    except Exception:  # noqa: BLE001 - a bad alias is reported when connecting; keep the plain name
        return node_host(head)


def default_host_factory(sim: bool = False) -> HostFactory:
    from tui.services.targets import get_host

    def make(node: str) -> Host:
        return get_host(node)

    return make


# ============================================================================ pre-flight


@dataclass(frozen=True)
class Finding:
    severity: str  # error | warning | info
    node: str
    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.node}: {self.check}: {self.message}"


_GPU_Q = ["--query-gpu=index,name,compute_cap", "--format=csv,noheader"]
#: $1 port: prints LISTEN when something listens on it (IPv4 or IPv6), from /proc (no ss/netstat needed)
_PORT_SCRIPT = r"""hex=$(printf '%04X' "$1")
for f in /proc/net/tcp /proc/net/tcp6; do
  [ -r "$f" ] || continue
  awk -v p=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' "$f" && { echo LISTEN; exit 0; }
done
echo FREE
"""
_LISTENER = (
    "import socket,sys,time\n"
    "s=socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET)\n"
    "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
    "s.bind((sys.argv[1],int(sys.argv[2])));s.listen(64);s.settimeout(0.2)\n"
    "print('LISTENING',flush=True);end=time.time()+float(sys.argv[3]);n=0\n"
    "while time.time()<end and n<int(sys.argv[4]):\n"
    " try:\n"
    "  c,a=s.accept();n+=1;print('PEER',a[0],flush=True);c.close()\n"
    " except socket.timeout:\n"
    "  pass\n"
)
_CONNECT = (
    "import socket,sys,time\n"
    "end=time.time()+float(sys.argv[3]);err='timed out'\n"
    "while time.time()<end:\n"
    " try:\n"
    "  socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=2).close();print('OK');sys.exit(0)\n"
    " except OSError as e:\n"
    "  err=e.strerror or str(e);time.sleep(0.2)\n"
    "print('FAIL',err);sys.exit(1)\n"
)


async def _gpus(host: Host) -> list[tuple[str, str]] | None:
    r = await host.run([host.nvidia_smi, *_GPU_Q], timeout=20)
    if not r.ok:
        return None
    out = []
    for line in r.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            out.append((parts[1], parts[2]))
    return out


async def _engine_version(host: Host, plan: DeploymentPlan, step: Step) -> str | None:
    cmd = step.command
    if cmd is None:
        return None
    if plan.sim:
        r = await host.run(await runtime.sim_argv(host, [*cmd.executable, "--version"], python=plan.python), timeout=60)
        return r.stdout.strip().splitlines()[-1] if r.ok and r.stdout.strip() else None
    py = cmd.executable[0] if cmd.executable and "python" in cmd.executable[0] else "python3"
    r = await host.run(
        [py, "-c", "import importlib.metadata as m,sys; print(m.version(sys.argv[1]))", plan.engine], timeout=60
    )
    return r.stdout.strip() if r.ok else None


async def preflight(
    plan: DeploymentPlan, hosts: Mapping[str, Host], *, reach_timeout: float = 10.0, python: str = "python3"
) -> list[Finding]:
    """Checks on every node before anything starts (errors mean: do not launch)."""
    findings: list[Finding] = []
    head = plan.head
    serving = {s.node: s for s in plan.steps if s.kind == "server"}
    if plan.on_runtime:
        # the simulator runs from the host-side runtime; its GPUs are what the checks below see
        for node, problem in (await dress_sim(hosts, python=plan.python)).items():
            findings.append(Finding("error", node, "runtime", problem))

    async def node_checks(node: str) -> None:
        host = hosts[node]
        try:
            runs = [h for h in await list_host_runs(host) if h.alive]
            if runs:
                findings.append(
                    Finding(
                        "error",
                        node,
                        "runs",
                        f"run {runs[0].run_id} (pid {runs[0].pid}) is still running there; stop it first",
                    )
                )
            apps = await compute_apps(host)
            if apps:
                findings.append(
                    Finding(
                        "error",
                        node,
                        "gpus",
                        "the GPUs hold processes tunedeck did not start: "
                        + ", ".join(f"pid {p}" for p, _, _ in apps[:4]),
                    )
                )
            gpus = await _gpus(host)
            need = max((s.gpus for s in plan.steps if s.node == node and s.kind != RAY_WAIT), default=0)
            if gpus is None:
                findings.append(Finding("error", node, "gpus", "nvidia-smi failed: no GPU information"))
            else:
                gpu_info[node] = gpus
                if len(gpus) < need:
                    findings.append(Finding("error", node, "gpus", f"{len(gpus)} GPUs; this node's part needs {need}"))
            step = serving.get(node) or serving.get(head)
            if step is not None:
                versions[node] = await _engine_version(host, plan, step)
            if node == head:
                r = await host.run_script(_PORT_SCRIPT, [str(plan.rendezvous_port)], timeout=20)
                if "LISTEN" in r.stdout:
                    findings.append(
                        Finding(
                            "error",
                            node,
                            "rendezvous port",
                            f"port {plan.rendezvous_port} is already in use on the head",
                        )
                    )
        except HostError as e:
            findings.append(Finding("error", node, "connect", str(e)))
        except runtime.RuntimeUnavailable as e:
            if not any(f.node == node and f.check == "runtime" for f in findings):
                findings.append(Finding("error", node, "runtime", str(e)))

    gpu_info: dict[str, list[tuple[str, str]]] = {}
    versions: dict[str, str | None] = {}
    await asyncio.gather(*(node_checks(n) for n in plan.nodes))
    if any(f.check in ("connect", "rendezvous port") for f in findings):
        return findings
    # the same GPU model and architecture everywhere
    kinds = {n: sorted({f"{name} (sm {cc})" for name, cc in g}) for n, g in gpu_info.items()}
    if len({tuple(v) for v in kinds.values()}) > 1:
        desc = "; ".join(f"{n}: {', '.join(v)}" for n, v in kinds.items())
        findings.append(Finding("error", "all", "gpu architecture", f"the nodes differ: {desc}"))
    known = {n: v for n, v in versions.items() if v}
    for n, v in versions.items():
        if not v:
            findings.append(Finding("error", n, "engine", f"{plan.engine} not found with the launch interpreter"))
    if len(set(known.values())) > 1:
        desc = ", ".join(f"{n}: {v}" for n, v in known.items())
        findings.append(Finding("error", "all", "engine version", f"{plan.engine} versions differ ({desc})"))
    # the head is reachable from every worker, on the rendezvous port, checked from the workers
    workers = [n for n in plan.nodes if n != head]
    bind = "::" if ":" in plan.head_address else "0.0.0.0"
    listener = asyncio.create_task(
        hosts[head].run(
            # the script goes on stdin (``python -``): a command line holds no newline
            [python, "-", bind, str(plan.rendezvous_port), str(reach_timeout + 2), str(len(workers))],
            input=_LISTENER,
            timeout=reach_timeout + 10,
        )
    )
    await asyncio.sleep(0.5)
    results = await asyncio.gather(
        *(
            hosts[w].run(
                [python, "-", plan.head_address, str(plan.rendezvous_port), str(reach_timeout)],
                input=_CONNECT,
                timeout=reach_timeout + 10,
            )
            for w in workers
        ),
        return_exceptions=True,
    )
    lr = await asyncio.gather(listener, return_exceptions=True)
    if isinstance(lr[0], BaseException) or "LISTENING" not in lr[0].stdout:
        why = lr[0] if isinstance(lr[0], BaseException) else (lr[0].stderr.strip().splitlines() or ["?"])[-1]
        findings.append(
            Finding(
                "warning",
                head,
                "reachability",
                f"could not listen on port {plan.rendezvous_port} to test it ({visible(str(why))})",
            )
        )
        return findings
    for w, res in zip(workers, results):
        if isinstance(res, BaseException):
            findings.append(Finding("error", w, "reachability", f"cannot test the head from here: {res}"))
        elif "OK" not in res.stdout:
            why = res.stdout.strip().removeprefix("FAIL ").strip() or res.stderr.strip()[-200:]
            findings.append(
                Finding(
                    "error",
                    w,
                    "reachability",
                    f"cannot reach the head at {plan.rendezvous} from this node ({visible(why)})",
                )
            )
    return findings


# ============================================================================ launch


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
    for step in plan.steps:
        host = hosts[step.node]
        try:
            if step.kind == RAY_WAIT:
                say(f"waiting for `ray status` on {step.node} to show {step.gpus} GPUs")
                have = await wait_ray_gpus(host, step.check, step.gpus, timeout=ray_wait, poll=ray_poll)
                if have < step.gpus:
                    raise LaunchRefused(
                        f"Ray shows {have:g} of the {step.gpus} GPUs the placement needs after {ray_wait:g} s"
                    )
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
            rec.first_failed = step.node
            rec.diagnosis = f"{step.node} ({step.kind}) did not start: {e}"
            rec.ended = time.time()
            rec.timeline.append({"t": rec.ended, "event": "launch-failed", "node": step.node, "message": str(e)})
            store.save(rec)
            say(rec.diagnosis)
            if rec.members:
                await stop(rec, hosts, store=store, runstore=runstore, grace=10, gpu_wait=30)
                rec.status = FAILED
                store.save(rec)
            return rec
        rec.members.append(Member(step.node, step.rank, step.role, step.kind, run.run_id, step.serves, step.port))
        rec.timeline.append(
            {"t": time.time(), "event": "started", "node": step.node, "kind": step.kind, "run_id": run.run_id}
        )
        store.save(rec)
        say(f"{step.label}: run {run.run_id} (pid {run.pid})")
    rec.status = STARTING
    store.save(rec)
    return rec


_RAY_GPU_RE = re.compile(r"([\d.]+)/([\d.]+) GPU")


async def wait_ray_gpus(host: Host, check: Sequence[str], need: int, *, timeout: float, poll: float = 1.0) -> float:
    """Poll ``ray status`` until the cluster shows ``need`` GPUs (returns how many it showed last)."""
    deadline = time.monotonic() + timeout
    have = 0.0
    while True:
        r = await host.run(list(check), timeout=60)
        m = _RAY_GPU_RE.search(r.stdout)
        if m:
            have = float(m.group(2))
            if have >= need:
                return have
        if time.monotonic() >= deadline:
            return have
        await asyncio.sleep(poll)


# ============================================================================ watch and triage


@dataclass(frozen=True)
class MemberState:
    """One member's startup, as triage sees it."""

    node: str
    rank: int
    role: str
    run_id: str
    state: str
    diagnosis: str | None = None
    proof: str | None = None
    kind: str | None = None  # the fatal kind from its log (oom, nccl, rendezvous, …)
    failed_at: float | None = None  # when it failed (its fatal line's time, else when it exited)
    alive: bool | None = None
    serves: bool = False
    progress: StartupProgress | None = None

    def jsonable(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "progress"}
        if self.progress is not None:
            d["phase"] = self.progress.phase
            d["fraction"] = self.progress.fraction
        return d


@dataclass(frozen=True)
class Verdict:
    state: str  # starting | ready | failed | stalled
    diagnosis: str | None = None
    proof: str | None = None
    first_failed: str | None = None
    never_joined: tuple[str, ...] = ()


_JOINED_RE = re.compile(r"(\d+)/(\d+) clients joined")


def triage(members: Sequence[MemberState], nodes: Sequence[str]) -> Verdict:
    """The deployment's state from its members'. A failure names the node that failed first
    (a symptom such as an NCCL error or a rendezvous timeout loses a tie against a real cause)
    and its proving line; a head that timed out waiting at the rendezvous while a worker never
    came names the worker: "node B never joined"."""
    failed = [m for m in members if m.state in (FAILED, "exited") or (m.kind and m.failed_at is not None)]
    if failed:

        def key(m: MemberState) -> tuple[float, int, int]:
            t = m.failed_at if m.failed_at is not None else float("inf")
            return (round(t), 1 if (m.kind in SECONDARY_KINDS) else 0, m.rank)

        first = min(failed, key=key)
        if first.kind == "rendezvous":
            late = [m for m in members if m.node != first.node and m not in failed]
            m = _JOINED_RE.search(first.proof or "")
            missing = len(late)
            if m and int(m.group(2)) >= len(nodes):  # ranks joined / all ranks: nodes = ranks / ranks per node
                per = int(m.group(2)) / len(nodes)
                missing = round((int(m.group(2)) - int(m.group(1))) / per)
            names = tuple(x.node for x in late)
            if names and missing >= len(names):
                who = ", ".join(_node_label(n, nodes) for n in names)
                verb = "never joined" if len(names) == 1 else "never joined (all of them)"
                return Verdict(FAILED, f"{who} {verb}: {first.node} {first.diagnosis}", first.proof, names[0], names)
            if names:
                who = " or ".join(_node_label(n, nodes) for n in names)
                return Verdict(
                    FAILED,
                    f"{missing} node(s) never joined ({who}): {first.node} {first.diagnosis}",
                    first.proof,
                    names[0],
                    names,
                )
        return Verdict(
            FAILED, f"{_node_label(first.node, nodes)} failed first: {first.diagnosis}", first.proof, first.node
        )
    if any(m.state == STALLED for m in members):
        s = next(m for m in members if m.state == STALLED)
        return Verdict(STALLED, f"{_node_label(s.node, nodes)} {s.diagnosis}", s.proof, None)
    head = [m for m in members if m.serves]
    if head and all(m.state == READY for m in head) and all(m.alive is not False for m in members):
        return Verdict(READY)
    return Verdict(STARTING)


def _node_label(node: str, nodes: Sequence[str]) -> str:
    i = list(nodes).index(node) if node in nodes else -1
    letter = chr(ord("A") + i) if 0 <= i < 26 else "?"
    return f"node {letter} ({node})"


def log_time(text: str | None, now: float | None = None) -> float | None:
    """Epoch seconds of an engine log timestamp: SGLang ``YYYY-MM-DD HH:MM:SS[.mmm]``, vLLM
    ``MM-DD HH:MM:SS`` (this year), in this machine's time zone."""
    if not text:
        return None
    for fmt in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(text, fmt).timestamp()
        except ValueError:
            pass
    try:
        year = datetime.fromtimestamp(now or time.time()).year
        return datetime.strptime(f"{year}-{text}", "%Y-%m-%d %H:%M:%S").timestamp()
    except ValueError:
        return None


async def ended_at(host: Host, run_dir: str | None) -> float | None:
    """When a run's wrapper wrote its exit status (the ``rc`` file's time on the host)."""
    if not run_dir:
        return None
    r = await host.run(["stat", "-c", "%Y", f"{run_dir}/rc"], timeout=15)
    s = r.stdout.strip()
    return float(s) if r.ok and s.isdigit() else None


def member_state(m: Member, t: StartupTracker, snap: StartupProgress, ended: float | None) -> MemberState:
    f = t.parser.state.failure
    kind = f.kind if f is not None else None
    at = log_time(f.time) if f is not None else None
    if snap.state in (FAILED, "exited") and at is None:
        at = ended or snap.time
    if snap.state in (FAILED, "exited") and kind is None:
        kind = "exited"
    return MemberState(
        m.node,
        m.rank,
        m.role,
        m.run_id,
        snap.state,
        snap.diagnosis,
        snap.proof,
        kind,
        at if kind else None,
        t.alive,
        m.serves,
        snap,
    )


async def _catch_up(t: StartupTracker, host: Host) -> bool:
    """The rest of an ended run's log, which its tracker stopped following when the process ended
    (its last words, e.g. the exception, may have come after the last read)."""
    if not t.rec.run_dir:
        return False
    r = await host.run(["tail", "-c", f"+{t.offset + 1}", "--", f"{t.rec.run_dir}/log"], timeout=60)
    if not r.ok or not r.stdout:
        return False
    t.feed(r.stdout.encode("utf-8", "surrogateescape"))
    t.set_alive(False, t.rc)
    return True


async def watch(
    rec: DeploymentRecord,
    hosts: Mapping[str, Host],
    *,
    store: DeploymentStore | None = None,
    runstore: RunStore | None = None,
    timeout: float | None = None,
    stall_after: float = 300.0,
    settle: float = 3.0,
    on_update: Callable[[list[MemberState], Verdict], Awaitable[None] | None] | None = None,
) -> tuple[Verdict, list[MemberState]]:
    """Follow every member until the deployment is ready, failed or stalled (or ``timeout``).
    After the first failure it waits ``settle`` seconds more, so the nodes that fail as a
    consequence are seen too, then names the first."""
    store = store or DeploymentStore()
    runstore = runstore or RunStore()
    trackers: list[tuple[Member, StartupTracker, Host]] = []
    for m in rec.members:
        run = runstore.load(m.run_id)
        if run is None:
            continue
        host = hosts[m.node]
        trackers.append(
            (
                m,
                StartupTracker(
                    host, run, store=runstore, stall_after=stall_after, probe_health=m.serves, poll_gpu=False
                ),
                host,
            )
        )
    tasks = [asyncio.create_task(t.run(timeout=None)) for _, t, _ in trackers]
    deadline = None if timeout is None else time.monotonic() + timeout
    failing_since: float | None = None
    ended: dict[str, float | None] = {}
    verdict = Verdict(STARTING)
    states: list[MemberState] = []
    try:
        while True:
            await asyncio.sleep(0.5)
            states = []
            for m, t, host in trackers:
                snap = t.snapshot()
                if snap.state in (FAILED, "exited") and m.run_id not in ended:
                    ended[m.run_id] = await ended_at(host, t.rec.run_dir)
                    if await _catch_up(t, host):
                        snap = t.snapshot()
                states.append(member_state(m, t, snap, ended.get(m.run_id)))
            verdict = triage(states, rec.nodes)
            if on_update is not None:
                res = on_update(states, verdict)
                if asyncio.iscoroutine(res):
                    await res
            if verdict.state == FAILED:
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since >= settle:
                    break
            elif verdict.state in (READY, STALLED):
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    cur = store.load(rec.deploy_id) or rec
    if verdict.state != STARTING or cur.status != verdict.state:
        cur.status = verdict.state
        cur.diagnosis, cur.proof, cur.first_failed = verdict.diagnosis, verdict.proof, verdict.first_failed
        cur.timeline.append({"t": time.time(), "event": verdict.state, "diagnosis": verdict.diagnosis})
        store.save(cur)
    return verdict, states


# ============================================================================ stop


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
        try:
            res = await stop_run(hosts[m.node], run, grace=grace, gpu_wait=gpu_wait, store=runstore)
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


# ============================================================================ logs


_TS_RE = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)[^\]]*\]|\b(\d\d-\d\d \d\d:\d\d:\d\d)\b")


async def read_log(host: Host, run_dir: str, max_bytes: int = 4 << 20) -> str:
    r = await host.run(["tail", "-c", str(max_bytes), "--", f"{run_dir}/log"], timeout=60)
    return r.stdout if r.ok else ""


def line_time(line: str) -> float | None:
    """Epoch seconds of the engine timestamp in a log line (None when it shows none)."""
    m = _TS_RE.search(line)
    return log_time(m.group(1) or m.group(2)) if m else None


def merge_logs(logs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(tag, log text) per member → (tag, line) in time order: each line sorts by the last
    timestamp its own log showed (lines without one follow the line before them), so each
    member's lines keep their order; ``\\r`` redraws keep only their last frame."""
    keyed: list[tuple[float, int, int, str, str]] = []
    for mi, (tag, text) in enumerate(logs):
        last = 0.0
        for li, raw in enumerate(text.rstrip("\n").split("\n") if text else ()):
            line = raw.rsplit("\r", 1)[-1] if "\r" in raw else raw
            t = line_time(line)
            if t is not None:
                last = t
            keyed.append((last, mi, li, tag, line))
    keyed.sort(key=lambda k: (k[0], k[1], k[2]))
    return [(tag, line) for _, _, _, tag, line in keyed]


async def merged_log(
    rec: DeploymentRecord, hosts: Mapping[str, Host], *, node: str | None = None, runstore: RunStore | None = None
) -> list[tuple[str, str]]:
    runstore = runstore or RunStore()
    logs: list[tuple[str, str]] = []
    for m in rec.members:
        if node is not None and node not in (m.node, m.tag):
            continue
        run = runstore.load(m.run_id)
        if run is None or not run.run_dir:
            continue
        logs.append((m.tag, await read_log(hosts[m.node], run.run_dir)))
    return merge_logs(logs)


def member_records(rec: DeploymentRecord, runstore: RunStore | None = None) -> list[tuple[Member, RunRecord | None]]:
    runstore = runstore or RunStore()
    return [(m, runstore.load(m.run_id)) for m in rec.members]


async def open_hosts(nodes: Sequence[str], factory: HostFactory | None = None) -> dict[str, Host]:
    factory = factory or default_host_factory()
    return {n: factory(n) for n in nodes}


async def dress_sim(hosts: Mapping[str, Host], *, python: str | None = None) -> dict[str, str]:
    """Give each node of a ``--sim`` deployment the simulated nvidia-smi where it has none of its
    own (:func:`tui.services.runtime.ensure_sim`); node → why not, for the nodes where that failed
    (their GPU queries then find no nvidia-smi)."""

    async def one(node: str, host: Host) -> tuple[str, str | None]:
        try:
            await runtime.ensure_sim(host, python=python)
        except (runtime.RuntimeUnavailable, HostError, OSError) as e:
            log.warning("%s: no simulated GPUs: %s", node, e)
            return node, str(e)
        return node, None

    done = await asyncio.gather(*(one(n, h) for n, h in hosts.items()))
    return {n: why for n, why in done if why is not None}


async def close_hosts(hosts: Mapping[str, Host]) -> None:
    await asyncio.gather(*(h.close() for h in hosts.values()), return_exceptions=True)


__all__ = [
    "DeploymentRecord",
    "DeploymentStore",
    "Finding",
    "Member",
    "MemberState",
    "MemberStop",
    "Verdict",
    "close_hosts",
    "launch",
    "line_time",
    "log_time",
    "merge_logs",
    "merged_log",
    "dress_sim",
    "open_hosts",
    "preflight",
    "resolve_head_address",
    "stop",
    "target_name",
    "triage",
    "wait_ray_gpus",
    "watch",
]
