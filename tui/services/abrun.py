"""A/B campaigns on the GPU host, from the laptop: start, follow, cancel, mirror.

The laptop reads the two profiles (TOML, presets, the demo's executable swap),
asks before anything running is stopped, and sends the resolved commands and the
plan to the host, where :mod:`tui.hostside.abjob` drives the whole campaign. The
laptop only follows its events by byte offset: Ctrl-C, a closed dashboard or a
lost link detach and never cancel. When the campaign ends (or on attach to an
ended one) its report, results and journal entry are mirrored here, and the
comparison is recomputed from the mirrored sides with the same code.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Sequence

from tui.ab.journal import Journal, new_id
from tui.ab.plan import Plan
from tui.ab.runner import ABEvent, ABReport, ProfileInfo, report_from_dict, report_from_results
from tui.hostops import launcher, logfollow
from tui.hostops.hosts import Host, HostError
from tui.hostside import jobfiles
from tui.services import jobs
from tui.services.benchrun import ship_data_file

if TYPE_CHECKING:
    from tui.profiles.model import ServerProfile

log = logging.getLogger(__name__)

#: a cancel stops the server the campaign started and waits for its GPUs: give it time
CANCEL_GRACE = 180.0


def resolve_profile(name: str, *, demo: bool, sim: bool = False) -> tuple[ProfileInfo, "ServerProfile"]:
    """(what will run, the profile) for a profile name; errors name file and key. ``sim``: the
    simulator from the host-side runtime in place of the engine (``tunedeck-host sim ENGINE``,
    made runnable on the host by :func:`tui.services.runtime.sim_argv`)."""
    from tui.profiles.store import ProfileStore

    prof = ProfileStore().get(name)
    return profile_info(prof, demo=demo, sim=sim), prof


def profile_info(prof: "ServerProfile", *, demo: bool, sim: bool = False) -> ProfileInfo:
    """What will run for a profile (read from the store or made by a campaign); ValueError with
    the builder's errors."""
    from tui.profiles.builder import build_command
    from tui.profiles.deploy import sim_executable

    cmd = build_command(prof, demo=demo, executable=sim_executable(prof) if sim and not demo else None)
    errors = [w for w in getattr(cmd, "warnings", ()) if getattr(w, "severity", "") == "error"]
    if errors:
        raise ValueError("; ".join(str(e) for e in errors))
    argv = list(cmd.argv)
    if demo and argv[:3] == [sys.executable, "-m", "tui"]:
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


