"""A campaign that runs detached on the GPU host, seen from the laptop: what an A/B
(:mod:`tunedeck.services.abrun`) and a tuning campaign (:mod:`tunedeck.services.tunerun`) share.

Before the start: one campaign per host (:func:`refuse_while_running`), the servers that run
there stopped only after a yes (:func:`ask_to_stop_runs`), the Python its job runs with
(:func:`campaign_python`), the plan's dataset placed on the host (:func:`ship_workload`). After
it, :class:`JobRun`: found again by its job id or its campaign's id, its events followed by byte
offset (a lost link is told through ``on_link_error`` / ``on_link_ok`` and never cuts the
campaign), its report read and its results mirrored here, retried over a failing link, and a
cancel that stops the server it started.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, ClassVar, Iterable, Sequence

from tunedeck.ab.events import ABEvent
from tunedeck.ab.journal import Journal
from tunedeck.ab.plan import Plan
from tunedeck.hostops import launcher, logfollow
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostside import jobfiles
from tunedeck.hostside.jobfiles import ExitRecord
from tunedeck.services import jobs
from tunedeck.services.benchrun import ship_data_file

if TYPE_CHECKING:
    from tunedeck.profiles.model import ServerProfile

log = logging.getLogger(__name__)

#: a cancel stops the server the campaign started and waits for its GPUs: give it time
CANCEL_GRACE = 180.0


class JobRun:
    """One campaign on a host, followed from here. A subclass names its job :attr:`KIND`, the
    job's meta key of the campaign's own id (:attr:`ID_KEY`) and what it is (:attr:`NOUN`)."""

    #: the host-side job kind (``ab``, ``tune``)
    KIND: ClassVar[str] = ""
    #: the job meta key holding the campaign's own id (``ab_id``, ``campaign``)
    ID_KEY: ClassVar[str] = ""
    #: what it is, in log lines (``A/B``, ``campaign``)
    NOUN: ClassVar[str] = ""

    def __init__(self, host: Host, job: jobs.Job) -> None:
        self.host = host
        self.job = job
        self.exit: ExitRecord | None = None
        self.mirrored: list[str] = []
        #: the report or the results could not be read from the host (exit 6 of the command)
        self.lost = False
        #: set by a cancel
        self.cancelled = False
        #: callable(Exception, attempt): the link to the host failed (the campaign goes on there)
        self.on_link_error: Any = None
        #: callable(): the host answers again after :attr:`on_link_error`
        self.on_link_ok: Any = None

    @property
    def id(self) -> str:
        return self.job.job_id

    # ------------------------------------------------------------------ find
    @classmethod
    async def find_job(cls, host: Host, ref: str) -> jobs.Job:
        """The job by its id (or a prefix of it) or by its campaign's id; :class:`jobs.JobError`
        names what is there instead."""
        try:
            return await jobs.find(host, cls.KIND, ref)
        except jobs.JobError:
            found = [j for j in await jobs.list_jobs(host, cls.KIND) if (j.meta or {}).get(cls.ID_KEY) == ref]
            if not found:
                raise
            return found[-1]

    @classmethod
    async def running_job(cls, host: Host) -> jobs.Job | None:
        """The newest job of this kind still running on ``host`` (None: none runs)."""
        running = [j for j in await jobs.list_jobs(host, cls.KIND) if j.alive]
        return running[-1] if running else None

    # ------------------------------------------------------------------ follow
    async def events(self) -> AsyncIterator[ABEvent]:
        """The campaign's events to its end, then :meth:`finish`. After each follower ends,
        :meth:`_resume` may say why the job starts again (an event carrying the campaign's
        progress so far, then :meth:`_restart`; None: the follow is over); the next follower goes
        on at the same offset (nothing read twice). A restart whose link did not come back in
        time ends the follow with :attr:`lost` set (``--attach`` restarts it)."""
        offset = 0
        last = ABEvent("info", "")  # the campaign's progress (step of steps) so far
        while True:
            follower = jobs.JobFollower(self.host, self.job, offset)
            follower.on_link_error = self.on_link_error
            follower.on_link_ok = self.on_link_ok
            async for ev in follower.events():
                if ev.get("type") == "ab":
                    last = ABEvent.from_json(ev)
                    yield last
            offset = follower.offset
            self.exit = follower.exit
            self.lost = follower.lost
            told = await self._resume(follower)
            if told is None:
                break
            yield ABEvent("info", told, step=last.step, steps=last.steps)
            job = await self._restart(follower)
            if job is None:  # the link did not come back in time
                self.lost = True
                return
            self.job = job
        await self.finish(follower)

    async def _resume(self, follower: jobs.JobFollower) -> str | None:
        """Why the ended job starts again, or None: the follow is over (the default)."""
        return None

    async def _restart(self, follower: jobs.JobFollower) -> jobs.Job | None:
        """The job started again in its folder (after :meth:`_resume` said why), over
        ``follower``'s link; None: the link did not come back in time."""
        raise NotImplementedError

    async def finish(self, follower: jobs.JobFollower | None = None) -> Any:
        """Read the report, mirror the results and journal it here (idempotent)."""
        raise NotImplementedError

    async def read_outcome(self, follower: jobs.JobFollower | None) -> bytes:
        """The report's bytes (empty: none) with the results mirrored here (:attr:`mirrored`). After a
        follow both are read retried over a failing link (``follower.final_read``); what stays
        unreadable sets :attr:`lost`. Without one, a failure is logged and the rest still read."""
        path = f"{self.job.dir}/{jobfiles.REPORT}"
        if follower is not None:
            raw = await follower.final_read(lambda: logfollow.read_log(self.host, path)) or b""
            self.mirrored = await follower.final_read(lambda: jobs.mirror_results(self.host, self.job)) or []
            self.lost = follower.lost
            return bytes(raw)
        try:
            raw = await logfollow.read_log(self.host, path)
        except HostError as e:
            log.warning("%s %s: report not read: %s", self.NOUN, self.id, e)
            raw = b""
        try:
            self.mirrored = await jobs.mirror_results(self.host, self.job)
        except HostError as e:
            log.warning("%s %s: results not mirrored: %s", self.NOUN, self.id, e)
        return raw

    def json_object(self, raw: bytes, what: str = "report") -> dict[str, Any] | None:
        """``raw`` (the job's ``what``) as a JSON object, or None: nothing, or unreadable (logged)."""
        if not raw.strip():
            return None
        try:
            d = json.loads(raw)
        except ValueError as e:
            log.warning("%s %s: unreadable %s: %s", self.NOUN, self.id, what, e)
            return None
        if not isinstance(d, dict):
            log.warning("%s %s: unreadable %s: not a JSON object", self.NOUN, self.id, what)
            return None
        return d

    # ------------------------------------------------------------------ cancel
    async def cancel(self) -> str:
        """Cancel on the host: the server it started is stopped, every result is kept."""
        self.cancelled = True
        return await jobs.stop(self.host, self.job, grace=CANCEL_GRACE)


