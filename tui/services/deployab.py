"""A/B of multi-node deployments: the same campaign as on one host, with each side a deployment.

A single-host A/B runs on its GPU host (:mod:`tui.hostside.abjob`). A deployment's side starts
processes on several nodes, and only this machine reaches them all, so the campaign runs here:
detached, in its own process under this machine's ``${TUNEDECK_HOME}/ab/``, with the same
:class:`tui.ab.runner.ABRunner` and the same events, report and journal, over
:class:`tui.services.deployops.DeploymentOps` (each side launched, watched and stopped as one
unit; each benchmark level a host-side job on the head node).

    python -m tui.services.deployab JOB_DIR      the campaign (started by :func:`start`)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

from tui.ab.plan import Plan
from tui.ab.runner import ProfileInfo
from tui.hostops.hosts import LocalHost
from tui.profiles.deploy import DeploymentPlan, build_deployment
from tui.profiles.model import ServerProfile
from tui.services import deploy, jobs
from tui.services.deployops import DeploymentOps, job_main, nodes_label, refuse_on_nodes, side_info, start_job
from tui.services.jobrun import ask_to_stop

log = logging.getLogger(__name__)

MODULE = "tui.services.deployab"


def plan_side(name: str, *, sim: bool) -> tuple[ServerProfile, DeploymentPlan]:
    """A multi-node profile and its plan; ValueError naming the profile (file and key) otherwise."""
    from tui.profiles.store import ProfileStore

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
    *,
    sim: bool,
    repeats: int,
    interleave: bool,
    noise_pct: float | None,
    confirm_stop: Callable[[str], Awaitable[bool]] | None = None,
    python: str | None = None,
) -> tuple[LocalHost, jobs.Job]:
    """Start the campaign detached on this machine; returns its host and job (follow them with
    :class:`tui.services.abrun.ABRun`). ValueError names a profile that cannot be one side;
    :class:`jobs.JobError` when an A/B or a tuning campaign runs here or on any node."""
    from tui.ab.journal import new_id

    sides = {}
    planned: dict[str, tuple[ServerProfile, DeploymentPlan]] = {}
    for side, name in (("A", a), ("B", b)):
        try:
            planned[name] = plan_side(name, sim=sim)
        except Exception as e:  # profile errors name the file and the key
            raise ValueError(f"{side} ({name}): {e}") from e
        sides[side] = side_info(*planned[name])
    label = nodes_label([p for _, p in planned.values()])
    # what runs on the nodes now is asked about here, where the user is; the campaign gets the answer
    ops = DeploymentOps(planned, host_label=label)
    try:
        await refuse_on_nodes(ops.hosts(ops.nodes))
        running = await ops.running_servers()
    finally:
        await ops.close()
    stop_existing = await ask_to_stop([r.description for r in running], "", confirm_stop)
    ab_id = new_id("ab")
    spec = {
        "ab_id": ab_id,
        "a": sides["A"].to_json(),
        "b": sides["B"].to_json(),
        "plan": plan.to_dict(),
        "repeats": repeats,
        "interleave": interleave,
        "noise_pct": noise_pct,
        "stop_existing": stop_existing,
        "host_label": label,
        "sim": sim,
        "python": python,
    }
    meta = {"ab_id": ab_id, "a": a, "b": b, "plan": plan.name, "nodes": ops.nodes}
    return await start_job("ab", MODULE, spec, meta)


def main(argv: list[str] | None = None) -> int:
    from tui.hostside import abjob

    async def run(job_dir: Path, made: list[DeploymentOps]) -> int:
        def make_ops(spec: Mapping[str, Any], infos: Mapping[str, ProfileInfo]) -> DeploymentOps:
            sim = bool(spec.get("sim"))
            sides = {i.name: plan_side(i.name, sim=sim) for i in infos.values()}
            python = spec.get("python") if isinstance(spec.get("python"), str) else None
            ops = DeploymentOps(sides, host_label=str(spec.get("host_label") or "deployments"), python=python)
            made.append(ops)
            return ops

        return await abjob.run(job_dir, make_ops)

    return job_main(MODULE, argv, run)


if __name__ == "__main__":
    raise SystemExit(main())
