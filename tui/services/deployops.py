"""Campaigns over multi-node deployments, run from this machine: the server operations and the
job frame that an A/B of deployments (:mod:`tunedeck.services.deployab`) and a tuning campaign over a
multi-node base (:mod:`tunedeck.services.deploytune`) share.

A single-host campaign runs on its GPU host. A deployment starts processes on several nodes that
only this machine reaches, so these campaigns run detached **here**, each in its own process under
this machine's ``${TUNEDECK_HOME}/<kind>/<job>/`` (closing the terminal or losing a link does not
end it), followed by byte offset like any job, with the runner, events, report and journal of the
host-side job. What runs next to the GPUs still runs there:

- each side or candidate is launched, watched and stopped as one unit (:mod:`tunedeck.services.deploy`:
  the engine's start order, triage naming the node that failed first, stop confirming every
  node's GPUs are free);
- each benchmark level is a host-side benchmark job on the head node against the port it serves
  (:class:`tunedeck.services.benchrun.BenchRun`), its results mirrored here; the workload's dataset
  file is read here once, when the campaign starts, and placed on each head node
  (:meth:`DeploymentOps.place_dataset`), where every level's client reads it.

One campaign per deployment's nodes: a new one is refused while an A/B or a tuning campaign runs
here (the campaigns run here share one lock) or on any of its nodes (:func:`refuse_on_nodes`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence

from tunedeck.ab.ops import (
    BenchResult,
    LaunchHandle,
    LevelRequest,
    ProfileInfo,
    ReadyResult,
    RunningServer,
    ServerOps,
    StopResult,
)
from tunedeck.hostops import hostruns, launcher, runstop
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.localhost import LocalHost
from tunedeck.hostops.runstore import FAILED, READY, RunStore, new_run_id
from tunedeck.hostside.abops import DEFAULT_READY_TIMEOUT, flush_prefix_cache, level_config, report_progress
from tunedeck.hostside.jobfiles import SPEC
from tunedeck.profiles.deploy import DeploymentPlan
from tunedeck.profiles.model import ServerProfile
from tunedeck.services import deploy, jobs, runtime
from tunedeck.services.benchrun import HOST, BenchRun, read_data_file
from tunedeck.services.jobrun import refuse_while_running
from tunedeck.util.files import JsonlAppender, os_error_text
from tunedeck.util.safety import redact_argv

log = logging.getLogger(__name__)

#: what a campaign run here started, one JSON line each, in its job folder: ``{"deployment": ID}``
#: and ``{"bench": JOB_ID, "node": HEAD}`` (a level's benchmark job)
LEDGER = "started.jsonl"


def side_info(profile: ServerProfile, plan: DeploymentPlan) -> ProfileInfo:
    """What the report shows of a deployment: the head's serving command, env and port."""
    serving = next(s for s in plan.steps if s.serves and s.command is not None)
    assert serving.command is not None
    served = profile.model
    for k, v in profile.flags or ():
        if k in ("served-model-name", "served_model_name") and isinstance(v, str):
            served = v
    return ProfileInfo(
        name=profile.name,
        engine=profile.engine,
        model=profile.model,
        argv=tuple(serving.command.argv),
        env=dict(serving.command.env_dict),
        port=plan.http_port,
        served_model=served,
    )


def nodes_label(plans: Sequence[DeploymentPlan]) -> str:
    """How a campaign over these deployments names where it runs (its report's ``host``)."""
    return f"deployments on {', '.join(sorted({n for p in plans for n in p.nodes}))}"


