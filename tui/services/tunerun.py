"""Tuning campaigns on the GPU host, from the laptop: plan, start, follow (restarting a killed
campaign so it resumes), cancel, mirror — the follow, the end and the cancel of every detached
campaign (:class:`tunedeck.services.jobrun.JobRun`) with :mod:`tunedeck.hostside.tunejob` on the host.

The laptop reads the base profile and builds the candidates (:mod:`tunedeck.profiles.vary`),
estimates the campaign's time (:func:`estimate`, from the journal's recorded start-ups and the
plan's levels, :mod:`tunedeck.ab.tuneeta`),
pre-flights every candidate before anything is stopped (an impossible one is skipped, its
reason a finding of the campaign), asks before stopping what runs, and starts the job.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, Sequence

from tunedeck.ab.journal import Journal, new_id
from tunedeck.ab.ops import ProfileInfo
from tunedeck.ab.tune import Workload
from tunedeck.ab.tuneeta import Pace, prior
from tunedeck.hostops import launcher, logfollow
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostside import jobfiles
from tunedeck.profiles.deploy import profile_gpus
from tunedeck.services import jobs, runtime
from tunedeck.services.abrun import preflighted, profile_info
from tunedeck.services.jobrun import (
    JobRun,
    ask_to_stop_runs,
    campaign_python,
    held_by_runs,
    journal,
    refuse_while_running,
    ship_workload,
)

if TYPE_CHECKING:
    from tunedeck.profiles.vary import Candidate

log = logging.getLogger(__name__)

#: how often one follow restarts a campaign whose process was killed
MAX_RESTARTS = 3
#: without a recorded start-up for a candidate's profile: an engine's, the simulator's (s)
DEFAULT_STARTUP_S = 600.0
DEFAULT_SIM_STARTUP_S = 20.0


@dataclass(frozen=True)
class Estimate:
    """How long one round over the candidates should take, and from what."""

    total_s: float
    candidates: int
    startup_s: float
    level_s: float
    max_steps: int
    recorded: int  # candidates whose start-up the journal has
    #: a candidate's parts (the start-up their mean), the campaign's ETA before it measured them
    pace: Pace

    @property
    def text(self) -> str:
        from tunedeck.fmt import eta

        src = (
            f"start-up from the journal for {self.recorded} of {self.candidates}"
            if self.recorded
            else "no start-up recorded"
        )
        return (
            f"{eta(self.total_s)} ({self.candidates} candidates x (start-up ~{self.startup_s:.0f} s + up to "
            f"{self.max_steps} levels x ~{self.level_s:.0f} s + stop ~{self.pace.stop_s:.0f} s); {src})"
        )


@dataclass(frozen=True)
class CampaignSettings:
    """How a campaign measures and how far it goes (``tunedeck tune``'s options), as its spec
    holds them (:func:`campaign_spec`)."""

    repeats_max: int = 2
    noise_pct: float | None = None
    budget_s: float | None = None
    estimate_s: float | None = None
    #: the estimate's parts (:mod:`tunedeck.ab.tuneeta`), for a follower's ETA
    pace: Pace | None = None
    max_concurrency: int = 1024
    max_steps: int = 8
    start: int = 1

    def to_spec(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return d | {"pace": self.pace.to_json() if self.pace is not None else None}


def estimate(
    names: Sequence[str],
    base: str,
    *,
    max_steps: int,
    sim: bool,
    journal: Journal | None = None,
    workload: Workload | None = None,
    slo: Sequence[str] = (),
    start: int = 1,
) -> Estimate:
    """One round's time: each candidate's recorded start-up (the journal's ready launches of its
    name, else of the base profile, else a default), plus up to ``max_steps`` levels, each as the
    plan makes it (``workload``'s requests at the ``slo``'s bounds: :func:`tunedeck.ab.tuneeta.prior`;
    a default without them), and a stop."""
    startups: dict[str, list[float]] = {}
    try:
        for e in (journal or Journal()).entries("launch"):
            s = e.get("startup_s")
            if isinstance(s, (int, float)) and e.get("status") == "ready":
                startups.setdefault(str(e.get("profile")), []).append(float(s))
    except OSError as e:
        log.warning("journal not read for the estimate: %s", e)
    default = DEFAULT_SIM_STARTUP_S if sim else DEFAULT_STARTUP_S
    recorded, ups = 0, []
    for n in names:
        got = startups.get(n) or startups.get(base)
        if got:
            recorded += 1
        ups.append(sum(got) / len(got) if got else default)
    up = sum(ups) / len(ups) if ups else default
    pace = prior(workload, slo, startup_s=up, max_steps=max_steps, start=start, sim=sim)
    total = sum(ups) + len(ups) * (pace.candidate_s - pace.startup_s)
    return Estimate(total, len(names), up, pace.level_s, max_steps, recorded, pace)


def parse_budget(text: str) -> float:
    """``2h``, ``90m``, ``45s``, ``1h30m`` or plain seconds; ValueError with one line."""
    import re

    t = text.strip().lower()
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", t)
    if not t or m is None or not any(m.groups()):
        raise ValueError(f"--budget {text!r}: expected a duration such as 2h, 90m, 1h30m or 600s")
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    total = h * 3600 + mi * 60 + s
    if total <= 0:
        raise ValueError(f"--budget {text!r}: must be more than 0")
    return total


async def check_candidates(
    host: Host, candidates: Sequence["Candidate"], *, demo: bool = False, sim: bool = False
) -> list[tuple["Candidate", ProfileInfo | None, str | None]]:
    """(candidate, what will run, why it is skipped or None) for each candidate: its command
    built and its pre-flight run on ``host`` (a port held by a server the campaign stops first is
    no reason). Stops nothing. The campaign's start and the Tune screen's pre-flight use it."""
    held = await held_by_runs(host)
    out: list[tuple[Candidate, ProfileInfo | None, str | None]] = []
    for c in candidates:
        skip, info = None, None
        try:
            info = profile_info(c.profile, demo=demo, sim=sim)
        except ValueError as e:
            skip = f"the command cannot be built: {e}"
        if info is not None:
            info, why = await preflighted(host, c.name, c.profile, info, held=held, demo=demo, sim=sim)
            if why:
                skip = why.split(": ", 1)[1] if why.startswith(f"{c.name}: ") else why
        out.append((c, info, skip))
    return out


class TuneRun(JobRun):
    """One tuning campaign on a host, followed from here; a campaign whose process was killed is
    started again in its folder (:meth:`_resume`, :meth:`_restart`), where it resumes from its state."""

    KIND = "tune"
    ID_KEY = "campaign"
    NOUN = "campaign"

    def __init__(self, host: Host, job: jobs.Job, *, python: str | None = None) -> None:
        super().__init__(host, job)
        self.python = python
        self.report: dict[str, Any] | None = None
        self.restarts = 0

    @classmethod
    async def start(
        cls,
        host: Host,
        base: str,
        candidates: Sequence["Candidate"],
        slo: Sequence[str],
        workload: Workload,
        settings: CampaignSettings,
        *,
        demo: bool = False,
        sim: bool = False,
        confirm_stop: Callable[[str], Awaitable[bool]] | None = None,
        python: str | None = None,
        host_label: str | None = None,
        on_skip: Callable[[str, str], None] | None = None,
    ) -> "TuneRun":
        """Refuse while another campaign runs, pre-flight every candidate (an impossible one is
        skipped with its reason: ``on_skip(name, why)``), ask before stopping a running server,
        then start the campaign on the host. Nothing is stopped before the pre-flights.
        Raises :class:`jobs.JobError` (refused, every candidate impossible),
        :class:`~tunedeck.services.runtime.RuntimeUnavailable` or :class:`HostError`."""
        where = host_label or host.target
        await refuse_while_running(host)
        py = campaign_python(python, (c.profile for c in candidates))
        entries = spec_entries(await check_candidates(host, candidates, demo=demo, sim=sim), where, on_skip)
        stop_existing = await ask_to_stop_runs(host, where, confirm_stop)
        # the host-side levels read the dataset there
        workload = dataclasses.replace(workload, plan=await ship_workload(host, workload.plan, py))
        spec = campaign_spec(base, entries, slo, workload, settings, stop_existing=stop_existing, host_label=where)
        job = await jobs.start(host, "tune", spec, python=py, meta={"campaign": spec["campaign"], "base": base})
        journal_start(spec, job.job_id)
        return cls(host, job, python=py)

    @classmethod
    async def attach(cls, host: Host, ref: str) -> "TuneRun":
        """A campaign by job id (or prefix) or by its campaign id."""
        job = await cls.find_job(host, ref)
        return cls(host, job, python=str((job.meta or {}).get("python") or "") or None)

    async def spec(self) -> dict[str, Any]:
        """The campaign's spec as the job holds it (its candidates, SLO, estimate), for a
        follower that did not start it; HostError when unreadable."""
        raw = await logfollow.read_log(self.host, f"{self.job.dir}/{jobfiles.SPEC}")
        try:
            d = json.loads(raw)
        except ValueError as e:
            raise HostError("error", f"{self.job.dir}/{jobfiles.SPEC} unreadable: {e}") from None
        if not isinstance(d, dict):
            raise HostError("error", f"{self.job.dir}/{jobfiles.SPEC}: not a JSON object")
        return d

    # ------------------------------------------------------------------ follow
    async def _resume(self, follower: jobs.JobFollower) -> str | None:
        """A campaign whose process ended without its report (killed) is started again in its
        folder, where it resumes from its state (at most :data:`MAX_RESTARTS` times a follow)."""
        ex = follower.exit or {}
        if not ex.get("synthetic") or self.lost or self.cancelled or self.restarts >= MAX_RESTARTS:
            return None
        if await follower.final_read(self._has_report):
            return None
        self.restarts += 1
        return f"the campaign's process ended without its report ({ex.get('error')}); restarting it to resume"

    async def _restart(self, follower: jobs.JobFollower) -> jobs.Job | None:
        """Start the killed campaign again (one run here over deployments with its own command,
        :mod:`tunedeck.services.deploytune`; any other the host-side runtime's job), over a link that
        may fail meanwhile: a failed try is told as a lost link and retried, as the follower's
        own reads are (None: given up). The host starts it only while the folder still holds the
        killed process (:func:`jobs.restart`): a process started there since, by another follower
        or by a try whose answer was lost, is the one followed, never a second campaign in the
        same folder (it would find the host's campaign lock held, and its exit event would end
        the follow of the first)."""
        killed = self.job

        async def once() -> jobs.Job:
            if (killed.meta or {}).get("deployments"):
                from tunedeck.services.deployops import job_argv
                from tunedeck.services.deploytune import MODULE

                return await jobs.restart(self.host, killed, argv=job_argv(MODULE, killed.dir))
            return await jobs.restart(self.host, killed, python=self.python)

        # a JobError or RuntimeUnavailable is the host's refusal, not the link's: raised at once
        job: jobs.Job | None = await follower.final_read(once, permanent=(jobs.JobError, runtime.RuntimeUnavailable))
        return job

    async def _has_report(self) -> bool:
        r = await self.host.run(["test", "-s", f"{self.job.dir}/{jobfiles.REPORT}"], timeout=15)
        if r.lost or r.timed_out:
            raise HostError("connection-lost" if r.lost else "timeout", f"checking {self.job.dir} failed")
        return r.ok

    async def finish(self, follower: jobs.JobFollower | None = None) -> dict[str, Any] | None:
        """Read the report, mirror the results and journal the campaign here (idempotent). After
        a follow, a campaign that ended without its report is rebuilt from its job folder
        (:meth:`_from_job_folder`: partial, or cancelled)."""
        raw = await self.read_outcome(follower)
        d: dict[str, Any] | None = None
        if raw.strip():
            d = self.json_object(raw)
        elif follower is not None and not self.lost:  # ended without its report: what its folder holds
            d = await self._from_job_folder(follower)
        if d is not None:
            self.report = d
            journal(journal_record(d, self.job.job_id))
            _journal_launches(d)
        return self.report

    async def _from_job_folder(self, follower: jobs.JobFollower) -> dict[str, Any] | None:
        """The result of a campaign that wrote no report (its process killed more often than
        :data:`MAX_RESTARTS` restarts, or ended by its own error), built from the spec and the
        ``state.json`` in its job folder (:func:`tunedeck.ab.tuneresult.partial_report`): status
        ``partial`` (``cancelled`` after a cancel). A server of the campaign still running there
        is named in ``left_running``. None when the folder holds no finished candidate."""
        from tunedeck.ab.tuneresult import partial_report
        from tunedeck.hostside.tunejob import STATE

        got: dict[str, Any] = {}
        for name in (jobfiles.SPEC, STATE):
            path = f"{self.job.dir}/{name}"
            raw = await follower.final_read(lambda p=path: logfollow.read_log(self.host, p))
            if not raw:
                self.lost = self.lost or follower.lost
                if not follower.lost:
                    log.warning("campaign %s: %s is empty or missing: no result to read", self.id, path)
                return None
            try:
                got[name] = json.loads(raw)
            except ValueError as e:
                log.warning("campaign %s: unreadable %s: %s", self.id, path, e)
                return None
        spec, state = got[jobfiles.SPEC], got[STATE]
        ex = self.exit or {}
        why = str(ex.get("error") or "the campaign's job ended without its report")
        if ex.get("synthetic") and self.restarts >= MAX_RESTARTS:
            why = (
                f"the campaign's process ended without its report {self.restarts + 1} times (restarted "
                f"{self.restarts} times, the most one follow does; `tunedeck tune --attach {self.id}` resumes "
                f"it): {why}"
            )
        try:
            live = await self._left_running(spec, state, follower)
            return partial_report(
                spec,
                state,
                why=why,
                status="cancelled" if self.cancelled or ex.get("rc") == 130 else "partial",
                left_running=live,
            )
        except (KeyError, TypeError, ValueError) as e:
            log.warning("campaign %s: its result could not be built from %s: %s", self.id, STATE, e)
            return None

    async def _left_running(
        self, spec: Mapping[str, Any], state: Mapping[str, Any], follower: jobs.JobFollower
    ) -> list[str]:
        """The campaign's servers still running on the host (the one its last process measured,
        or any launched from one of its candidates), each with how to stop it."""
        live = state.get("live")
        run_id = live.get("run_id") if isinstance(live, Mapping) else None
        names = {str(c.get("name")) for c in spec.get("candidates") or () if isinstance(c, Mapping)}
        runs = await follower.final_read(lambda: launcher.list_host_runs(self.host)) or []
        return [
            f"{h.meta.get('profile') or h.run_id} (run {h.run_id}): left by the campaign's process; "
            f"`tunedeck stop {h.run_id}` stops it"
            for h in runs
            if h.alive and (h.run_id == run_id or h.meta.get("profile") in names)
        ]


def spec_entry(c: "Candidate", info: ProfileInfo | None, skip: str | None) -> dict[str, Any]:
    """A candidate as the campaign's spec lists it (``tp``: the GPUs it runs on, which its tok/s
    per GPU divides by: :func:`tunedeck.profiles.deploy.profile_gpus`)."""
    return {
        "name": c.name,
        "changes": dict(c.changes),
        "info": info.to_json() if info is not None and skip is None else None,
        "tp": profile_gpus(c.profile),
        "skip": skip,
    }


def spec_entries(
    checked: Iterable[tuple["Candidate", ProfileInfo | None, str | None]],
    where: str,
    on_skip: Callable[[str, str], None] | None = None,
) -> list[dict[str, Any]]:
    """The spec's entries of the checked candidates ((candidate, what will run, why it is skipped
    or None), :func:`check_candidates`), each skipped one told to ``on_skip(name, why)``;
    :class:`jobs.JobError` when every one is skipped (``where``: the campaign's host)."""
    entries = []
    for c, info, skip in checked:
        if skip is not None and on_skip is not None:
            on_skip(c.name, skip)
        entries.append(spec_entry(c, info, skip))
    if all(e["skip"] for e in entries):
        raise jobs.JobError(f"{where}: not started, nothing stopped: every candidate failed pre-flight")
    return entries


def with_data_path(workload: Workload, path: str) -> Workload:
    """``workload`` reading its dataset file at ``path`` (where it was placed for the benchmarks)."""
    plan = workload.plan
    return dataclasses.replace(
        workload, plan=dataclasses.replace(plan, workload=dataclasses.replace(plan.workload, path=path))
    )


def campaign_spec(
    base: str,
    entries: Sequence[Mapping[str, Any]],
    slo: Sequence[str],
    workload: Workload,
    settings: CampaignSettings,
    *,
    stop_existing: bool,
    host_label: str,
    **extra: Any,
) -> dict[str, Any]:
    """The spec of a new campaign (:mod:`tunedeck.hostside.tunejob` reads it, wherever it runs); a
    fresh campaign id. ``extra``: keys of the job that runs it (a campaign of deployments' own)."""
    return {
        "campaign": new_id("tune"),
        "base": base,
        "candidates": [dict(e) for e in entries],
        "slo": list(slo),
        "workload": workload.to_dict(),
        **settings.to_spec(),
        "stop_existing": stop_existing,
        "host_label": host_label,
        **extra,
    }


def journal_start(spec: Mapping[str, Any], job_id: str) -> None:
    """The journal's record of a campaign that starts (its end replaces it: :func:`journal_record`)."""
    journal(
        {
            "kind": "tune",
            "id": spec["campaign"],
            "status": "running",
            "host": spec["host_label"],
            "base": spec["base"],
            "slo": list(spec["slo"]),
            "job_id": job_id,
            "candidates": [{"name": e["name"], "changes": e["changes"]} for e in spec["candidates"]],
        }
    )


def journal_record(rep: Mapping[str, Any], job_id: str) -> dict[str, Any]:
    """The journal's record of a campaign: its outcome and each candidate's figures."""
    keys = ("name", "changes", "state", "rank", "capacity", "single_user_tok_s", "tok_s_per_gpu", "startup_s", "pareto")
    return {
        "kind": "tune",
        "id": rep.get("campaign"),
        "status": rep.get("status"),
        "error": rep.get("error"),
        "host": rep.get("host"),
        "base": rep.get("base"),
        "slo": rep.get("slo"),
        "winner": rep.get("winner"),
        "closest": rep.get("closest"),
        "job_id": job_id,
        "candidates": [{k: c.get(k) for k in keys} for c in rep.get("candidates") or []],
    }


def _journal_launches(rep: Mapping[str, Any]) -> None:
    """The campaign's launches, so that the next campaign's estimate has their start-up times."""
    j = Journal()
    for c in rep.get("candidates") or []:
        for la in c.get("launches") or []:
            if la.get("launch_run_id") and "ready" in la:
                try:
                    j.record_launch(
                        str(la["launch_run_id"]),
                        profile=str(c.get("name")),
                        host=str(rep.get("host") or ""),
                        ready=bool(la.get("ready")),
                        startup_s=la.get("startup_s"),
                        server_log=la.get("server_log"),
                        timeline=la.get("timeline") or (),
                        diagnosis=la.get("diagnosis"),
                        ab_id=str(rep.get("campaign") or ""),
                        side=str(c.get("name")),
                    )
                except OSError as e:
                    log.error("journal not written: %s", e)
                    return


__all__ = [
    "CampaignSettings",
    "Estimate",
    "TuneRun",
    "campaign_spec",
    "check_candidates",
    "estimate",
    "journal_record",
    "journal_start",
    "parse_budget",
    "spec_entry",
    "with_data_path",
]
