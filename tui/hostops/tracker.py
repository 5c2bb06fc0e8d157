"""Startup tracker: log events + ``/health`` probes + process liveness + GPU memory
→ :class:`tunedeck.model.StartupProgress` snapshots.

* ready   = process alive AND (its engine's ready line in its own log OR ``/health`` 200
  on a socket the run's own process tree listens on); a vLLM ready line is confirmed with
  ``/health`` when the port is known. A 200 from another process on the run's port is never
  the run's (:mod:`tunedeck.util.ports`); where the listener cannot be told, the log alone decides;
* failed  = the process exited (the log's root exception is the cause when there is one);
* stalled = the process is alive but nothing moves: no new log bytes, no progress and
  no GPU-memory change for ``stall_after`` seconds, or a fatal line while the process
  hangs on. A live process is never "failed": it still holds its GPUs, and
  ``tunedeck stop`` stops it. ``stall_action`` says what then: ``warn`` (report, leave
  it running) or ``stop`` (stop it, like ``tunedeck stop``);
* stopped = the process ended after a stop that tunedeck was asked for.

ETA comes from the shard progress rate and from the phase durations of previous
loads of the same profile on the same host (:mod:`tunedeck.hostops.startupeta`); the log is
read by :mod:`tunedeck.hostops.startuplog`, and :mod:`tunedeck.hostops.startupstate` says how a
state reads (the stall option, the one-line progress, the status rows).
The startup timeline (phase → wall time) is kept in the run record.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Awaitable, Callable, Sequence

from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.launcher import gpu_memory_used, process_alive, read_rc, stop_run
from tunedeck.hostops.logfollow import follow_forever
from tunedeck.hostops.reread import ended_verdict
from tunedeck.hostops.runstore import EXITED, FAILED, READY, STARTING, STOPPED, STOPPING, RunRecord, RunStore
from tunedeck.hostops.startupeta import (
    estimate,
    expected_durations,
    history_key,
    load_history,
    phase_durations,
    save_history,
    time_left_at_rate,
)
from tunedeck.hostops.startuplog import StartupLog
from tunedeck.hostops.startupstate import (
    STALL_ACTIONS,
    STALLED,
    TERMINAL,
    describe_gpu_memory,
    progress_message,
)
from tunedeck.logparse import ErrorEvent, LogEvent, PhaseEvent
from tunedeck.model import GpuStatus, StartupProgress
from tunedeck.util import http
from tunedeck.util.aio import cancel_and_wait
from tunedeck.util.ports import OTHER, OWN, PortOwners, port_owners

log = logging.getLogger(__name__)


class StartupTracker:
    """Follows one run's startup. Feed it log bytes (or let :meth:`run` follow the log),
    health results, liveness and GPU memory; read :meth:`snapshot`.

    ``lines=True``: the tracker also cuts the log into the lines a view shows (:attr:`splitter`)
    and parses those same segments, so each byte is split, decoded, redacted and made safe once
    (a view at 1,000 lines a second did all of it twice); :meth:`feed_lines` returns the lines."""

    def __init__(
        self,
        host: Host,
        rec: RunRecord,
        *,
        store: RunStore | None = None,
        stall_after: float = 300.0,
        stall_action: str = "warn",
        health_interval: float = 2.0,
        alive_interval: float = 2.0,
        gpu_interval: float = 2.0,
        health_timeout: float = 2.0,
        probe_health: bool = True,
        poll_gpu: bool = True,
        clock: Callable[[], float] = time.time,
        lines: bool = False,
    ) -> None:
        self.host = host
        self.rec = rec
        self.store = store or RunStore()
        self.stall_after = stall_after
        if stall_action not in STALL_ACTIONS:
            raise ValueError(f"stall action {stall_action!r}: expected warn or stop")
        self.stall_action = stall_action
        #: a stop was asked for (by this tracker's owner, or seen in the run record)
        self.stop_requested = False
        self.stop_message: str | None = None
        self.health_interval = health_interval
        self.alive_interval = alive_interval
        self.gpu_interval = gpu_interval
        self.health_timeout = health_timeout
        self.probe_health = probe_health and rec.port is not None
        self.poll_gpu = poll_gpu
        self.clock = clock
        engine = rec.engine if rec.engine in ("sglang", "vllm") else None
        #: the log: its parser, and the view's line splitter whose segments it reads (``lines=True``)
        self.startup_log = StartupLog(engine, lines=lines)
        self.parser = self.startup_log.parser
        self.splitter = self.startup_log.splitter
        self.started = rec.started or rec.created or clock()
        #: when the run became ready: recorded by whoever saw it first (a launch's --wait, a view),
        #: else the moment this tracker sees it; "ready in" is ready_at - started, not the time
        #: since (a view opened 13 minutes after a 5-s start says 5 s)
        self.ready_at: float | None = None
        for e in rec.timeline:
            t = e.get("t")
            if e.get("event") == READY and isinstance(t, (int, float)):
                self.ready_at = float(t)
                break
        self.offset = 0
        self.health = "unknown"
        self.health_ok_at: float | None = None
        #: the last 200's listener was proven to be this run's process tree
        self.health_own = False
        #: another process answers on the run's port (who, from /proc)
        self.port_foreign: PortOwners | None = None
        self.alive: bool | None = None
        self.rc: int | None = None
        self.gpu_memory: tuple[float, ...] = ()
        self.last_activity = clock()
        self.phase_times: dict[str, float] = {}
        # attached long after the launch: phases already in the log get no real start time
        self.catchup = clock() - self.started > 10.0 or bool(rec.timeline and any("phase" in e for e in rec.timeline))
        self._phase_seen_at_catchup: set[str] = set()
        self.weight_rate_start: tuple[float, int] | None = None
        self._bar_start: tuple[tuple[str, int], float, int] | None = None
        self.final: StartupProgress | None = None
        self._hkey = history_key(rec.target, rec.profile, rec.argv)
        self.expected = expected_durations(load_history(self._hkey))
        self._listeners: list[Callable[[StartupProgress], None]] = []
        # timeline already recorded (reattach): keep its times
        for entry in rec.timeline:
            ph = entry.get("phase")
            if isinstance(ph, str) and isinstance(entry.get("t"), (int, float)):
                self.phase_times.setdefault(ph, float(entry["t"]))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ inputs
    def feed(self, data: bytes) -> list[LogEvent]:
        """Log bytes (any chunking): the new events. With ``lines=True`` its lines are cut too
        (and dropped: :meth:`feed_lines` returns them)."""
        return self._take(data)[0]

    def feed_lines(self, data: bytes) -> list[str]:
        """Log bytes (``lines=True``): the complete lines in them as the view shows them
        (:class:`LineSplitter`), parsed on the way."""
        if self.splitter is None:
            raise ValueError("feed_lines: this tracker cuts no lines (made without lines=True)")
        return self._take(data)[1]

    def _take(self, data: bytes) -> tuple[list[LogEvent], list[str]]:
        if data:
            self.offset += len(data)
            self.last_activity = self.clock()
        events, lines = self.startup_log.feed(data)
        if self.alive is False:
            # the liveness probe saw the process end before these last lines were read: they
            # are a dead process's too (an exception they end on is final)
            events += self.startup_log.ended()
        self._consume(events)
        return events, lines

    def flush(self) -> list[LogEvent]:
        events = self.startup_log.flush()
        self._consume(events)
        return events

    def set_health(self, ok: bool | None, owner: PortOwners | None = None) -> None:
        """None = no answer (refused/timeout), False = answered non-200, True = 200.
        ``owner``: who listens on the port (None: the caller vouches that it is the run). A 200
        from another process is ``foreign``; one whose listener cannot be told counts only
        with the engine's ready line."""
        self.port_foreign = owner if owner is not None and owner.state == OTHER else None
        if ok and self.port_foreign is not None:
            self.health, self.health_own = "foreign", False
            return
        self.health = "ok" if ok else ("starting" if ok is False else "down")
        if ok:
            self.health_own = owner is None or owner.state == OWN
            self.health_ok_at = self.health_ok_at or self.clock()

    def set_alive(self, alive: bool, rc: int | None = None) -> None:
        self.alive = alive
        if not alive:
            self.rc = rc
            # the log will not grow any more: its last, unterminated line counts too, and an
            # exception it ends on (nothing after it) is the failure
            self._consume(self.startup_log.ended())

    def set_gpu(self, status: GpuStatus | Sequence[float] | dict[int, float] | None) -> None:
        if status is None:
            return
        if isinstance(status, GpuStatus):
            mem = tuple(float(g.memory_used) if isinstance(g.memory_used, (int, float)) else 0.0 for g in status.gpus)
        elif isinstance(status, dict):
            mem = tuple(float(status[k]) for k in sorted(status))
        else:
            mem = tuple(float(x) for x in status)
        if mem != self.gpu_memory:
            if self.gpu_memory:
                self.last_activity = self.clock()
            self.gpu_memory = mem

    # ------------------------------------------------------------------ state
    def _consume(self, events: list[LogEvent]) -> None:
        now = self.clock()
        changed = False
        for ev in events:
            if isinstance(ev, PhaseEvent):
                self.last_activity = now
                if ev.phase not in self.phase_times:
                    self.phase_times[ev.phase] = now
                    if self.catchup:
                        self._phase_seen_at_catchup.add(ev.phase)
                    self.rec.timeline.append(
                        {"t": now, "phase": ev.phase, "message": ev.message[:200], "log_time": ev.time}
                    )
                    changed = True
                if ev.phase == "weight-loading" and ev.total and ev.n is not None:
                    if self.weight_rate_start is None or ev.n < self.weight_rate_start[1]:
                        self.weight_rate_start = (now, ev.n)
                if ev.phase == "graph-capture" and ev.total and ev.n is not None:
                    key = (ev.label, ev.total)
                    if self._bar_start is None or self._bar_start[0] != key or ev.n < self._bar_start[2]:
                        self._bar_start = (key, now, ev.n)
            elif isinstance(ev, ErrorEvent):
                changed = True
        if changed:
            self._save_timeline()

    def _save_timeline(self) -> None:
        rec = self.store.load(self.rec.run_id)
        if rec is not None:
            rec.timeline = self.rec.timeline
            self.store.save(rec)

    def state(self) -> tuple[str, str | None, str | None]:
        """(state, diagnosis, proof). The process decides between alive and ended; the
        log decides why."""
        st = self.parser.state
        f = st.failure
        if self.alive is False:
            if self.stop_requested:
                return STOPPED, "stopped (by you)", self.stop_message
            return ended_verdict(st, self.rc, self._last_line())
        if f is not None and self.alive is None and self.rec.pid is None:
            return FAILED, f.cause, f.line  # no process to ask: the log is all there is
        if f is None and self._is_ready():
            return READY, None, None
        stalled_for = self.stalled_for()
        if stalled_for >= self.stall_after:
            return STALLED, self._stall_diagnosis(f), f.line if f is not None else self._last_line()
        if f is not None:
            # the log shows a fatal error but the process lives on (exiting, or hung with its GPUs)
            return STARTING, f"{f.cause} (the process is still running)", f.line
        if self.port_foreign is not None:
            return STARTING, self.foreign_diagnosis(), None
        return STARTING, None, None

    def foreign_diagnosis(self) -> str:
        """'port 8000 is answered by another process: pid 4242 (python3), not this run'."""
        pf = self.port_foreign
        who = pf.describe() if pf is not None else "another process"
        return f"port {self.rec.port} is answered by another process: {who}, not this run"

    def _stall_diagnosis(self, f: ErrorEvent | None) -> str:
        mins = self.stall_after / 60
        what = f"{mins:g} min" if self.stall_after >= 60 else f"{self.stall_after:g} s"
        held = f"; holds {describe_gpu_memory(self.gpu_memory)}" if self.gpu_memory and any(self.gpu_memory) else ""
        if f is not None:
            return f"stalled after a fatal error: {f.cause}; the process is still running{held}"
        return (
            f"stalled: no log output, progress or GPU-memory change for {what} ({self.parser.state.describe()}){held}"
        )

    def _is_ready(self) -> bool:
        st = self.parser.state
        if st.ready_line is not None:
            if st.engine == "vllm" and self.probe_health:
                return self.health == "ok"
            return True
        if self.health == "ok" and self.health_own:
            # a 200 from the run's own socket counts once the log shows the engine past loading;
            # a command of unknown kind (no engine log) is ready on the 200 alone
            if self.rec.engine not in ("sglang", "vllm") and st.engine is None:
                return True
            return st.phase in ("kv-cache", "graph-capture", "warmup", "ready")
        return False

    def _last_line(self) -> str | None:
        ctx = self.parser._context
        for line in reversed(ctx):
            if line.strip():
                return line.strip()
        return None

    def stalled_for(self) -> float:
        return max(0.0, self.clock() - self.last_activity)

    def snapshot(self) -> StartupProgress:
        now = self.clock()
        st = self.parser.state
        state, diag, proof = self.state()
        phase = st.phase
        pp = st.phase_progress()
        n = total = None
        label = ""
        if phase == "weight-loading" and st.weights:
            n, total = st.weights
        elif phase == "graph-capture":
            label = st.graph_label or ""
            if st.graph and not st.graph_done:
                n, total = st.graph
        if state == READY:
            phase, pp = "ready", 1.0
        fraction, eta, src = self._estimate(phase, pp, now)
        if state == READY:
            fraction, eta = 1.0, 0.0
        stalled_for = self.stalled_for()
        return StartupProgress(
            run_id=self.rec.run_id,
            engine=st.engine or self.rec.engine,
            state=state,
            phase=phase,
            phase_label=label,
            phase_progress=pp,
            phase_n=n,
            phase_total=total,
            fraction=fraction,
            elapsed=max(0.0, self._ready_time(now) - self.started) if state == READY else max(0.0, now - self.started),
            eta=eta,
            eta_source=src,
            stalled=state == STALLED
            or (state == STARTING and stalled_for >= min(self.stall_after, max(self.stall_after / 2, 30.0))),
            stalled_for=stalled_for,
            diagnosis=diag,
            proof=proof,
            health=self.health,
            gpu_memory=self.gpu_memory,
            message=progress_message(state, diag, st.describe()),
            time=now,
        )

    def _estimate(self, phase: str | None, pp: float | None, now: float) -> tuple[float, float | None, str]:
        rate_left: float | None = None
        st = self.parser.state
        if phase == "weight-loading" and st.weights and self.weight_rate_start is not None:
            rate_left = time_left_at_rate(st.weights, self.weight_rate_start, now)
        elif phase == "graph-capture" and st.graph and not st.graph_done and self._bar_start is not None:
            _, t0, n0 = self._bar_start
            rate_left = time_left_at_rate(st.graph, (t0, n0), now)
        return estimate(phase, pp, now, expected=self.expected, phase_times=self.phase_times, rate_left=rate_left)

    def durations(self) -> dict[str, float]:
        """Seconds per phase from the recorded phase start times."""
        return phase_durations(self.phase_times)

    def on_update(self, cb: Callable[[StartupProgress], None]) -> None:
        self._listeners.append(cb)

    # ------------------------------------------------------------------ probes
    async def probe_health_once(self) -> None:
        port = self.rec.port
        if port is None:
            return
        try:
            lp = await self.host.forward_port(int(port))
            r = await http.request("GET", f"http://127.0.0.1:{lp}/health", timeout=self.health_timeout)
        except (http.HttpError, HostError):  # refused, timeout, forward failed: not ready
            self.set_health(None)
            return
        owner: PortOwners | None = None  # None once proven the run's
        if r.status == 200 and not self.health_own:
            # whose socket answered: the run's own tree, or anyone else on its port (once proven
            # the run's, it stays the run's: the process holds its listening socket)
            owner = await port_owners(self.host, int(port), session=self.rec.pid, run_id=self.rec.run_id)
            if owner.state == OTHER and self.port_foreign is None:
                log.warning("run %s: port %s answers for %s, not the run", self.rec.run_id, port, owner.describe())
        self.set_health(r.status == 200, owner)

    def mark_stopping(self, how: str | None = None) -> None:
        """A stop was asked for: when the process ends, the run is "stopped (by you)"."""
        self.stop_requested = True
        self.stop_message = how

    async def check_alive_once(self) -> None:
        rec = self.rec
        if rec.pid is None:
            return
        alive = await process_alive(self.host, rec.pid, rec.starttime)
        if not alive and not self.stop_requested:
            # stopped from elsewhere (tunedeck stop in another terminal): the record says so
            stored = self.store.load(rec.run_id)
            if stored is not None and stored.status in (STOPPING, STOPPED):
                self.mark_stopping()
        rc = None
        if not alive and rec.run_dir:
            for _ in range(10):  # the wrapper writes rc right after the server ends
                rc = await read_rc(self.host, rec.run_dir)
                if rc is not None:
                    break
                await asyncio.sleep(0.1)
        self.set_alive(alive, rc)

    async def poll_gpu_once(self) -> None:
        mem = await gpu_memory_used(self.host)
        if mem is not None:
            self.set_gpu(mem)

    async def probe_loop(self, stop: asyncio.Event) -> None:
        """Liveness, /health and GPU memory at their intervals until ``stop`` (or the
        startup ended: then only liveness keeps going, at a slower pace)."""
        t_alive = t_health = t_gpu = 0.0
        while not stop.is_set():
            now = self.clock()
            # a stalled run is still watched closely: it may move again, and its GPU memory is the news
            starting = self.final is None or self.final.state == STALLED
            try:
                if now >= t_alive:
                    t_alive = now + (self.alive_interval if starting else max(5.0, self.alive_interval))
                    await self.check_alive_once()
                if starting and self.probe_health and now >= t_health:
                    t_health = now + self.health_interval
                    await self.probe_health_once()
                if starting and self.poll_gpu and now >= t_gpu:
                    t_gpu = now + self.gpu_interval
                    await self.poll_gpu_once()
            except HostError as e:
                # link down: the follow loop reconnects; keep the last values
                log.info("run %s: probe failed (%s); keeping the last values", self.rec.run_id, e)
            try:
                await asyncio.wait_for(stop.wait(), 0.2)
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ loop
    async def run(
        self,
        *,
        timeout: float | None = None,
        on_update: Callable[[StartupProgress], Awaitable[None] | None] | None = None,
        on_bytes: Callable[[bytes], None] | None = None,
        update_every: float = 0.5,
    ) -> StartupProgress:
        """Follow the log and probe until ready or failed (or ``timeout``); return the
        final snapshot. Connection losses are retried; the log resumes at its offset."""
        deadline = None if timeout is None else self.clock() + timeout
        stop = asyncio.Event()
        log_path = f"{self.rec.run_dir}/log"

        def on_chunk(chunk: bytes) -> None:
            self.feed(chunk)
            if self.catchup and len(chunk) < 65536:
                self.catchup = False  # caught up with the existing log
            if on_bytes is not None:
                on_bytes(chunk)

        async def follow() -> None:
            await follow_forever(self.host, log_path, self.offset, on_chunk, stop, on_idle=self.flush)

        tasks = [asyncio.create_task(follow()), asyncio.create_task(self.probe_loop(stop))]
        snap = self.snapshot()
        try:
            while True:
                await asyncio.sleep(update_every)
                snap = self.snapshot()
                for cb in self._listeners:
                    cb(snap)
                if on_update is not None:
                    res = on_update(snap)
                    if asyncio.iscoroutine(res):
                        await res
                if snap.state in TERMINAL or snap.state == STALLED:
                    break
                if deadline is not None and self.clock() >= deadline:
                    break
        finally:
            stop.set()
            await cancel_and_wait(tasks, f"startup tracker {self.rec.run_id}")
        self.finish(snap)
        if snap.state == STALLED and self.stall_action == "stop":
            snap = await self.stop_stalled(snap)
        return snap

    async def stop_stalled(self, snap: StartupProgress) -> StartupProgress:
        """``--stall-after …:stop``: stop the stalled run (TERM, grace, KILL) and say so."""
        self.mark_stopping("stopped after it stalled")
        try:
            res = await stop_run(self.host, self.rec, grace=10.0, store=self.store)
        except HostError as e:
            log.warning("run %s: stopping the stalled run failed: %s", self.rec.run_id, e)
            return snap
        diag = f"{snap.diagnosis}; {res.message}"
        if res.state not in ("stopped", "exited"):
            return replace(snap, diagnosis=diag, message=diag)
        self.alive = False
        out = replace(snap, state=STOPPED, diagnosis=diag, message=diag, time=self.clock())
        rec = self.store.load(self.rec.run_id)
        if rec is not None:
            rec.diagnosis, rec.proof = diag, snap.proof
            self.store.save(rec)
        self.final = out
        return out

    def _ready_time(self, now: float) -> float:
        if self.ready_at is None:
            self.ready_at = now
        return self.ready_at

    def finish(self, snap: StartupProgress) -> None:
        """Store the state in the run record, so that ``runs``, the status screen and the
        run view read the same thing (and the phase durations on ready). Called again
        on every change of state (stalled → starting again, ready → stopped …)."""
        if snap.state == STARTING and (self.final is None or self.final.state != STALLED):
            return
        prev = self.final.state if self.final is not None else None
        self.final = snap if snap.state != STARTING else None
        if prev == snap.state:
            return
        rec = self.store.load(self.rec.run_id) or self.rec
        if snap.state == STOPPED and rec.status == STOPPED:
            return  # stop_run wrote it, with how and what it freed
        rec.status = snap.state
        rec.timeline = self.rec.timeline
        rec.timeline.append({"t": snap.time, "event": snap.state, "diagnosis": snap.diagnosis})
        if snap.state in (FAILED, EXITED, STALLED):
            rec.diagnosis, rec.proof = snap.diagnosis, snap.proof
            if self.rc is not None:
                rec.rc = self.rc
        elif snap.state == STARTING:
            rec.diagnosis = rec.proof = None  # it moves again
        self.store.save(rec)
        if snap.state == READY and not (self._phase_seen_at_catchup - {"process-start"}):
            d = self.durations()
            if d:
                save_history(self._hkey, d)


async def wait_ready(
    host: Host,
    rec: RunRecord,
    *,
    timeout: float | None = None,
    stall_after: float = 300.0,
    on_update: Callable[[StartupProgress], Awaitable[None] | None] | None = None,
    store: RunStore | None = None,
    **kw: object,
) -> StartupProgress:
    tr = StartupTracker(host, rec, store=store, stall_after=stall_after, **kw)  # type: ignore[arg-type]
    return await tr.run(timeout=timeout, on_update=on_update)


__all__ = [
    "StartupTracker",
    "wait_ready",
]