class DeploymentOps:
    """:class:`tunedeck.ab.ops.ServerOps` over deployments (``sides``: profile name -> its profile
    and plan): each launched on its nodes, each benchmark host-side on the head."""

    def __init__(
        self,
        sides: Mapping[str, tuple[ServerProfile, DeploymentPlan]],
        *,
        host_label: str,
        host_factory: deploy.HostFactory | None = None,
        python: str | None = None,
        datasets: Mapping[str, str] | None = None,
        ledger: Path | None = None,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
        stop_grace: float = 30.0,
        gpu_wait: float = 60.0,
    ) -> None:
        self.sides = dict(sides)
        self.host_label = host_label
        self.factory = host_factory or deploy.default_host_factory()
        self.python = python
        #: the workload's dataset file on each head node: {head: its path there} (:meth:`place_dataset`)
        self.datasets = dict(datasets or {})
        #: where the campaign notes what it started, one JSON line each (:data:`LEDGER`), if anywhere
        self.ledger = ledger
        self.ready_timeout = ready_timeout
        self.stop_grace = stop_grace
        self.gpu_wait = gpu_wait
        self._hosts: dict[str, Host] = {}

    def host(self, node: str) -> Host:
        """One connection per node for the whole campaign (deployments share the nodes they share)."""
        if node not in self._hosts:
            self._hosts[node] = self.factory(node)
        return self._hosts[node]

    def hosts(self, nodes: Sequence[str]) -> dict[str, Host]:
        return {n: self.host(n) for n in nodes}

    @property
    def nodes(self) -> list[str]:
        return sorted({n for _, plan in self.sides.values() for n in plan.nodes})

    async def close(self) -> None:
        await deploy.close_hosts(self._hosts)

    def _note(self, record: Mapping[str, str]) -> None:
        """One line of the campaign's :attr:`ledger`: a deployment or a level's benchmark job it
        started, for the report rebuilt when its process ends without one."""
        if self.ledger is None:
            return
        try:
            with JsonlAppender(self.ledger, sync_every=1) as out:
                out.append(dict(record))
        except OSError as e:
            log.error("%s not written: %s", self.ledger, os_error_text(e))

    def _side(self, name: str) -> tuple[ServerProfile, DeploymentPlan]:
        try:
            return self.sides[name]
        except KeyError:
            raise ValueError(f"profile {name!r} is not a deployment of this campaign") from None

    # ------------------------------------------------------------------ profiles
    async def resolve(self, profile: str) -> ProfileInfo:
        return side_info(*self._side(profile))

    # ------------------------------------------------------------------ running servers
    async def running_servers(self) -> list[RunningServer]:
        """What of ours runs on the nodes: a deployment recorded here is one server (stopped as a
        unit, in its order: the handle is its record, the id its deployment id, the one a
        campaign's state names); any other run is one on its node."""
        by_run = {m.run_id: rec for rec in deploy.DeploymentStore().all() for m in rec.members}
        out: list[RunningServer] = []
        seen: set[str] = set()
        for node in self.nodes:
            for h in await hostruns.list_host_runs(self.host(node)):
                if not h.alive:
                    continue
                rec = by_run.get(h.run_id)
                if rec is not None:
                    if rec.deploy_id not in seen:
                        seen.add(rec.deploy_id)
                        desc = f"deployment {rec.deploy_id} ({rec.profile}) on {', '.join(rec.nodes)}"
                        out.append(RunningServer(rec.deploy_id, desc, rec, rec.profile))
                    continue
                prof = h.meta.get("profile") if isinstance(h.meta, Mapping) else None
                desc = f"run {h.run_id} on {node}" + (f" ({prof})" if prof else "")
                out.append(RunningServer(f"{node}/{h.run_id}", desc, (node, h), str(prof) if prof else None))
        return out

    async def stop_running(self, server: RunningServer) -> StopResult:
        if isinstance(server.handle, deploy.DeploymentRecord):
            return await self._stop_deployment(server.handle)
        node, h = server.handle
        host = self.host(node)
        recs = await hostruns.reattach(host)
        rec = next((r for r in recs if r.run_id == h.run_id), None) or RunStore().load(h.run_id)
        if rec is None:
            return StopResult(False, None, f"run {h.run_id} on {node}: no record")
        res = await runstop.stop_run(host, rec, grace=self.stop_grace, gpu_wait=self.gpu_wait)
        ok = res.state in ("stopped", "exited", "stale")
        return StopResult(ok, res.gpu_released if ok else None, f"{node}: {res.message}")

    # ------------------------------------------------------------------ launch / ready
    async def launch(self, info: ProfileInfo) -> LaunchHandle:
        profile, plan = self._side(info.name)
        rec = await deploy.launch(
            plan,
            self.hosts(plan.nodes),
            on_event=lambda m: log.info("%s: %s", info.name, m),
            ray_wait=float(profile.deploy.ray_wait),
        )
        if rec.status == FAILED:
            raise RuntimeError(rec.diagnosis or f"deployment {rec.deploy_id} did not start")
        self._note({"deployment": rec.deploy_id})
        runs = RunStore()
        head = next((m for m in rec.members if m.serves), None)
        run = runs.load(head.run_id) if head is not None else None
        server_log = f"{plan.head}:{run.run_dir}/log" if run is not None and run.run_dir else None
        return LaunchHandle(rec.deploy_id, server_log, f"http://127.0.0.1:{plan.http_port}", rec)

    async def wait_ready(
        self, info: ProfileInfo, handle: LaunchHandle, on_progress: Callable[[str, float | None], None]
    ) -> ReadyResult:
        """Every node followed by its startup tracker; the slowest node's fraction is the side's."""
        rec: deploy.DeploymentRecord = handle.handle
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        last = [""]

        def update(states: list[deploy.MemberState], verdict: deploy.Verdict) -> None:
            fracs = [s.progress.fraction for s in states if s.progress is not None and s.progress.fraction is not None]
            text = "  ".join(
                f"{s.node}: {(s.progress.phase if s.progress is not None else None) or s.state}" for s in states
            )
            if text != last[0]:
                last[0] = text
                on_progress(text, min(fracs) if fracs else None)

        verdict, _ = await deploy.watch(rec, self.hosts(rec.nodes), timeout=self.ready_timeout, on_update=update)
        elapsed = loop.time() - t0
        saved = deploy.DeploymentStore().load(rec.deploy_id) or rec
        timeline = tuple(
            {**e, "t": round(float(e["t"]) - saved.created, 3)} if isinstance(e.get("t"), (int, float)) else dict(e)
            for e in saved.timeline
        )
        if verdict.state == READY:
            return ReadyResult(True, elapsed, timeline=timeline)
        diag = verdict.diagnosis or (
            f"not ready after {self.ready_timeout:g} s"
            if verdict.state == "starting"
            else f"deployment {verdict.state}"
        )
        return ReadyResult(False, elapsed, diag, verdict.proof, timeline)

    # ------------------------------------------------------------------ cache, metrics
    async def _head_url(self, rec: deploy.DeploymentRecord) -> str:
        """The head's API from here (a forward: flush and metrics only, never a benchmark)."""
        local = await self.host(rec.head).forward_port(rec.http_port)
        return f"http://127.0.0.1:{local}"

    async def flush_cache(self, info: ProfileInfo, handle: LaunchHandle) -> str:
        rec: deploy.DeploymentRecord = handle.handle
        try:
            base = await self._head_url(rec)
        except HostError as e:
            return f"cache not flushed: {e}"
        return f"{await flush_prefix_cache(info.engine, base)} on {rec.head}"

    async def acceptance_rate(self, info: ProfileInfo, handle: LaunchHandle) -> tuple[float | None, str | None]:
        return None, None  # the levels' summaries carry the head's counters; no gauge fallback here

    # ------------------------------------------------------------------ bench
    async def place_dataset(self, path: str | None) -> dict[str, str]:
        """The workload's dataset file (checked here before: the CLI builds every level's
        requests before it starts anything) read once here and placed on each head node of the
        campaign's deployments once per content (``${TUNEDECK_HOME}/data/<sha256>`` there, as
        for a benchmark on one host); returns {head: its path there}, what :meth:`bench` gives
        each level (the spec keeps it for the job). ``{}`` without a file. Raises
        :class:`~tunedeck.bench.workloads.WorkloadError` (the file) or :class:`HostError`."""
        if not path:
            return {}
        data = read_data_file(path)
        for head in sorted({plan.head for _, plan in self.sides.values()}):
            self.datasets[head] = await runtime.ensure_data(self.host(head), data, python=self.python)
        return dict(self.datasets)

    async def bench(self, info: ProfileInfo, handle: LaunchHandle, req: LevelRequest) -> BenchResult:
        rec: deploy.DeploymentRecord = handle.handle
        cfg = level_config(info, handle.url, req)
        if cfg.workload.path:  # the client on the head reads the file placed there at the start
            placed = self.datasets.get(rec.head)
            if placed is None:
                return BenchResult(None, {}, None, f"the dataset {cfg.workload.path} was not placed on {rec.head}")
            cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, path=placed))
        meta = {
            "target": rec.head,
            "server_port": rec.http_port,
            "server": {"argv": redact_argv(info.argv), "engine": info.engine, "launch_run_id": handle.run_id},
            "deployment": rec.result_meta(),
            "ab": dict(req.labels),
            "profile": info.name,
        }
        try:
            run = await BenchRun.start(
                self.host(rec.head), cfg, meta_extra=meta, where=HOST, python=self.python, placed=True
            )
        except (jobs.JobError, HostError, OSError) as e:
            return BenchResult(None, {}, None, f"benchmark not started on {rec.head}: {e}")
        if run.job_id is not None:
            self._note({"bench": run.job_id, "node": rec.head})
        try:
            async for ev in run.events():
                report_progress(req, ev)
        except asyncio.CancelledError:
            try:
                await asyncio.shield(run.stop())
            except (jobs.JobError, HostError) as e:
                log.warning("benchmark job %s on %s not stopped: %s", run.job_id, rec.head, e)
            raise
        if not run.summaries:
            err = (run.exit or {}).get("error") or "no level completed"
            return BenchResult(None, {}, None, f"benchmark on {rec.head} failed: {err}")
        s = run.summaries[0]
        return BenchResult(s.get("run_id"), s, None)

    # ------------------------------------------------------------------ stop
    async def stop(self, info: ProfileInfo, handle: LaunchHandle) -> StopResult:
        return await self._stop_deployment(handle.handle)

    async def _stop_deployment(self, rec: deploy.DeploymentRecord) -> StopResult:
        stops, free = await deploy.stop(rec, self.hosts(rec.nodes), grace=self.stop_grace, gpu_wait=self.gpu_wait)
        ok = all(s.state in ("stopped", "exited", "stale") for s in stops)
        bad = [f"{s.node} {s.kind}: {s.message}" for s in stops if s.state not in ("stopped", "exited", "stale")]
        held = [n for n, f in free.items() if f is False]
        unknown = [n for n, f in free.items() if f is None]
        freed = False if held else (None if unknown else True)
        msg = "; ".join(bad) or (
            f"GPUs still hold its processes on {', '.join(held)}" if held else f"deployment {rec.deploy_id} stopped"
        )
        return StopResult(ok, freed, msg)


