"""Deployment collector: every member of a multi-node deployment followed at once.

One :class:`~tunedeck.hostops.hosts.Host` per node (the deployment's host factory: one SSH
connection per node, shared by that node's members). Each member's log is followed from a
byte offset with :func:`~tunedeck.hostops.logfollow.follow_forever` (a lost link resumes where it
stopped: nothing is read twice), and the same bytes feed the member's
:class:`~tunedeck.hostops.tracker.StartupTracker`, whose probe loop checks liveness (and
``/health`` on the serving member). :meth:`DeploymentCollector.sample` is cheap and local: it
drains the lines that arrived since the previous sample (a bounded buffer: the oldest are
dropped, and counted, when nobody drains it) and returns a frozen :class:`DeploymentSnapshot`
with every member's :class:`~tunedeck.services.deploy.MemberState` and the deployment's
:func:`~tunedeck.services.deploy.triage` verdict. The caller chains samples (the next starts after
the previous one ended).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Mapping

from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.logfollow import LineSplitter, follow_forever, link_lost_text
from tunedeck.hostops.runstore import FAILED, READY, STARTING, WORKER_UP, RunStore
from tunedeck.hostops.startupstate import STALLED
from tunedeck.hostops.tracker import StartupTracker
from tunedeck.services import deploy as D

log = logging.getLogger(__name__)

#: member states after which its startup is over
_ENDED = frozenset({FAILED, "exited", "stopped"})


@dataclass(frozen=True, slots=True)
class DeploymentSnapshot:
    """A deployment as one sample saw it."""

    #: the deployment's id
    deploy_id: str
    #: its nodes, head first
    nodes: tuple[str, ...]
    #: every member's startup state (its ``progress`` is the tracker's snapshot)
    members: tuple[D.MemberState, ...]
    #: the deployment's state, and the node that failed first with its proving line
    verdict: D.Verdict
    #: (member tag, line) that arrived since the previous sample, in log-time order
    lines: tuple[tuple[str, str], ...] = ()
    #: lines dropped since the previous sample (the buffer was full)
    dropped: int = 0
    #: member tag → why its log link is down (reconnecting)
    link_errors: tuple[tuple[str, str], ...] = ()
    #: when the sample was taken
    time: float = 0.0


@dataclass
class _Follow:
    """One member being followed."""

    member: D.Member
    index: int
    host: Host
    tracker: StartupTracker
    #: the tracker's splitter: the member's lines as shown, parsed by the tracker on the way
    splitter: LineSplitter
    #: the latest engine timestamp its log showed (lines without one sort with it)
    last_time: float = 0.0
    link_error: str | None = None
    ended: float | None = None
    ended_checked: bool = False
    flushed: bool = False


class DeploymentCollector:
    """Follows every member of ``rec``; :meth:`start` once, :meth:`sample` repeatedly,
    :meth:`aclose` at the end."""

    def __init__(
        self,
        rec: D.DeploymentRecord,
        *,
        host_factory: D.HostFactory | None = None,
        runstore: RunStore | None = None,
        store: D.DeploymentStore | None = None,
        stall_after: float = 300.0,
        max_pending: int = 5_000,
        tracker_options: Mapping[str, object] | None = None,
    ) -> None:
        self.rec = rec
        self.host_factory = host_factory
        self.runstore = runstore or RunStore()
        self.store = store or D.DeploymentStore()
        self.stall_after = stall_after
        self.tracker_options = dict(tracker_options or {"poll_gpu": False})
        #: node → its host (one connection per node)
        self.hosts: dict[str, Host] = {}
        self.follows: list[_Follow] = []
        #: members without a local run record (nothing to follow)
        self.missing: list[D.Member] = []
        self._pending: deque[tuple[float, int, int, str, str]] = deque(maxlen=max_pending)
        self._seq = 0
        self._dropped = 0
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[object]] = []
        self._verdict: D.Verdict = D.Verdict(STARTING)
        #: when the head became ready (its tracker's record of it, else when a sample first saw it)
        self._head_ready_at: float | None = None
        #: the workers already saved as up (worker)
        self._marked_up: set[str] = set()
        self.started = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Open one host per node and start following every member (no connection is awaited
        here: a node that cannot be reached shows as a link error on its members)."""
        if self.started:
            return
        self.started = True
        self.hosts = await D.open_hosts(self.rec.nodes, self.host_factory)
        for i, m in enumerate(self.rec.members):
            run = self.runstore.load(m.run_id)
            if run is None or not run.run_dir or m.node not in self.hosts:
                log.warning(
                    "deployment %s: member %s (run %s) has no run folder to follow", self.rec.deploy_id, m.tag, m.run_id
                )
                self.missing.append(m)
                continue
            host = self.hosts[m.node]
            opts = dict(self.tracker_options)
            opts.setdefault("probe_health", m.serves)
            tracker = StartupTracker(
                host,
                run,
                store=self.runstore,
                stall_after=self.stall_after,
                lines=True,
                **opts,  # type: ignore[arg-type]
            )
            assert tracker.splitter is not None
            f = _Follow(m, i, host, tracker, tracker.splitter)
            self.follows.append(f)
            self._tasks.append(asyncio.create_task(self._follow(f)))
            self._tasks.append(asyncio.create_task(tracker.probe_loop(self._stop)))

    async def _follow(self, f: _Follow) -> None:
        path = f"{f.tracker.rec.run_dir}/log"

        def on_chunk(chunk: bytes) -> None:
            lines = f.tracker.feed_lines(chunk)
            if f.tracker.catchup and len(chunk) < 65536:
                f.tracker.catchup = False  # caught up with the log written before we came
            self._queue(f, lines)
            f.link_error = None

        def on_error(e: Exception, attempt: int) -> None:
            f.link_error = link_lost_text(e, attempt)
            log.warning("deployment %s: %s: %s", self.rec.deploy_id, f.member.tag, f.link_error)

        def on_resume() -> None:  # the host answers again, even while its log stays quiet
            f.link_error = None
            log.info("deployment %s: %s: log link back", self.rec.deploy_id, f.member.tag)

        await follow_forever(
            f.host, path, 0, on_chunk, self._stop, on_idle=f.tracker.flush, on_error=on_error, on_resume=on_resume
        )

    def _queue(self, f: _Follow, lines: list[str]) -> None:
        for line in lines:
            t = D.line_time(line)
            if t is not None and t > f.last_time:
                f.last_time = t  # never backwards: a member's own lines keep their order
            if len(self._pending) == self._pending.maxlen:
                self._dropped += 1
            self._seq += 1
            self._pending.append((f.last_time, f.index, self._seq, f.member.tag, line))

    async def aclose(self, timeout: float = 10.0) -> None:
        """Stop following and close the nodes' connections (each step bounded by ``timeout``:
        a link that hangs must not hold the caller; what did not end is logged)."""
        self._stop.set()
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for t in pending:
                log.warning("deployment %s: %s did not end within %g s of its cancel", self.rec.deploy_id, t, timeout)
        hosts, self.hosts = self.hosts, {}
        try:
            await asyncio.wait_for(D.close_hosts(hosts), timeout)
        except (asyncio.TimeoutError, TimeoutError):
            log.warning("deployment %s: closing the nodes' connections took over %g s", self.rec.deploy_id, timeout)

    # ------------------------------------------------------------------ samples
    async def sample(self) -> DeploymentSnapshot:
        """Every member's state, the verdict, and the lines since the previous sample."""
        states: list[D.MemberState] = []
        for f in self.follows:
            snap = f.tracker.snapshot()
            if snap.state in _ENDED:
                if not f.flushed:
                    f.flushed = True
                    self._queue(f, f.splitter.flush())  # its last words, unterminated
                if snap.state != "stopped" and not f.ended_checked:
                    f.ended_checked = True
                    try:
                        f.ended = await D.ended_at(f.host, f.tracker.rec.run_dir)
                    except HostError as e:
                        log.info("deployment %s: %s: end time unknown (%s)", self.rec.deploy_id, f.member.tag, e)
            prev = f.tracker.final
            if (prev is None and snap.state != STARTING) or (prev is not None and prev.state != snap.state):
                f.tracker.finish(snap)  # the run record follows, so `tunedeck runs` agrees
            states.append(D.member_state(f.member, f.tracker, snap, f.ended))
        verdict = D.triage(states, self.rec.nodes) if states else D.Verdict(STARTING)
        if verdict.state == READY:
            # a worker serves no HTTP: it is up (worker) once its own start-up has ended too
            up = self._workers_up()
            states = [replace(s, state=WORKER_UP) if s.run_id in up and s.state == STARTING else s for s in states]
            if up - self._marked_up:
                self._marked_up |= up
                D.mark_workers_up(self.rec, self.runstore, up)
        if verdict.state != self._verdict.state:
            self._record(verdict)
        self._verdict = verdict
        batch = sorted(self._pending)
        self._pending.clear()
        dropped, self._dropped = self._dropped, 0
        return DeploymentSnapshot(
            deploy_id=self.rec.deploy_id,
            nodes=tuple(self.rec.nodes),
            members=tuple(states),
            verdict=verdict,
            lines=tuple((tag, line) for _, _, _, tag, line in batch),
            dropped=dropped,
            link_errors=tuple((f.member.tag, f.link_error) for f in self.follows if f.link_error),
            time=time.time(),
        )

    def _workers_up(self) -> set[str]:
        """The run ids of the workers whose own start-up has ended (:func:`~tunedeck.services.deploy.worker_start_ended`),
        the head being ready: from each worker's log as its tracker parsed it, and how long its log
        has been quiet since the head became ready."""
        now = time.time()
        heads = [f.tracker.ready_at for f in self.follows if f.member.serves and f.tracker.ready_at is not None]
        if self._head_ready_at is None:
            self._head_ready_at = max(heads) if heads else now
        head_ready_for = now - self._head_ready_at
        return {
            f.member.run_id
            for f in self.follows
            if not f.member.serves
            and D.worker_start_ended(f.tracker.parser.state, now - f.tracker.last_activity, head_ready_for)
        }

    def _record(self, verdict: D.Verdict) -> None:
        """The deployment record follows the verdict (``tunedeck runs`` shows the same)."""
        if verdict.state not in (READY, FAILED, STALLED):
            return
        cur = self.store.load(self.rec.deploy_id)
        if cur is None or cur.status in ("stopped", D.PARTIAL) or cur.status == verdict.state:
            return
        cur.status = verdict.state
        cur.diagnosis, cur.proof, cur.first_failed = verdict.diagnosis, verdict.proof, verdict.first_failed
        cur.timeline.append({"t": time.time(), "event": verdict.state, "diagnosis": verdict.diagnosis})
        self.store.save(cur)

    # ------------------------------------------------------------------ stop
    async def stop(
        self, *, grace: float = 30.0, gpu_wait: float = 60.0
    ) -> tuple[list[D.MemberStop], dict[str, bool | None]]:
        """Stop the whole deployment (:func:`tunedeck.services.deploy.stop`) over the same connections."""
        for f in self.follows:
            f.tracker.mark_stopping()
        try:
            results, free = await D.stop(
                self.rec, self.hosts, store=self.store, runstore=self.runstore, grace=grace, gpu_wait=gpu_wait
            )
        except BaseException:
            for f in self.follows:
                f.tracker.stop_requested = False
            raise
        for f, r in ((f, r) for f in self.follows for r in results if r.run_id == f.member.run_id):
            if r.state in ("stopped", "exited", "stale"):
                f.tracker.alive = False
            else:
                f.tracker.stop_requested = False
        return results, free


__all__ = ["DeploymentCollector", "DeploymentSnapshot"]
