"""A/B campaigns on the GPU host, from the laptop: start, follow, cancel, mirror.

The laptop reads the two profiles (TOML, presets, the demo's executable swap),
asks before anything running is stopped, and sends the resolved commands and the
plan to the host, where :mod:`tunedeck.hostside.abjob` drives the whole campaign. The
laptop only follows its events by byte offset: Ctrl-C, a closed dashboard or a
lost link detach and never cancel. When the campaign ends (or on attach to an
ended one) its report, results and journal entry are mirrored here, and the
comparison is recomputed from the mirrored sides with the same code. The follow, the
reading of the end and the cancel are every detached campaign's
(:class:`tunedeck.services.jobrun.JobRun`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeVar

from tunedeck.ab.journal import new_id
from tunedeck.ab.ops import ProfileInfo
from tunedeck.ab.plan import Plan
from tunedeck.ab.report import ABReport, report_from_dict, report_from_results
from tunedeck.hostops import logfollow
from tunedeck.hostops.hosts import Host
from tunedeck.hostside import jobfiles
from tunedeck.services import jobs
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
    from tunedeck.profiles.model import ServerProfile

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class ABSettings:
    """How an A/B measures (``tunedeck ab``'s ``--repeats``, ``--interleave``, ``--noise``), as its
    spec holds them (:func:`ab_spec`), on one host or over two deployments."""

    repeats: int = 1
    interleave: bool = False
    #: the noise threshold of a single run's difference (None: the comparison's default)
    noise_pct: float | None = None

    def to_spec(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def ab_spec(
    a: ProfileInfo,
    b: ProfileInfo,
    plan: Plan,
    settings: ABSettings,
    *,
    stop_existing: bool,
    host_label: str,
    **extra: Any,
) -> dict[str, Any]:
    """The spec of a new A/B (:mod:`tunedeck.hostside.abjob` reads it, wherever it runs); a fresh
    id. ``extra``: keys of the job that runs it (an A/B of deployments' own)."""
    return {
        "ab_id": new_id("ab"),
        "a": a.to_json(),
        "b": b.to_json(),
        "plan": plan.to_dict(),
        **settings.to_spec(),
        "stop_existing": stop_existing,
        "host_label": host_label,
        **extra,
    }


def read_sides(a: str, b: str, read: Callable[[str], T]) -> dict[str, T]:
    """``read`` of A's and of B's profile name, by side (``"A"``, ``"B"``); a ValueError names the
    side and the profile before its own error (which names the file and the key)."""
    out = {}
    for label, name in (("A", a), ("B", b)):
        try:
            out[label] = read(name)
        except Exception as e:  # profile errors name the file and the key
            raise ValueError(f"{label} ({name}): {e}") from e
    return out


def resolve_profile(name: str, *, demo: bool, sim: bool = False) -> tuple[ProfileInfo, "ServerProfile"]:
    """(what will run, the profile) for a profile name; errors name file and key. ``sim``: the
    simulator from the host-side runtime in place of the engine (``tunedeck-host sim ENGINE``,
    made runnable on the host by :func:`tunedeck.services.runtime.sim_argv`)."""
    from tunedeck.profiles.store import ProfileStore

    prof = ProfileStore().get(name)
    return profile_info(prof, demo=demo, sim=sim), prof


def profile_info(prof: "ServerProfile", *, demo: bool, sim: bool = False) -> ProfileInfo:
    """What will run for a profile (read from the store or made by a campaign); ValueError with
    the builder's errors."""
    from tunedeck.profiles.builder import build_command
    from tunedeck.profiles.deploy import sim_executable

    cmd = build_command(prof, demo=demo, executable=sim_executable(prof) if sim and not demo else None)
    errors = [w for w in getattr(cmd, "warnings", ()) if getattr(w, "severity", "") == "error"]
    if errors:
        raise ValueError("; ".join(str(e) for e in errors))
    argv = list(cmd.argv)
    if demo and argv[:3] == [sys.executable, "-m", "tunedeck"]:
        # the demo host's PATH has a ``tunedeck`` shim, so the server starts from any folder
        argv = ["tunedeck", *argv[3:]]
    served = prof.model
    for k, v in getattr(prof, "flags", ()) or ():
        if k in ("served-model-name", "served_model_name") and isinstance(v, str):
            served = v
    info = ProfileInfo(
        name=prof.name,
        engine=prof.engine,
        model=prof.model,
        argv=tuple(argv),
        env=dict(cmd.env_dict),
        port=int(prof.effective_port),
        served_model=served,
    )
    return info


async def preflighted(
    host: Host,
    label: str,
    prof: "ServerProfile",
    info: ProfileInfo,
    *,
    held: Sequence[str],
    demo: bool,
    sim: bool,
) -> tuple[ProfileInfo, str | None]:
    """(what will run, why it cannot or None) of a campaign's profile ``prof`` on ``host``, ``info``
    its command: its pre-flight as it will run (a refusal names it ``label``; ``held``: the findings
    a campaign that stops tunedeck's servers first ignores, :func:`held_by_runs`); once it passes,
    with ``sim`` (not the demo) ``info``'s command as the host-side runtime's simulator runs on
    ``host``. Stops nothing."""
    from tunedeck.services import checks, runtime

    report = await checks.preflight_for(host, prof, demo=demo, sim=sim)
    why = checks.refusal(label, report, ignore=held)
    if why is None and sim and not demo:
        argv = await runtime.sim_argv(host, info.argv, python=prof.python)
        info = dataclasses.replace(info, argv=tuple(argv))
    return info, why


class ABRun(JobRun):
    """One A/B campaign on a host, followed from here."""

    KIND = "ab"
    ID_KEY = "ab_id"
    NOUN = "A/B"

    def __init__(self, host: Host, job: jobs.Job, *, noise_pct: float | None = None) -> None:
        super().__init__(host, job)
        self.noise_pct = noise_pct
        self.report: ABReport | None = None

    # ------------------------------------------------------------------ start / attach
    @classmethod
    async def start(
        cls,
        host: Host,
        a: str,
        b: str,
        plan: Plan,
        settings: ABSettings = ABSettings(),
        *,
        demo: bool = False,
        sim: bool = False,
        confirm_stop: Callable[[str], Awaitable[bool]] | None = None,
        python: str | None = None,
        host_label: str | None = None,
    ) -> "ABRun":
        """Resolve A and B, refuse while another campaign runs, pre-flight both sides (as they
        will run: ``sim``, the simulator from the host-side runtime), ask before stopping a running
        server, then start the campaign on the host. Nothing is stopped before both pre-flights
        pass. Raises ``ValueError`` (profiles), :class:`jobs.JobError` (refused, pre-flight failed),
        :class:`runtime.RuntimeUnavailable` or :class:`HostError`."""
        where = host_label or host.target
        resolved = read_sides(a, b, lambda name: resolve_profile(name, demo=demo, sim=sim))
        infos = {label: info for label, (info, _prof) in resolved.items()}
        profiles = {label: prof for label, (_info, prof) in resolved.items()}
        py = campaign_python(python, profiles.values())
        await refuse_while_running(host)
        held = await held_by_runs(host)
        for label, prof in profiles.items():
            infos[label], why = await preflighted(
                host, f"{label} ({prof.name})", prof, infos[label], held=held, demo=demo, sim=sim
            )
            if why:
                raise jobs.JobError(f"{where}: not started, nothing stopped: {why}")
        stop_existing = await ask_to_stop_runs(host, where, confirm_stop)
        plan = await ship_workload(host, plan, py)  # the host-side runs read the plan's dataset there
        spec = ab_spec(infos["A"], infos["B"], plan, settings, stop_existing=stop_existing, host_label=where)
        ab_id = spec["ab_id"]
        job = await jobs.start(host, "ab", spec, python=py, meta={"ab_id": ab_id, "a": a, "b": b, "plan": plan.name})
        journal(
            {
                "kind": "ab",
                "id": ab_id,
                "status": "running",
                "host": where,
                "plan": plan.name,
                "a": {"profile": a},
                "b": {"profile": b},
                "job_id": job.job_id,
                "repeats": settings.repeats,
                "interleave": settings.interleave,
            }
        )
        return cls(host, job, noise_pct=settings.noise_pct)

    @classmethod
    async def attach(cls, host: Host, ref: str, *, noise_pct: float | None = None) -> "ABRun":
        """A campaign by job id (or prefix) or by its A/B id."""
        return cls(host, await cls.find_job(host, ref), noise_pct=noise_pct)

    # ------------------------------------------------------------------ the end
    async def finish(self, follower: jobs.JobFollower | None = None) -> ABReport | None:
        """Read the report, mirror the results and journal it here (idempotent). After a follow,
        the report and the results are read retried over a failing link (``follower.final_read``);
        what stays unreadable sets :attr:`lost`."""
        raw = await self.read_outcome(follower)
        d = self.json_object(raw)
        if d is not None:
            try:
                self.report = report_from_dict(d, noise_pct=self.noise_pct)
                journal({**d, "job_id": self.job.job_id})
            except (ValueError, KeyError, TypeError) as e:
                log.warning("A/B %s: unreadable report: %s", self.id, e)
        elif not raw.strip() and follower is not None:  # ended without its report (killed, died)
            self.report = await self._from_job_folder(follower)
            if self.report is not None:
                journal({**self.report.to_dict(), "job_id": self.job.job_id})
        return self.report

    async def _from_job_folder(self, follower: jobs.JobFollower) -> ABReport | None:
        """The report of a campaign that wrote none, rebuilt from its spec and the results mirrored
        from its folder (levels with at least one completed request); None when it left none. An
        A/B of deployments (run here) has its levels' results here and in each level's benchmark
        job on its head node, and names the deployments it left running
        (:func:`tunedeck.services.deployab.left_by`)."""
        from tunedeck.bench import store

        raw = await follower.final_read(lambda: logfollow.read_log(self.host, f"{self.job.dir}/{jobfiles.SPEC}"))
        if not raw:
            self.lost = self.lost or follower.lost
            return None
        spec = self.json_object(raw, jobfiles.SPEC)
        if spec is None:
            return None
        found = "{} level(s) read from the job folder"
        ids, left_running, unread = set(self.mirrored), [], []
        if (self.job.meta or {}).get("deployments"):
            from tunedeck.services.deployab import left_by

            left = await left_by(self.job, str(spec.get("ab_id")))
            ids.update(left.run_ids)
            left_running, unread = left.running, left.unread
            found = "{} level(s) read from its results here and on the head nodes"

        def read() -> list[tuple[dict[str, Any], str, Any]]:
            """Each level of this A/B with a completed request, its summary rebuilt from its
            samples where partial (megabytes a level: called in a thread)."""
            levels = []
            for rid in sorted(ids):
                try:
                    labels = store.load_run(rid).meta.get("ab")
                    if not isinstance(labels, dict) or labels.get("ab_id") != spec.get("ab_id"):
                        continue
                    summary = store.summary_for(rid)
                except (store.StoreError, OSError, ValueError) as e:
                    log.warning("A/B %s: level %s has no readable result here: %s", self.id, rid, e)
                    continue
                if summary.get("completed"):
                    levels.append((labels, rid, summary))
            return levels

        results = await asyncio.to_thread(read)
        if not results:
            if left_running:
                log.warning("A/B %s left no result; still running: %s", self.id, "; ".join(left_running))
            return None
        ex = self.exit or {}
        why = str(ex.get("error") or "the A/B job ended without its report")
        not_read = f"; not read: {'; '.join(unread)}" if unread else ""
        try:
            rep = report_from_results(
                spec,
                results,
                status="cancelled" if ex.get("rc") == 130 else "partial",
                error=f"{why}; {found.format(len(results))}{not_read}",
                noise_pct=self.noise_pct,
            )
        except (KeyError, TypeError, ValueError) as e:
            log.warning("A/B %s: its report could not be rebuilt from %s: %s", self.id, jobfiles.SPEC, e)
            return None
        rep.left_running.extend(left_running)
        return rep


__all__ = ["ABRun", "ABSettings", "ab_spec", "preflighted", "profile_info", "read_sides", "resolve_profile"]