# ---------------------------------------------------------------------- the job here


def home() -> Path:
    """This machine's ``${TUNEDECK_HOME}`` (where the launcher keeps run and job folders)."""
    return Path(os.environ.get("TUNEDECK_HOME") or Path.home() / ".tunedeck")


async def refuse_on_nodes(hosts: Mapping[str, Host]) -> None:
    """One campaign per deployment's nodes: :class:`jobs.JobError` naming an A/B or a tuning
    campaign that runs here (the campaigns of deployments run here) or on any of ``hosts``."""
    await refuse_while_running(LocalHost())
    for host in hosts.values():
        await refuse_while_running(host)


def job_argv(module: str, job_dir: str | Path) -> list[str]:
    """The command of a campaign job run here (``python -m MODULE JOB_DIR``)."""
    return [sys.executable, "-m", module, str(job_dir)]


async def start_job(
    kind: str, module: str, spec: Mapping[str, object], meta: Mapping[str, object]
) -> tuple[LocalHost, jobs.Job]:
    """Write ``spec`` (0600) under ``${TUNEDECK_HOME}/<kind>/<id>/`` here and start ``module`` on it
    detached; the job's meta says it is a campaign of deployments (and on which ``nodes``)."""
    host = LocalHost()
    jid = new_run_id()
    jdir = home() / kind / jid
    try:
        await host.put_file(json.dumps(spec).encode("utf-8"), f"{jdir}/{SPEC}")
    except OSError as e:
        raise jobs.JobError(f"writing the {kind} job's spec failed: {os_error_text(e)}") from None
    full = {"kind": kind, "run_id": jid, "deployments": True, **dict(meta)}
    started = await launcher.start_detached(host, launcher.launch_script(kind, jid, job_argv(module, jdir), {}, full))
    if started.pid is None:
        raise jobs.JobError(f"the {kind} job did not start: {started.error}")
    job = jobs.Job(
        kind, jid, started.run_dir or str(jdir), host.target, started.pid, started.starttime, True, None, full
    )
    return host, job