class ABRun:
    """One campaign on a host, followed from here."""

    def __init__(self, host: Host, job: jobs.Job, *, noise_pct: float | None = None) -> None:
        self.host = host
        self.job = job
        self.noise_pct = noise_pct
        self.report: ABReport | None = None
        self.exit: dict[str, Any] | None = None
        self.mirrored: list[str] = []
        #: the A/B's report or results could not be read from the host (exit 6 of ``tunedeck ab``)
        self.lost = False
        #: callable(Exception, attempt): the link to the host failed (the A/B goes on there)
        self.on_link_error: Any = None
        #: callable(): the host answers again after :attr:`on_link_error`
        self.on_link_ok: Any = None

    @property
    def id(self) -> str:
        return self.job.job_id

    # ------------------------------------------------------------------ start / attach
    @classmethod
    async def start(
        cls,
        host: Host,
        a: str,
        b: str,
        plan: Plan,
        *,
        demo: bool = False,
        sim: bool = False,
        repeats: int = 1,
        interleave: bool = False,
        noise_pct: float | None = None,
        confirm_stop: Callable[[str], Awaitable[bool]] | None = None,
        python: str | None = None,
        host_label: str | None = None,
    ) -> "ABRun":
        """Resolve A and B, refuse while another campaign runs, pre-flight both sides (as they
        will run: ``sim``, the simulator from the host-side runtime), ask before stopping a running
        server, then start the campaign on the host. Nothing is stopped before both pre-flights
        pass. Raises ``ValueError`` (profiles), :class:`jobs.JobError` (refused, pre-flight failed),
        :class:`runtime.RuntimeUnavailable` or :class:`HostError`."""
        from tui.services import checks, runtime

        infos = {}
        profiles = {}
        py = python
        for label, name in (("A", a), ("B", b)):
            try:
                info, prof = resolve_profile(name, demo=demo, sim=sim)
            except Exception as e:  # profile errors name the file and the key
                raise ValueError(f"{label} ({name}): {e}") from e
            infos[label], profiles[label] = info, prof
            py = py or (prof.python if prof.python != "python3" else None)
        await refuse_while_running(host)
        # the A/B stops tunedeck's running servers first: the port one of them holds is not a refusal
        held = ("port.in-use",) if any(h.alive for h in await launcher.list_host_runs(host)) else ()
        for label, prof in profiles.items():
            report = await checks.preflight_for(host, prof, demo=demo, sim=sim)
            why = checks.refusal(f"{label} ({prof.name})", report, ignore=held)
            if why:
                raise jobs.JobError(f"{host_label or host.target}: not started, nothing stopped: {why}")
        if sim and not demo:
            for label, prof in profiles.items():
                argv = await runtime.sim_argv(host, infos[label].argv, python=prof.python)
                infos[label] = dataclasses.replace(infos[label], argv=tuple(argv))
        running = [h for h in await launcher.list_host_runs(host) if h.alive]
        stop_existing = await ask_to_stop(
            [f"run {h.run_id}" + (f" ({h.meta.get('profile')})" if h.meta.get("profile") else "") for h in running],
            f" on {host_label or host.target}",
            confirm_stop,
            refused=f"{host.target}: ",
        )
        if plan.workload.path:  # the host-side runs read the plan's dataset there, placed once per content
            plan = dataclasses.replace(
                plan,
                workload=dataclasses.replace(plan.workload, path=await ship_data_file(host, plan.workload.path, py)),
            )
        ab_id = new_id("ab")
        spec = {
            "ab_id": ab_id,
            "a": infos["A"].to_json(),
            "b": infos["B"].to_json(),
            "plan": plan.to_dict(),
            "repeats": repeats,
            "interleave": interleave,
            "noise_pct": noise_pct,
            "stop_existing": stop_existing,
            "host_label": host_label or host.target,
        }
        job = await jobs.start(host, "ab", spec, python=py, meta={"ab_id": ab_id, "a": a, "b": b, "plan": plan.name})
        run = cls(host, job, noise_pct=noise_pct)
        _journal(
            {
                "kind": "ab",
                "id": ab_id,
                "status": "running",
                "host": host_label or host.target,
                "plan": plan.name,
                "a": {"profile": a},
                "b": {"profile": b},
                "job_id": job.job_id,
                "repeats": repeats,
                "interleave": interleave,
            }
        )
        return run

    @classmethod
    async def attach(cls, host: Host, ref: str, *, noise_pct: float | None = None) -> "ABRun":
        """A campaign by job id (or prefix) or by its A/B id."""
        try:
            job = await jobs.find(host, "ab", ref)
        except jobs.JobError:
            found = [j for j in await jobs.list_jobs(host, "ab") if (j.meta or {}).get("ab_id") == ref]
            if not found:
                raise
            job = found[-1]
        return cls(host, job, noise_pct=noise_pct)

    # ------------------------------------------------------------------ follow
    async def events(self) -> AsyncIterator[ABEvent]:
        follower = jobs.JobFollower(self.host, self.job)
        follower.on_link_error = self.on_link_error
        follower.on_link_ok = self.on_link_ok
        async for ev in follower.events():
            if ev.get("type") == "ab":
                yield ABEvent.from_json(ev)
        self.exit = follower.exit
        await self.finish(follower)

    async def finish(self, follower: jobs.JobFollower | None = None) -> ABReport | None:
        """Read the report, mirror the results and journal it here (idempotent). After a follow,
        the report and the results are read retried over a failing link (``follower.final_read``);
        what stays unreadable sets :attr:`lost`."""
        report = f"{self.job.dir}/{jobfiles.REPORT}"
        if follower is not None:
            raw = await follower.final_read(lambda: logfollow.read_log(self.host, report)) or b""
            self.mirrored = await follower.final_read(lambda: jobs.mirror_results(self.host, self.job)) or []
            self.lost = follower.lost
        else:
            try:
                raw = await logfollow.read_log(self.host, report)
            except HostError as e:
                log.warning("A/B %s: report not read: %s", self.id, e)
                raw = b""
            try:
                self.mirrored = await jobs.mirror_results(self.host, self.job)
            except HostError as e:
                log.warning("A/B %s: results not mirrored: %s", self.id, e)
        if raw.strip():
            try:
                d = json.loads(raw)
                self.report = report_from_dict(d, noise_pct=self.noise_pct)
                _journal({**d, "job_id": self.job.job_id})
            except (ValueError, KeyError, TypeError) as e:
                log.warning("A/B %s: unreadable report: %s", self.id, e)
        elif follower is not None:  # ended without its report (killed, died): what its folder holds
            self.report = await self._from_job_folder(follower)
            if self.report is not None:
                _journal({**self.report.to_dict(), "job_id": self.job.job_id})
        return self.report

    async def _from_job_folder(self, follower: jobs.JobFollower) -> ABReport | None:
        """The report of a campaign that wrote none, rebuilt from its spec and the results mirrored
        from its folder (levels with at least one completed request); None when it left none. An
        A/B of deployments (run here) has its levels' results here and in each level's benchmark
        job on its head node, and names the deployments it left running
        (:func:`tui.services.deployab.left_by`)."""
        from tui.bench import store

        raw = await follower.final_read(lambda: logfollow.read_log(self.host, f"{self.job.dir}/{jobfiles.SPEC}"))
        if not raw:
            self.lost = self.lost or follower.lost
            return None
        try:
            spec = json.loads(raw)
        except ValueError as e:
            log.warning("A/B %s: unreadable %s: %s", self.id, jobfiles.SPEC, e)
            return None
        found = "{} level(s) read from the job folder"
        ids, left_running, unread = set(self.mirrored), [], []
        if (self.job.meta or {}).get("deployments"):
            from tui.services.deployab import left_by

            left = await left_by(self.job, str(spec.get("ab_id")))
            ids.update(left.run_ids)
            left_running, unread = left.running, left.unread
            found = "{} level(s) read from its results here and on the head nodes"
        results = []
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
                results.append((labels, rid, summary))
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

    # ------------------------------------------------------------------ cancel
    async def cancel(self) -> str:
        """Cancel on the host: the server it started is stopped, every result is kept."""
        return await jobs.stop(self.host, self.job, grace=CANCEL_GRACE)


