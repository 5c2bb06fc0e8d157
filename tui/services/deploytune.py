"""A tuning campaign whose base is a multi-node profile: each candidate a deployment on the base's
nodes, run from this machine as an A/B of deployments is (:mod:`tunedeck.services.deployops`).

Here, before anything is stopped: each candidate's deployment is planned (the base with the
candidate's changes; one that cannot be built is skipped with the reason) and pre-flighted on every
node (:func:`tunedeck.services.deploy.preflight`, once per distinct shape of deployment; a candidate
whose pre-flight fails is skipped with its findings, as on one host, and what of ours runs on the
nodes is no reason: the campaign stops it first); the campaign is refused while an A/B or a tuning
campaign runs here or on any node; what of ours runs on the nodes is asked about. Then:

    python -m tunedeck.services.deploytune JOB_DIR      the campaign (started by :func:`start`)

runs detached here: the host-side campaign's own job (:func:`tunedeck.hostside.tunejob.run`: the
runner of :mod:`tunedeck.ab.tune`, its ``state.json`` replaced after every candidate, the report, the
one-campaign lock) over :class:`~tunedeck.services.deployops.DeploymentOps`, each candidate's profile
read back from the spec. It is followed, attached (a killed one is started again here and resumes
from its state), cancelled and journaled through :class:`tunedeck.services.tunerun.TuneRun`, as a
campaign on one host is.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Sequence

from tunedeck.ab.ops import ProfileInfo
from tunedeck.ab.tune import Workload
from tunedeck.profiles.deploy import DeploymentPlan, build_deployment
from tunedeck.profiles.model import ProfileError, ServerProfile, profile_to_dict
from tunedeck.profiles.profileread import profile_from_dict
from tunedeck.services import deploy, jobs
from tunedeck.services.deployops import (
    DeploymentOps,
    job_main,
    nodes_label,
    refuse_on_nodes,
    side_info,
    spec_ops,
    start_job,
)
from tunedeck.services.jobrun import ask_to_stop, campaign_python
from tunedeck.services.tunerun import CampaignSettings, TuneRun, campaign_spec, journal_start, spec_entries

if TYPE_CHECKING:
    from tunedeck.profiles.vary import Candidate

log = logging.getLogger(__name__)

MODULE = "tunedeck.services.deploytune"
#: pre-flight findings that a server of ours running on the nodes explains (the campaign stops it first)
HELD_CHECKS = ("runs", "rendezvous port")

Planned = tuple["Candidate", DeploymentPlan | None, str | None]


def plan_candidates(candidates: Sequence["Candidate"], *, sim: bool) -> list[Planned]:
    """(candidate, its deployment, why it cannot be one or None) for each candidate."""
    out: list[Planned] = []
    for c in candidates:
        try:
            plan = build_deployment(c.profile, head_address=deploy.resolve_head_address(c.profile), sim=sim)
        except ProfileError as e:
            out.append((c, None, f"the deployment cannot be built: {e}"))
            continue
        out.append((c, plan, None))
    return out


def _shape(plan: DeploymentPlan) -> tuple[Any, ...]:
    """What pre-flight's findings depend on: two candidates of one shape share them."""
    serving = tuple(tuple(s.command.executable) for s in plan.steps if s.kind == "server" and s.command is not None)
    steps = tuple((s.node, s.kind, s.gpus) for s in plan.steps)
    return (steps, serving, plan.rendezvous_port, plan.head_address, plan.engine, plan.sim, plan.python)


async def preflight_candidates(ops: DeploymentOps, planned: Sequence[Planned], *, held: bool) -> list[Planned]:
    """``planned`` with each deployment's pre-flight run on its nodes (``held``: servers of ours
    run there, which the campaign stops first: the findings they explain are no reason)."""
    found: dict[tuple[Any, ...], list[deploy.Finding]] = {}
    out: list[Planned] = []
    for c, plan, skip in planned:
        if plan is None:
            out.append((c, plan, skip))
            continue
        key = _shape(plan)
        if key not in found:
            found[key] = await deploy.preflight(plan, ops.hosts(plan.nodes), python=deploy.checker_python(plan))
        errors = [f for f in found[key] if f.severity == "error" and not (held and f.check in HELD_CHECKS)]
        if errors:
            more = f" (and {len(errors) - 2} more)" if len(errors) > 2 else ""
            skip = "pre-flight failed: " + "; ".join(f"{f.node}: {f.check}: {f.message}" for f in errors[:2]) + more
        out.append((c, plan, skip))
    return out


def _ops(planned: Sequence[Planned], **kw: Any) -> DeploymentOps:
    plans = [p for _, p, _ in planned if p is not None]
    return DeploymentOps(
        {c.name: (c.profile, p) for c, p, _ in planned if p is not None}, host_label=nodes_label(plans), **kw
    )