def spec_python(spec: Mapping[str, object]) -> str | None:
    """The interpreter a campaign's spec names for the host-side runtime (None: the host's own)."""
    py = spec.get("python")
    return py if isinstance(py, str) else None


def spec_datasets(spec: Mapping[str, object]) -> dict[str, str]:
    """Where a campaign's spec says its dataset file was placed: {head: its path there}
    (:meth:`DeploymentOps.place_dataset`); ValueError for a malformed entry (a bad spec)."""
    got = spec.get("datasets") or {}
    if not isinstance(got, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in got.items()):
        raise ValueError(f"datasets: expected {{head: path}}, got {got!r}")
    return dict(got)


def spec_ops(
    spec: Mapping[str, object], sides: Mapping[str, tuple[ServerProfile, DeploymentPlan]], *, ledger: Path | None = None
) -> DeploymentOps:
    """The operations a campaign job measures ``sides`` with, as its spec says: the label of its
    hosts, the host-side interpreter, where its dataset was placed."""
    return DeploymentOps(
        sides,
        host_label=str(spec.get("host_label") or "deployments"),
        python=spec_python(spec),
        datasets=spec_datasets(spec),
        ledger=ledger,
    )


#: a campaign's operations from its spec and profiles (what :mod:`tunedeck.hostside.abjob` and
#: :mod:`tunedeck.hostside.tunejob` ask for)
MakeOps = Callable[[Mapping[str, Any], Mapping[str, ProfileInfo]], ServerOps]


