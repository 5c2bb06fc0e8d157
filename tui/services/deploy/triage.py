"""Following a deployment's members and naming the node that failed first (triage)."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Awaitable, Callable, Mapping, Sequence

from tunedeck.hostops.hosts import Host
from tunedeck.hostops.runstore import FAILED, READY, STARTING, STOPPED, WORKER_UP, RunStore
from tunedeck.hostops.startupstate import STALLED
from tunedeck.hostops.tracker import StartupTracker
from tunedeck.model import StartupProgress
from tunedeck.services.deploy.logs import log_time
from tunedeck.services.deploy.records import (
    SECONDARY_KINDS,
    WORKER_QUIET_S,
    DeploymentRecord,
    DeploymentStore,
    Member,
    mark_workers_up,
    worker_start_ended,
)
from tunedeck.util.aio import cancel_and_wait


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
    # a member stopped on request never failed, whatever its log says after its peers went (the
    # NCCL error of a worker whose head was stopped first is the stop's doing, not a failure)
    failed = [
        m
        for m in members
        if m.state != STOPPED and (m.state in (FAILED, "exited") or (m.kind and m.failed_at is not None))
    ]
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
    ready_at: float | None = None
    up: set[str] = set()

    def workers_up(head_ready_for: float) -> set[str]:
        now = time.time()
        return {
            m.run_id
            for m, t, _ in trackers
            if not m.serves and worker_start_ended(t.parser.state, now - t.last_activity, head_ready_for)
        }

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
            elif verdict.state == READY:
                # the head serves: wait for the workers' own start-up to end too (their log past
                # weight loading, or quiet), at most twice the quiet window
                now = time.time()
                ready_at = ready_at or now
                up = workers_up(now - ready_at)
                if len(up) == sum(not m.serves for m, _, _ in trackers) or now - ready_at >= 2 * WORKER_QUIET_S:
                    break
            elif verdict.state == STALLED:
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
    finally:
        await cancel_and_wait(tasks, f"deployment {rec.deploy_id}: startup watch")
    for _, t, _ in trackers:
        snap = t.snapshot()
        if snap.state != STARTING:
            t.finish(snap)  # each member's run record says what its tracker saw (the head: ready)
    if verdict.state == READY:
        mark_workers_up(rec, runstore, up)  # they serve no HTTP: up once their own start-up ended
        states = [replace(s, state=WORKER_UP) if s.run_id in up and s.state == STARTING else s for s in states]
    cur = store.load(rec.deploy_id) or rec
    if verdict.state != STARTING or cur.status != verdict.state:
        cur.status = verdict.state
        cur.diagnosis, cur.proof, cur.first_failed = verdict.diagnosis, verdict.proof, verdict.first_failed
        cur.timeline.append({"t": time.time(), "event": verdict.state, "diagnosis": verdict.diagnosis})
        store.save(cur)
    return verdict, states