async def check_candidates(
    candidates: Sequence["Candidate"], *, sim: bool = False
) -> list[tuple["Candidate", ProfileInfo | None, str | None]]:
    """(candidate, what its head will serve, why it is skipped or None) for each candidate of a
    multi-node base: its deployment planned and pre-flighted on the nodes. Stops nothing."""
    planned = plan_candidates(candidates, sim=sim)
    ops = _ops(planned)
    try:
        held = bool(await ops.running_servers()) if ops.sides else False
        checked = await preflight_candidates(ops, planned, held=held)
    finally:
        await ops.close()
    return _with_infos(checked)


def _with_infos(checked: Sequence[Planned]) -> list[tuple["Candidate", ProfileInfo | None, str | None]]:
    """(candidate, what its head will serve, why it is skipped or None) of pre-flighted candidates."""
    return [(c, side_info(c.profile, p) if p is not None and skip is None else None, skip) for c, p, skip in checked]


async def start(
    base: str,
    candidates: Sequence["Candidate"],
    slo: Sequence[str],
    workload: Workload,
    settings: CampaignSettings,
    *,
    sim: bool = False,
    confirm_stop: Callable[[str], Awaitable[bool]] | None = None,
    python: str | None = None,
    on_skip: Callable[[str, str], None] | None = None,
) -> TuneRun:
    """Plan and pre-flight every candidate's deployment (an impossible one is skipped with its
    reason: ``on_skip(name, why)``), refuse while an A/B or a campaign runs here or on a node, ask
    before stopping what of ours runs on the nodes, then start the campaign detached here (with
    ``settings``, as on one host). Raises :class:`jobs.JobError` (refused, every candidate
    impossible) or :class:`HostError`."""
    planned = plan_candidates(candidates, sim=sim)
    if all(p is None for _, p, _ in planned):
        raise jobs.JobError(f"not started, nothing stopped: {planned[0][0].name}: {planned[0][2]}")
    py = campaign_python(python, (c.profile for c in candidates))
    ops = _ops(planned, python=py)
    label, nodes = ops.host_label, ops.nodes
    try:
        await refuse_on_nodes(ops.hosts(nodes))
        running = await ops.running_servers()
        checked = _with_infos(await preflight_candidates(ops, planned, held=bool(running)))
        entries = spec_entries(checked, label, on_skip)
        for (c, _info, skip), entry in zip(checked, entries):
            if skip is None:  # read back by the job (a resume too): the candidate's whole profile
                entry["profile"] = profile_to_dict(c.profile)
        stop_existing = await ask_to_stop([r.description for r in running], "", confirm_stop)
        # the levels run on the head: the dataset is read here now and placed there
        datasets = await ops.place_dataset(workload.plan.workload.path)
    finally:
        await ops.close()
    spec = campaign_spec(
        base,
        entries,
        slo,
        workload,
        settings,
        stop_existing=stop_existing,
        host_label=label,
        sim=sim,
        python=py,
        datasets=datasets,
    )
    host, job = await start_job("tune", MODULE, spec, {"campaign": spec["campaign"], "base": base, "nodes": nodes})
    journal_start(spec, job.job_id)
    return TuneRun(host, job, python=py)


def candidate_profile(spec: Mapping[str, Any], entry: Mapping[str, Any]) -> ServerProfile:
    """A candidate's profile as the spec holds it (read with the base's name, which its file
    has, then named as the candidate); :class:`ProfileError` naming the key."""
    doc = {k: v for k, v in dict(entry["profile"]).items() if k != "name"}
    return dataclasses.replace(profile_from_dict(doc, name=str(spec["base"])), name=str(entry["name"]))


def sides_of(spec: Mapping[str, Any]) -> dict[str, tuple[ServerProfile, DeploymentPlan]]:
    """Each candidate to measure (not skipped) with its deployment, from the spec."""
    sim = bool(spec.get("sim"))
    out = {}
    for entry in spec["candidates"]:
        if entry.get("skip") or not isinstance(entry.get("profile"), Mapping):
            continue
        prof = candidate_profile(spec, entry)
        out[prof.name] = (prof, build_deployment(prof, head_address=deploy.resolve_head_address(prof), sim=sim))
    return out


def main(argv: list[str] | None = None) -> int:
    from tunedeck.hostside import tunejob

    def ops_for(job_dir: Path, spec: Mapping[str, Any], infos: Mapping[str, ProfileInfo]) -> DeploymentOps:
        return spec_ops(spec, sides_of(spec))

    return job_main(MODULE, argv, tunejob.run, ops_for)


if __name__ == "__main__":
    raise SystemExit(main())