def job_main(
    module: str,
    argv: list[str] | None,
    job: Callable[[Path, MakeOps], Awaitable[int]],
    ops_for: Callable[[Path, Mapping[str, Any], Mapping[str, ProfileInfo]], DeploymentOps],
) -> int:
    """The entry point of a campaign job here: ``job(job_dir, make_ops)`` runs it, with the
    operations ``ops_for(job_dir, spec, infos)`` makes (each closed at the end)."""
    from tunedeck.util.aio import run_async

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print(f"usage: python -m {module} JOB_DIR", file=sys.stderr)
        return 2
    job_dir = Path(args[0]).resolve()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # the job's own stop marker stays with this process: the deployments it launches get their own
    os.environ.pop("TUNEDECK_RUN_ID", None)
    made: list[DeploymentOps] = []

    def make_ops(spec: Mapping[str, Any], infos: Mapping[str, ProfileInfo]) -> DeploymentOps:
        ops = ops_for(job_dir, spec, infos)
        made.append(ops)
        return ops

    async def campaign() -> int:
        try:
            return await job(job_dir, make_ops)
        finally:
            for o in made:
                await o.close()

    return run_async(campaign())


__all__ = [
    "LEDGER",
    "DeploymentOps",
    "home",
    "job_argv",
    "job_main",
    "nodes_label",
    "refuse_on_nodes",
    "side_info",
    "spec_datasets",
    "spec_ops",
    "spec_python",
    "start_job",
]
