"""A/B of multi-node deployments: the same campaign as on one host, with each side a deployment.

A single-host A/B runs on its GPU host (:mod:`tunedeck.hostside.abjob`). A deployment's side starts
processes on several nodes, and only this machine reaches them all, so the campaign runs here:
detached, in its own process under this machine's ``${TUNEDECK_HOME}/ab/``, with the same
:class:`tunedeck.ab.runner.ABRunner` and the same events, report and journal, over
:class:`tunedeck.services.deployops.DeploymentOps` (each side launched, watched and stopped as one
unit; each benchmark level a host-side job on the head node).

    python -m tunedeck.services.deployab JOB_DIR      the campaign (started by :func:`start`)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

from tunedeck.ab.ops import ProfileInfo
from tunedeck.ab.plan import Plan
from tunedeck.hostops import launcher
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.localhost import LocalHost
from tunedeck.profiles.deploy import DeploymentPlan, build_deployment
from tunedeck.profiles.model import ServerProfile
from tunedeck.services import deploy, deployops, jobs
from tunedeck.services.jobrun import ask_to_stop

if TYPE_CHECKING:
    from tunedeck.services.abrun import ABSettings

log = logging.getLogger(__name__)

MODULE = "tunedeck.services.deployab"


def plan_side(name: str, *, sim: bool) -> tuple[ServerProfile, DeploymentPlan]:
    """A multi-node profile and its plan; ValueError naming the profile (file and key) otherwise."""
    from tunedeck.profiles.store import ProfileStore

    profile = ProfileStore().get(name)
    if len(profile.nodes) < 2:
        raise ValueError(f"profile {name!r} runs on one host; an A/B of deployments needs two multi-node profiles")
    plan = build_deployment(profile, head_address=deploy.resolve_head_address(profile), sim=sim)
    return profile, plan


# ---------------------------------------------------------------------- the job here


async def start(
    a: str,
    b: str,
    plan: Plan,
    settings: ABSettings,
    *,
    sim: bool,
    confirm_stop: Callable[[str], Awaitable[bool]] | None = None,
    python: str | None = None,
) -> tuple[LocalHost, jobs.Job]:
    """Start the campaign detached on this machine; returns its host and job (follow them with
    :class:`tunedeck.services.abrun.ABRun`). ValueError names a profile that cannot be one side;
    :class:`jobs.JobError` when an A/B or a tuning campaign runs here or on any node."""
    from tunedeck.services.abrun import ab_spec, read_sides

    by_side = read_sides(a, b, lambda name: plan_side(name, sim=sim))
    sides = {label: deployops.side_info(*p) for label, p in by_side.items()}
    planned = {a: by_side["A"], b: by_side["B"]}
    label = deployops.nodes_label([p for _, p in planned.values()])
    # what runs on the nodes now is asked about here, where the user is; the campaign gets the answer
    ops = deployops.DeploymentOps(planned, host_label=label, python=python)
    try:
        await deployops.refuse_on_nodes(ops.hosts(ops.nodes))
        running = await ops.running_servers()
        stop_existing = await ask_to_stop([r.description for r in running], "", confirm_stop)
        # the levels run on the head nodes: the dataset is read here now and placed there
        datasets = await ops.place_dataset(plan.workload.path)
    finally:
        await ops.close()
    spec = ab_spec(
        sides["A"],
        sides["B"],
        plan,
        settings,
        stop_existing=stop_existing,
        host_label=label,
        sim=sim,
        python=python,
        datasets=datasets,
    )
    meta = {"ab_id": spec["ab_id"], "a": a, "b": b, "plan": plan.name, "nodes": ops.nodes}
    return await deployops.start_job("ab", MODULE, spec, meta)


# ---------------------------------------------------------------------- ended without its report


@dataclass
class LeftBy:
    """What an A/B of deployments whose process ended without its report left (:func:`left_by`)."""

    #: its levels' results here: mirrored as it ran, and mirrored again from each level's
    #: benchmark job on its head (a level that ran on after the process ended included)
    run_ids: list[str] = field(default_factory=list)
    #: its deployments still running, each with how to stop it
    running: list[str] = field(default_factory=list)
    #: what could not be read (a node that did not answer), one line each
    unread: list[str] = field(default_factory=list)


async def left_by(job: jobs.Job, ab_id: str, *, host_factory: deploy.HostFactory | None = None) -> LeftBy:
    """What the A/B ``ab_id`` run here as ``job`` left: the levels whose results exist, here or
    on a head node, and the deployments it launched that still run (its job folder's
    :data:`~tunedeck.services.deployops.LEDGER` names both). Reads what it can; a node that does not
    answer is named in :attr:`LeftBy.unread`, never raised."""
    from tunedeck.bench import store
    from tunedeck.util.files import read_jsonl

    out = LeftBy()
    try:
        started = [r for r in read_jsonl(Path(job.dir) / deployops.LEDGER) if isinstance(r, dict)]
    except FileNotFoundError:
        started = []
    except OSError as e:
        out.unread.append(f"{Path(job.dir) / deployops.LEDGER}: {e.strerror or e}")
        started = []
    factory = host_factory or deploy.default_host_factory()
    hosts: dict[str, Host] = {}

    def host(node: str) -> Host:
        if node not in hosts:
            hosts[node] = factory(node)
        return hosts[node]

    try:
        for r in started:
            node, jid = r.get("node"), r.get("bench")
            if not isinstance(node, str) or not isinstance(jid, str):
                continue
            try:
                out.run_ids += await jobs.mirror_results(host(node), await jobs.find(host(node), "bench", jid))
            except (HostError, jobs.JobError, OSError) as e:
                log.warning("A/B %s: benchmark job %s on %s not read: %s", ab_id, jid, node, e)
                out.unread.append(f"benchmark job {jid} on {node}: {e}")
        for run in store.list_runs():  # what was mirrored as it ran (a head that no longer answers)
            labels = run.meta.get("ab")
            if isinstance(labels, dict) and labels.get("ab_id") == ab_id and run.run_id not in out.run_ids:
                out.run_ids.append(run.run_id)
        records = deploy.DeploymentStore()
        for r in started:
            dep = r.get("deployment")
            rec = records.load(dep) if isinstance(dep, str) else None
            if rec is not None:
                await _still_running(rec, host, out)
    finally:
        await deploy.close_hosts(hosts)
    return out


async def _still_running(rec: deploy.DeploymentRecord, host: Callable[[str], Host], out: LeftBy) -> None:
    """``rec`` in ``out.running`` when a member of it is alive on its node."""
    stop = f"`tunedeck stop {rec.deploy_id}` stops it"
    for node in rec.nodes:
        try:
            alive = {h.run_id for h in await launcher.list_host_runs(host(node)) if h.alive}
        except HostError as e:
            out.unread.append(f"deployment {rec.deploy_id} on {node}: {e}")
            out.running.append(
                f"{rec.profile} (deployment {rec.deploy_id}): may still run ({node} did not answer); {stop}"
            )
            return
        if any(m.run_id in alive for m in rec.members if m.node == node):
            out.running.append(f"{rec.profile} (deployment {rec.deploy_id}): left by the A/B's process; {stop}")
            return


def main(argv: list[str] | None = None) -> int:
    from tunedeck.hostside import abjob

    def ops_for(job_dir: Path, spec: Mapping[str, Any], infos: Mapping[str, ProfileInfo]) -> deployops.DeploymentOps:
        sim = bool(spec.get("sim"))
        sides = {i.name: plan_side(i.name, sim=sim) for i in infos.values()}
        return deployops.spec_ops(spec, sides, ledger=job_dir / deployops.LEDGER)

    return deployops.job_main(MODULE, argv, abjob.run, ops_for)


if __name__ == "__main__":
    raise SystemExit(main())