async def ask_to_stop(
    running: Sequence[str],
    where: str,
    confirm_stop: Callable[[str], Awaitable[bool]] | None,
    *,
    refused: str = "",
) -> bool:
    """Whether the campaign stops what runs (``running``: a description each; ``where``: e.g.
    " on gpu-a"); asks ``confirm_stop`` first, :class:`jobs.JobError` when the answer is no."""
    if not running:
        return False
    desc = ", ".join(running)
    if confirm_stop is None or not await confirm_stop(f"{desc} is running{where}; stop it for the A/B?"):
        raise jobs.JobError(f"{refused}not started: {desc} is running (stop it, or confirm)")
    return True


async def refuse_while_running(host: Host) -> None:
    """One campaign per host at a time, an A/B or a tuning campaign: :class:`jobs.JobError`
    naming the one that runs, on the host or, for a remote host, run from this machine over a
    deployment that has the host among its nodes (:mod:`tui.services.deployops`)."""
    from tui.hostops.localhost import LocalHost
    from tui.hostops.target import parse_target
    from tui.util.safety import UnsafeInput

    where = {"local": "", "demo": " --demo"}.get(host.target, f" --host {host.target}")
    for kind, what in (("ab", "A/B"), ("tune", "tuning campaign")):
        for j in await jobs.list_jobs(host, kind):
            if j.alive:
                raise jobs.JobError(
                    f"{host.target}: {what} {j.job_id} is running there; follow it with `tunedeck {kind} --attach "
                    f"{j.job_id}{where}` or cancel it with `tunedeck {kind} --cancel {j.job_id}{where}` first"
                )
    if isinstance(host, LocalHost):
        return

    def same(node: object) -> str:
        try:
            return str(parse_target(str(node)))
        except UnsafeInput:
            return str(node)

    me = same(host.target)
    for kind, what in (("ab", "A/B"), ("tune", "tuning campaign")):
        for j in await jobs.list_jobs(LocalHost(), kind):
            nodes = (j.meta or {}).get("nodes")
            if j.alive and isinstance(nodes, list) and me in {same(n) for n in nodes}:
                raise jobs.JobError(
                    f"{host.target}: {what} {j.job_id} of deployments on {', '.join(map(str, nodes))} is running "
                    f"from this machine; follow it with `tunedeck {kind} --attach {j.job_id}` or cancel it with "
                    f"`tunedeck {kind} --cancel {j.job_id}` first"
                )


def _journal(record: dict[str, Any]) -> None:
    try:
        Journal().append(record)
    except OSError as e:
        log.error("journal not written: %s", e)
