"""A tuning campaign: which of many configurations serves the most users within the SLO.

For every candidate (a profile resolved into a command, :class:`~tunedeck.ab.ops.ProfileInfo`),
through the same :class:`~tunedeck.ab.ops.ServerOps` an A/B uses::

    stop what runs (asked first, by the laptop) -> launch -> wait ready (start-up time and
    phases; a failed start is diagnosed by the tracker and is a finding, the campaign goes on)
    -> capacity at the SLO (tunedeck.ab.capacity.find_capacity: one benchmark level per step) -> stop

**Rounds (successive halving).** Round 1 measures every candidate once, in order. After a
round the measured candidates are ranked (capacity at the SLO, then output tok/s at capacity,
then single-user tok/s); the ones whose capacity lies within the noise band of the leader's
stay in contention (at most half of them, the best, and never fewer than the leader), the clear
losers are dropped. Round ``r`` measures the contenders again, relaunched, in an order rotated by
``r`` (interleaved: drift spreads over all of them), until one contender is left, ``repeats_max``
measurements were made, or the budget would be overrun. A candidate's capacity is the mean of
its measurements; its noise band is the larger of the search's resolution (the gap to the
first failing concurrency) and the spread of its measurements, and at least ``noise_pct``.

**Resume.** The runner's whole state is :meth:`TuneRunner.state` (JSON); the host-side job
writes it after every candidate (and when one starts). A runner made from that state keeps
every finished measurement and redoes the one that was interrupted (its launch is kept,
marked ``interrupted``); the server that the killed process had started is stopped first.

Stdlib only, Python 3.9: this ships in the host-side runtime.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Tuple

from tunedeck.ab.cancel import CampaignTask, failure_text
from tunedeck.ab.capacity import CapacityStep, find_capacity, parse_slo
from tunedeck.ab.events import ABEvent
from tunedeck.ab.journal import Journal
from tunedeck.ab.ops import LaunchHandle, LevelRequest, ProfileInfo, ReadyResult, ServerOps, StopResult, journal_launch
from tunedeck.ab.plan import Plan, PlanLevel
from tunedeck.ab.tuneresult import (
    DEFAULT_NOISE_PCT,
    DROPPED,
    FAILED,
    MEASURED,
    PENDING,
    RUNNING,
    SKIPPED,
    Cand,
    build_report,
    noise_pct_of,
    rank,
    repeats_max_of,
    seconds_of,
    settle,
    step_findings,
)

log = logging.getLogger(__name__)


@dataclass
class Workload:
    """What each capacity step runs: the plan's settings with one level at concurrency ``c``
    of ``max(min_prompts, prompts_per_c * c)`` requests."""

    plan: Plan
    prompts_per_c: int = 5
    min_prompts: int = 10

    @property
    def template(self) -> PlanLevel:
        return self.plan.levels[0]

    def level(self, c: int) -> PlanLevel:
        t = self.template
        return PlanLevel(
            concurrency=c,
            num_prompts=max(self.min_prompts, self.prompts_per_c * c),
            input_len=t.input_len,
            output_len=t.output_len,
            warmup=t.warmup,
            label=f"C={c}",
        )

    def to_dict(self) -> Dict[str, Any]:
        return {"plan": self.plan.to_dict(), "prompts_per_c": self.prompts_per_c, "min_prompts": self.min_prompts}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Workload":
        return cls(Plan.from_dict(d["plan"]), int(d.get("prompts_per_c") or 5), int(d.get("min_prompts") or 10))


class TuneRunner:
    """One campaign over ``ops`` (see the module docstring). ``state``: a previous run's
    :meth:`state` to resume; ``on_state`` is called with the state whenever it should be saved."""

    def __init__(
        self,
        ops: ServerOps,
        spec: Mapping[str, Any],
        *,
        state: Optional[Mapping[str, Any]] = None,
        on_event: Optional[Callable[[ABEvent], Any]] = None,
        on_state: Optional[Callable[[Dict[str, Any]], Any]] = None,
        journal: Optional[Journal] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ops = ops
        self.spec = spec
        self.id = str(spec["campaign"])
        self.slo = parse_slo([str(t) for t in spec["slo"]])
        self.workload = Workload.from_dict(spec["workload"])
        self.repeats_max = repeats_max_of(spec)
        self.noise_pct = noise_pct_of(spec)
        self.budget_s = seconds_of(spec, "budget_s")
        self.estimate_s = seconds_of(spec, "estimate_s")
        self.max_concurrency = int(spec.get("max_concurrency") or 1024)
        self.max_steps = int(spec.get("max_steps") or 8)
        self.start = int(spec.get("start") or 1)
        self.on_event = on_event
        self.on_state = on_state
        self.journal = journal if journal is not None else Journal()
        self.clock = clock
        self.status = "running"
        self.error: Optional[str] = None
        self.warnings: List[str] = []
        self.left_running: List[str] = []
        self.round = 0
        self.resumes = 0
        self._spent_before = 0.0
        self._live: Optional[Dict[str, Any]] = None  # the server this campaign runs now (run id, candidate)
        self._handle: Optional[Tuple[ProfileInfo, LaunchHandle]] = None
        self._t0 = clock()
        self._task = CampaignTask()
        self._step = 0
        if state:
            self._restore(state)
        else:
            self.cands = [
                Cand(
                    name=str(c["name"]),
                    changes=dict(c.get("changes") or {}),
                    info=ProfileInfo.from_json(c["info"]) if c.get("info") else None,
                    tp=int(c.get("tp") or 1),
                    state=SKIPPED if c.get("skip") else PENDING,
                    findings=[f"skipped: {c['skip']}"] if c.get("skip") else [],
                )
                for c in spec["candidates"]
            ]

    # ------------------------------------------------------------------ state
    def _restore(self, st: Mapping[str, Any]) -> None:
        self.cands = [Cand.from_state(c) for c in st["candidates"]]
        self.round = int(st.get("round") or 0)
        self.resumes = int(st.get("resumes") or 0) + 1
        self._spent_before = float(st.get("spent_s") or 0.0)
        self.warnings = [str(w) for w in st.get("warnings") or []]
        live = st.get("live")
        self._live = dict(live) if isinstance(live, Mapping) else None
        settle(self.cands, self.round)  # the interrupted one is redone, its launch kept as what it was

    def state(self) -> Dict[str, Any]:
        return {
            "v": 1,
            "campaign": self.id,
            "round": self.round,
            "resumes": self.resumes,
            "spent_s": self.spent_s(),
            "live": self._live,
            "warnings": self.warnings,
            "candidates": [c.to_state() for c in self.cands],
        }

    def spent_s(self) -> float:
        return round(self._spent_before + (self.clock() - self._t0), 3)

    def _save(self) -> None:
        if self.on_state is None:
            return
        try:
            self.on_state(self.state())
        except Exception:
            log.exception("campaign %s: saving its state failed", self.id)
            raise

    # ------------------------------------------------------------------ events
    def _emit(
        self, kind: str, message: str, cand: Optional[str] = None, fraction: Optional[float] = None, **data: Any
    ) -> None:
        if self.on_event is None:
            return
        total = sum(1 for c in self.cands if c.state != SKIPPED)
        done = sum(1 for c in self.cands if c.state in (MEASURED, DROPPED, FAILED))
        ev = ABEvent(kind, message, cand, self.round, done, total, fraction, data)
        try:
            self.on_event(ev)
        except Exception:
            log.exception("campaign %s: the event callback failed on %r", self.id, kind)

    # ------------------------------------------------------------------ control
    def cancel(self) -> None:
        """Stop as soon as possible: the server this campaign started is stopped, results kept."""
        self._task.cancel()

    async def run(self) -> Dict[str, Any]:
        try:
            await self._task.run(self._run)
            self.status = "completed"
        except asyncio.CancelledError:
            self.status, self.error = "cancelled", "cancelled by the user"
            self._emit("cancelled", "campaign cancelled; stopping the server it started")
            await asyncio.shield(self._stop_live())
        except Exception as e:
            log.exception("campaign %s failed", self.id)
            self.status = "failed"
            self.error = failure_text(e)
            self._emit("error", self.error)
            await asyncio.shield(self._stop_live())
        for c in self.cands:
            if c.state == RUNNING:
                c.state = MEASURED if c.measurements else PENDING
        self._save()
        rep = self.report()
        self._emit(
            "done",
            f"campaign {self.id} {self.status}" + (f": {self.error}" if self.error else ""),
            winner=rep["winner"],
        )
        if self.status == "cancelled":
            self._task.take_back()
        return rep

    async def _run(self) -> None:
        names = ", ".join(c.name for c in self.cands if c.state != SKIPPED)
        if self.resumes:
            kept = sum(len(c.measurements) for c in self.cands)
            self._emit("info", f"campaign {self.id} resumed (restart {self.resumes}): {kept} measurement(s) kept")
        else:
            self._emit(
                "start",
                f"campaign {self.id} on {self.ops.host_label}: {names}; SLO {' '.join(self.spec['slo'])}",
                pace=self.spec.get("pace"),  # the estimate's parts, for a follower's ETA
            )
            for c in self.cands:
                if c.state == SKIPPED:
                    self._emit("info", c.findings[0], c.name)
        await self._stop_existing()
        while True:
            todo = self._round_order()
            for c in todo:
                if self._over_budget(c):
                    break
                await self._measure(c)
            if not self._next_round():
                break

    def _round_order(self) -> List[Cand]:
        """This round's candidates still to measure, rotated by the round (interleaved repeats)."""
        live = [c for c in self.cands if c.state in (PENDING, MEASURED) and len(c.measurements) <= self.round]
        if not live:
            return []
        k = self.round % len(live)
        return live[k:] + live[:k]

    def _per_candidate_s(self) -> Optional[float]:
        got = [d for c in self.cands for d in c.durations]
        if got:
            return sum(got) / len(got)
        n = sum(1 for c in self.cands if c.state != SKIPPED)
        return self.estimate_s / n if self.estimate_s and n else None

    def _over_budget(self, c: Cand) -> bool:
        """Whether measuring ``c`` would overrun the budget (said once, as a finding)."""
        if self.budget_s is None:
            return False
        per = self._per_candidate_s()
        if per is None or self.spent_s() + per <= self.budget_s:
            return False
        msg = (
            f"budget: {self.budget_s:.0f} s would be overrun (spent {self.spent_s():.0f} s, "
            f"about {per:.0f} s per measurement); no more measurements"
        )
        if msg not in self.warnings:
            self.warnings.append(msg)
            self._emit("info", msg)
        for x in self.cands:
            if x.state == PENDING and not x.measurements:
                x.state = SKIPPED
                x.findings.append("not measured: the budget was spent")
        return True

    def ranked(self) -> List[Cand]:
        """Candidates with a measurement, best first."""
        return rank(self.cands)

    def _contenders(self) -> Tuple[List[Cand], List[Cand]]:
        """(the measured candidates whose capacity lies within the leader's noise band, the ones of
        those still in contention: the better half, at least two, the leader always)."""
        order = [c for c in self.ranked() if c.state == MEASURED]
        if not order:
            return [], []
        lead = order[0]
        cap = lead.capacity()
        if cap is None:
            return [lead], [lead]
        band = lead.noise_band_pct(self.noise_pct) or self.noise_pct
        within = [
            c
            for c in order
            if c.capacity() is not None
            and (c.capacity() or 0) * (1 + (c.noise_band_pct(self.noise_pct) or band) / 100.0)
            >= cap * (1 - band / 100.0)
        ]
        return within, within[: max(2, math.ceil(len(order) / 2))]

    def _next_round(self) -> bool:
        """Drop the clear losers; True when another round is worth its cost."""
        if self._task.requested:
            return False
        within, keep = self._contenders()
        for c in self.cands:
            if c.state == MEASURED and c not in keep:
                why = "outside the leader's noise band" if c not in within else "in the lower half (successive halving)"
                c.state = DROPPED
                c.findings.append(f"dropped after round {self.round + 1}: {why}")
                self._emit("dropped", f"{c.name} dropped: {why}", c.name)
        self._save()
        if len(keep) < 2:
            return False
        if self.round + 1 >= self.repeats_max:
            names = ", ".join(c.name for c in keep)
            self.warnings.append(f"{names}: within each other's noise band after {self.round + 1} measurement(s) each")
            return False
        self.round += 1
        self._emit(
            "round", f"round {self.round + 1}: repeating {', '.join(c.name for c in keep)} (within the noise band)"
        )
        return True

    # ------------------------------------------------------------------ one candidate
    async def _stop_existing(self) -> None:
        """Stop what runs before the first launch: the server a killed run of this campaign left
        (always), others only when the laptop's question was answered yes."""
        ours = {c.name for c in self.cands}
        live_id = (self._live or {}).get("run_id")
        for s in await self.ops.running_servers():
            mine = s.id == live_id or s.profile in ours
            if not mine and not self.spec.get("stop_existing"):
                raise RuntimeError(
                    f"not started: {s.description} is running on {self.ops.host_label} and stopping it was not confirmed"
                )
            self._emit("stop-existing", f"stopping {s.description}" + (" (left by this campaign)" if mine else ""))
            res = await self.ops.stop_running(s)
            if not res.stopped:
                raise RuntimeError(f"could not stop {s.description}: {res.message}")
        self._live = None

    async def _measure(self, c: Cand) -> None:
        assert c.info is not None
        info = c.info
        t0 = self.clock()
        c.state = RUNNING
        launch: Dict[str, Any] = {"round": self.round, "profile": info.name}
        c.launches.append(launch)
        self._live = {"candidate": c.name, "run_id": None}
        self._save()
        self._emit("launch", f"launching {c.name}", c.name)
        try:
            launching = asyncio.ensure_future(self.ops.launch(info))
            try:
                handle = await asyncio.shield(launching)
            except asyncio.CancelledError:
                try:  # let the launch finish, so the cleanup stops what it started
                    self._handle = (info, await launching)
                except Exception:
                    log.info("campaign %s: the cancelled launch of %s failed", self.id, c.name, exc_info=True)
                raise
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - refused (GPUs held), host error: a finding
            self._failed(c, launch, f"could not be launched: {e}")
            return
        self._handle = (info, handle)
        self._live = {"candidate": c.name, "run_id": handle.run_id}
        launch.update({"launch_run_id": handle.run_id, "server_log": handle.server_log})
        self._save()

        def progress(msg: str, frac: Optional[float]) -> None:
            self._emit("progress", msg, c.name, fraction=frac)

        ready = await self.ops.wait_ready(info, handle, progress)
        launch.update(
            {
                "ready": ready.ready,
                "startup_s": ready.startup_s,
                "timeline": [dict(t) for t in ready.timeline],
                "diagnosis": ready.diagnosis,
                "evidence": ready.evidence,
            }
        )
        self._journal_launch(c, handle, ready)
        if not ready.ready:
            why = ready.diagnosis or "the server did not become ready"
            if ready.evidence:
                why += f" (log: {ready.evidence.strip()})"
            await self._stop_live()
            self._failed(c, launch, f"failed to start: {why}")
            return
        self._emit(
            "ready",
            f"{c.name} ready in {ready.startup_s:.1f} s" if ready.startup_s is not None else f"{c.name} ready",
            c.name,
            startup_s=ready.startup_s,
        )
        await self.ops.flush_cache(info, handle)
        result = await find_capacity(
            self._measure_fn(c, info, handle),
            self.slo,
            start=self.start,
            max_concurrency=self.max_concurrency,
            max_steps=self.max_steps,
            on_step=lambda s: self._on_step(c, s),
        )
        await self._stop_live()
        launch["done"] = True
        c.measurements.append(result.to_dict())
        c.durations.append(round(self.clock() - t0, 3))
        c.state = MEASURED
        for f in step_findings(result):
            if f not in c.findings:
                c.findings.append(f)
        cap = "not met at C=1" if result.capacity is None else f"capacity C={result.capacity}"
        self._emit("capacity", f"{c.name}: {cap}", c.name, capacity=result.capacity, result=result.to_dict())
        self._save()

    def _measure_fn(
        self, c: Cand, info: ProfileInfo, handle: LaunchHandle
    ) -> Callable[[int], Awaitable[Mapping[str, Any]]]:
        async def measure(conc: int) -> Mapping[str, Any]:
            lv = self.workload.level(conc)
            self._emit(
                "bench-start",
                f"C={conc}: {lv.num_prompts} prompts, {lv.input_len} in / {lv.output_len} out",
                c.name,
                concurrency=conc,
            )

            def bprog(msg: str, frac: Optional[float]) -> None:
                self._emit("bench-progress", msg, c.name, fraction=frac)

            labels = {"ab_id": self.id, "side": c.name, "repeat": str(len(c.measurements) + 1), "profile": info.name}
            res = await self.ops.bench(info, handle, LevelRequest(self.workload.plan, lv, labels, bprog))
            if res.error and not res.summary:
                raise RuntimeError(f"{c.name}: benchmark at C={conc} failed: {res.error}")
            try:
                self.journal.record_bench(
                    res.run_id or f"tune-{self.id}-{conc}",
                    profile=info.name,
                    host=self.ops.host_label,
                    concurrency=conc,
                    summary=res.summary,
                    result_dir=res.result_dir,
                    ab_id=self.id,
                    side=c.name,
                    repeat=len(c.measurements) + 1,
                    server_log=handle.server_log,
                    launch_run_id=handle.run_id,
                )
            except Exception as e:  # noqa: BLE001 - never lose the campaign over the journal
                log.warning("campaign %s: journal not written: %s", self.id, e)
            return dict(res.summary)

        return measure

    def _on_step(self, c: Cand, s: CapacityStep) -> None:
        tput = s.summary.get("output_throughput")
        t = f", {tput:.0f} tok/s" if isinstance(tput, (int, float)) else ""
        self._emit(
            "bench-done",
            f"C={s.concurrency}: {'meets' if s.met else 'misses'} the SLO{t}"
            + ("" if s.met else f" ({'; '.join(s.reasons)})"),
            c.name,
            concurrency=s.concurrency,
            met=s.met,
        )

    def _failed(self, c: Cand, launch: Dict[str, Any], why: str) -> None:
        launch["done"] = True
        c.state = FAILED
        c.findings.append(why)
        self._live = None
        self._emit("failed", f"{c.name} {why}", c.name)
        self._save()

    def _journal_launch(self, c: Cand, handle: LaunchHandle, ready: ReadyResult) -> None:
        try:
            journal_launch(
                self.journal, handle, ready, profile=c.name, host=self.ops.host_label, ab_id=self.id, side=c.name
            )
        except Exception as e:  # noqa: BLE001
            log.warning("campaign %s: journal not written: %s", self.id, e)

    async def _stop_live(self) -> None:
        if self._handle is None:
            return
        info, handle = self._handle
        self._emit("stop", f"stopping {info.name}", info.name)
        try:
            res = await self.ops.stop(info, handle)
        except Exception as e:
            log.warning("campaign %s: stopping %s failed", self.id, info.name, exc_info=True)
            res = StopResult(False, None, f"{type(e).__name__}: {e}")
        if not res.stopped:
            self.left_running.append(f"{info.name} ({handle.run_id}): {res.message}")
            self._emit("error", f"could not stop {info.name}: {res.message}", info.name)
        elif res.gpu_freed is False:
            self.left_running.append(f"{info.name}: GPU memory not freed ({res.message})")
            self._emit("error", f"{info.name} stopped but GPU memory is still in use: {res.message}", info.name)
        else:
            self._emit("gpu-freed", "GPU memory freed" if res.gpu_freed else f"stopped ({res.message})", info.name)
        self._handle = None
        self._live = None

    # ------------------------------------------------------------------ report
    def report(self) -> Dict[str, Any]:
        return build_report(
            self.spec,
            self.cands,
            status=self.status,
            error=self.error,
            host=self.ops.host_label,
            spent_s=self.spent_s(),
            resumes=self.resumes,
            warnings=self.warnings,
            left_running=self.left_running,
        )


__all__ = ["DEFAULT_NOISE_PCT", "TuneRunner", "Workload"]
