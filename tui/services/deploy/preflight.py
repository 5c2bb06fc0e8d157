"""Pre-flight on every node of a deployment, before anything starts."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Mapping

from tunedeck.hostops.gpuquery import compute_apps
from tunedeck.hostops.hostruns import list_host_runs
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.profiles.deploy import RAY_WAIT, DeploymentPlan, Step
from tunedeck.services import runtime
from tunedeck.services.deploy.records import dress_sim
from tunedeck.util.safety import visible


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


def checker_python(plan: DeploymentPlan) -> str:
    """What runs pre-flight's reachability checks on the nodes: the engine's own Python (the
    serving command's, when a Python runs it), the profile's on the simulator, else ``python3``."""
    if plan.sim:
        return plan.python
    return next(
        (
            s.command.executable[0]
            for s in plan.steps
            if s.command is not None and s.kind == "server" and "python" in s.command.executable[0]
        ),
        "python3",
    )


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
            # with a tunedeck run alive there, the GPUs' processes are most likely its own (a
            # deployment's engines): the finding above says to stop it; never call them foreign
            apps = [] if runs else await compute_apps(host)
            if apps:
                findings.append(
                    Finding(
                        "error",
                        node,
                        "gpus",
                        "the GPUs hold processes tunedeck did not start: "
                        + ", ".join(f"pid {p}" for p in list(dict.fromkeys(p for p, _, _ in apps))[:4]),
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