# ---------------------------------------------------------------------- before a start
async def refuse_while_running(host: Host) -> None:
    """One campaign per host at a time, an A/B or a tuning campaign: :class:`jobs.JobError`
    naming the one that runs, on the host or, for a remote host, run from this machine over a
    deployment that has the host among its nodes (:mod:`tunedeck.services.deployops`)."""
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.hostops.target import parse_target
    from tunedeck.util.safety import UnsafeInput

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


async def ask_to_stop_runs(host: Host, where: str, confirm_stop: Callable[[str], Awaitable[bool]] | None) -> bool:
    """:func:`ask_to_stop` about tunedeck's servers running on ``host`` (``where``: its label)."""
    running = [h for h in await launcher.list_host_runs(host) if h.alive]
    return await ask_to_stop(
        [f"run {h.run_id}" + (f" ({h.meta.get('profile')})" if h.meta.get("profile") else "") for h in running],
        f" on {where}",
        confirm_stop,
        refused=f"{host.target}: ",
    )


async def held_by_runs(host: Host) -> tuple[str, ...]:
    """The pre-flight findings a campaign ignores on ``host``: it stops tunedeck's running servers
    first, so the port one of them holds is no refusal."""
    return ("port.in-use",) if any(h.alive for h in await launcher.list_host_runs(host)) else ()


def campaign_python(python: str | None, profiles: Iterable["ServerProfile"]) -> str | None:
    """The Python a campaign's job runs with on the host: ``python`` (``--python``), else the first
    of its ``profiles`` that names one of its own (not the default ``python3``); None: the host's."""
    return python or next((p.python for p in profiles if p.python != "python3"), None)


async def ship_workload(host: Host, plan: Plan, python: str | None) -> Plan:
    """``plan`` with its dataset file placed on ``host`` (once per content), where the host-side
    levels read it; unchanged without one."""
    if not plan.workload.path:
        return plan
    path = await ship_data_file(host, plan.workload.path, python)
    return dataclasses.replace(plan, workload=dataclasses.replace(plan.workload, path=path))


def journal(record: dict[str, Any]) -> None:
    """Append to the tuning journal; a failure is logged (the campaign's outcome is on the host)."""
    try:
        Journal().append(record)
    except OSError as e:
        log.error("journal not written: %s", e)


__all__ = [
    "CANCEL_GRACE",
    "JobRun",
    "ask_to_stop",
    "ask_to_stop_runs",
    "campaign_python",
    "held_by_runs",
    "journal",
    "refuse_while_running",
    "ship_workload",
]
