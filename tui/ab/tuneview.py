"""A tuning campaign as the dashboard shows it: every candidate's state and the step being
measured, the best so far, an ETA and the Pareto frontier, folded from the campaign's events
(:class:`~tunedeck.ab.events.ABEvent`, as :mod:`tunedeck.ab.tune` emits them) and, at the end, its report.
The ETA is the round's rest at the campaign's pace (:mod:`tunedeck.ab.tuneeta`): the estimate's
parts, each replaced by its measured mean as the events show it (start-ups, levels, stops).

:class:`TuneProgress` takes the events; :meth:`TuneProgress.snapshot` is an immutable
:class:`TuneSnapshot` that the Tune screen renders. No Textual here.

Candidate states (the screen's words for the runner's): ``queued`` (not measured yet in this
round), ``starting`` (launched, waiting for ready), ``measuring`` (a capacity step: ``C=16``),
``done`` (measured), ``failed`` (did not start, or its benchmark failed), ``dropped`` (a clear
loser after a round), ``skipped`` (pre-flight, or the budget), ``not measured`` (the campaign
ended before it: a cancelled or partial campaign's report).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from tunedeck.ab.events import ABEvent
from tunedeck.ab.tuneeta import Doing, Pace, measured, round_left_s
from tunedeck.ab.tuneresult import pareto

QUEUED, STARTING, MEASURING, DONE, FAILED, DROPPED, SKIPPED = (
    "queued",
    "starting",
    "measuring",
    "done",
    "failed",
    "dropped",
    "skipped",
)
NOT_MEASURED = "not measured"
#: the runner's states (report.json) in the screen's words
FROM_REPORT = {
    "pending": QUEUED,
    "running": MEASURING,
    "measured": DONE,
    "dropped": DROPPED,
    "skipped": SKIPPED,
    "failed": FAILED,
}
#: states after which a candidate takes no more time this round
FINISHED = (DONE, FAILED, DROPPED, SKIPPED, NOT_MEASURED)


@dataclass(frozen=True)
class CandidateView:
    """One candidate's row."""

    name: str
    state: str = QUEUED
    #: what is being done now: ``start-up 40%``, ``C=16``, or the last step's outcome
    step: str = ""
    capacity: float | None = None
    tok_s_per_user: float | None = None
    tok_s_per_gpu: float | None = None
    startup_s: float | None = None
    pareto: bool = False
    #: measurements made (a leader gets repeats)
    measured: int = 0
    #: the last finding (why it failed, was skipped or dropped)
    note: str = ""


@dataclass(frozen=True)
class TuneSnapshot:
    """What the Tune screen shows at one moment."""

    campaign: str = ""
    #: ``idle``, ``running``, ``completed``, ``failed``, ``cancelled``, ``partial`` (its job ended
    #: without its report: the result read from its job folder)
    status: str = "idle"
    candidates: tuple[CandidateView, ...] = ()
    round: int = 0
    best: str | None = None
    #: seconds left in this round (None: not known yet)
    eta_s: float | None = None
    #: where the ETA comes from: ``estimated`` (the campaign's estimate, corrected by the
    #: start-ups and levels measured so far) or ``measured`` (once a candidate has finished)
    eta_basis: str = ""
    last: str = ""
    winner: str | None = None
    error: str | None = None

    @property
    def frontier(self) -> tuple[CandidateView, ...]:
        """The candidates with both figures (the chart's points)."""
        return tuple(c for c in self.candidates if c.tok_s_per_user is not None and c.tok_s_per_gpu is not None)

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.candidates:
            out[c.state] = out.get(c.state, 0) + 1
        return out


@dataclass
class _Cand:
    name: str
    tp: int = 1
    state: str = QUEUED
    step: str = ""
    capacity: float | None = None
    throughput: float | None = None
    per_user: float | None = None
    per_gpu: float | None = None
    startup_s: float | None = None
    pareto: bool = False
    measured: int = 0
    note: str = ""
    #: where its measurement is (event times): launched, ready, levels done, the level running
    #: since, stopping since, the last level's end; ``launched`` None: not running
    launched: float | None = None
    ready: float | None = None
    levels_done: int = 0
    level_since: float | None = None
    level_c: int | None = None
    stop_since: float | None = None
    last_done: float | None = None

    def doing(self) -> Doing | None:
        if self.launched is None:
            return None
        return Doing(self.launched, self.ready, self.levels_done, self.level_since, self.stop_since)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class TuneProgress:
    """Folds a campaign's events into :class:`TuneSnapshot`\\ s. ``candidates``: (name, tp) of
    each, in the campaign's order; ones first seen in an event are added. ``pace``: the campaign's
    estimate of each part of a candidate (its ``start`` event carries it too); without one,
    ``estimate_s``, the estimate of one round, gives each candidate its share until one finished."""

    def __init__(
        self,
        candidates: Iterable[tuple[str, int]] = (),
        *,
        campaign: str = "",
        estimate_s: float | None = None,
        pace: Pace | None = None,
    ) -> None:
        self.campaign = campaign
        self.estimate_s = estimate_s
        self.pace = pace
        # what the campaign's events measured: start-ups, C=1 levels, later levels, the later
        # levels of each finished candidate, stops (seconds)
        self._startups: list[float] = []
        self._singles: list[float] = []
        self._levels: list[float] = []
        self._counts: list[int] = []
        self._stops: list[float] = []
        self._cands: dict[str, _Cand] = {}
        for name, tp in candidates:
            self._cands[name] = _Cand(name, max(1, int(tp or 1)))
        self.status = "running"
        self.round = 1
        self.last = ""
        self.winner: str | None = None
        self.error: str | None = None
        self._now = 0.0

    def _cand(self, name: str) -> _Cand:
        c = self._cands.get(name)
        if c is None:
            c = self._cands[name] = _Cand(name)
        return c

    # ------------------------------------------------------------------ events
    def feed(self, ev: ABEvent) -> None:
        """One event of the campaign."""
        self._now = max(self._now, ev.time)
        if ev.repeat and ev.repeat > self.round:
            self.round = ev.repeat
            for x in self._cands.values():  # a new round: the contenders are queued again
                if x.state == DONE:
                    x.state, x.step = QUEUED, f"round {self.round}"
        if ev.kind != "bench-progress":
            self.last = ev.message
        c: _Cand | None = self._cand(ev.side) if ev.side else None
        kind = ev.kind
        if kind == "start" and self.pace is None:
            self.pace = Pace.from_json(ev.data.get("pace"))
        if c is not None:
            self._clock(c, ev)
            if kind == "launch":
                c.state, c.step = STARTING, "launching"
            elif kind == "progress":
                c.state = STARTING
                c.step = "start-up" + (f" {ev.fraction * 100:.0f}%" if ev.fraction is not None else "")
            elif kind == "ready":
                c.state, c.step = MEASURING, "ready"
                c.startup_s = _num(ev.data.get("startup_s")) or c.startup_s
            elif kind == "bench-start":
                c.state, c.step = MEASURING, f"C={ev.data.get('concurrency')}"
            elif kind == "bench-progress" and ev.fraction is not None and c.state == MEASURING:
                c.step = f"{c.step.split(' ')[0]} {ev.fraction * 100:.0f}%"
            elif kind == "bench-done":
                c.step = f"C={ev.data.get('concurrency')} {'met' if ev.data.get('met') else 'missed'}"
            elif kind == "capacity":
                self._measured(c, ev)
            elif kind == "failed":
                c.state, c.step, c.note = FAILED, "", ev.message
            elif kind == "dropped":
                c.state, c.note = DROPPED, ev.message
            elif kind == "info" and c.state == QUEUED and "skipped" in ev.message:
                c.state, c.note = SKIPPED, ev.message
        if kind == "cancelled":
            self.status = "cancelled"
        elif kind == "error" and c is None:
            self.error = ev.message
        elif kind == "done":
            w = ev.data.get("winner")
            self.winner = str(w) if isinstance(w, str) else None
            if self.status == "running":
                self.status = "completed" if not self.error else "failed"
            for x in self._cands.values():
                if x.state in (STARTING, MEASURING):
                    x.state, x.step = QUEUED, "interrupted"

    def _measured(self, c: _Cand, ev: ABEvent) -> None:
        res = ev.data.get("result") if isinstance(ev.data.get("result"), Mapping) else {}
        assert isinstance(res, Mapping)
        cap = _num(ev.data.get("capacity"))
        tput = _num(res.get("throughput_at_capacity"))
        c.measured += 1
        c.state = DONE
        c.step = "not met at C=1" if cap is None else f"capacity C={cap:.0f}"
        # the mean over measurements, as the campaign ranks them
        n = c.measured
        if cap is not None:
            c.capacity = cap if c.capacity is None else c.capacity + (cap - c.capacity) / n
        if tput is not None:
            c.throughput = tput if c.throughput is None else c.throughput + (tput - c.throughput) / n
        if c.throughput is not None and c.capacity:
            c.per_user = c.throughput / c.capacity
            c.per_gpu = c.throughput / c.tp
        self._frontier()

    def _clock(self, c: _Cand, ev: ABEvent) -> None:
        """Where the candidate is in time, and the parts it measured (:mod:`tunedeck.ab.tuneeta`): its
        start-up (launch to ready), each level (start to done), its levels after C=1 and its stop
        (its last level to its end)."""
        kind, t = ev.kind, ev.time
        if kind == "launch":
            c.launched, c.ready, c.levels_done, c.level_since, c.stop_since, c.last_done = t, None, 0, None, None, None
            return
        if c.launched is None:
            return
        if kind == "ready":
            c.ready = t
            self._startups.append(max(0.0, t - c.launched))
        elif kind == "bench-start":
            conc = ev.data.get("concurrency")
            c.level_since, c.level_c = t, conc if isinstance(conc, int) else None
        elif kind == "bench-done" and c.level_since is not None:
            (self._singles if c.level_c == 1 else self._levels).append(max(0.0, t - c.level_since))
            c.levels_done += 1
            c.level_since, c.last_done = None, t
        elif kind == "stop":
            c.stop_since = t
        elif kind == "capacity":
            end = c.last_done if c.last_done is not None else c.stop_since
            if end is not None:
                self._stops.append(max(0.0, t - end))
            self._counts.append(max(0, c.levels_done - 1))
            c.launched = None
        elif kind == "failed":
            c.launched = None

    def _frontier(self) -> None:
        pts = {
            c.name: (c.per_user, c.per_gpu)
            for c in self._cands.values()
            if c.per_user is not None and c.per_gpu is not None and c.state != FAILED
        }
        front = set(pareto(pts))
        for c in self._cands.values():
            c.pareto = c.name in front

    # ------------------------------------------------------------------ the end
    def apply_report(self, rep: Mapping[str, Any]) -> None:
        """The campaign's report (``report.json``): its figures, states and frontier are final."""
        self.status = str(rep.get("status") or self.status)
        self.error = rep.get("error") if isinstance(rep.get("error"), str) else None
        self.winner = rep.get("winner") if isinstance(rep.get("winner"), str) else None
        self.campaign = str(rep.get("campaign") or self.campaign)
        for d in rep.get("candidates") or ():
            if not isinstance(d, Mapping) or not isinstance(d.get("name"), str):
                continue
            c = self._cand(d["name"])
            c.tp = int(d.get("tp") or c.tp)
            c.state = FROM_REPORT.get(str(d.get("state")), c.state)
            if c.state == QUEUED and self.status != "running":  # the campaign ended before it
                c.state, c.step = NOT_MEASURED, ""
            c.capacity = _num(d.get("capacity"))
            c.per_user = _num(d.get("tok_s_per_user"))
            c.per_gpu = _num(d.get("tok_s_per_gpu"))
            c.startup_s = _num(d.get("startup_s")) or c.startup_s
            c.pareto = bool(d.get("pareto"))
            c.measured = len(d.get("measurements") or ()) or c.measured
            found = [str(f) for f in d.get("findings") or ()]
            if found:
                c.note = found[-1]
            if c.state in (DONE, DROPPED):
                c.step = "not met at C=1" if c.capacity is None else f"capacity C={c.capacity:.0f}"

    # ------------------------------------------------------------------ snapshot
    def _best(self) -> str | None:
        if self.winner:
            return self.winner
        got = [c for c in self._cands.values() if c.capacity is not None and c.state in (DONE, QUEUED, DROPPED)]
        if not got:
            return None
        return max(got, key=lambda c: (c.capacity or 0.0, c.throughput or 0.0)).name

    def _eta(self, now: float | None) -> tuple[float | None, str]:
        if self.status != "running":
            return None, ""
        now = self._now if now is None else now
        live = [c for c in self._cands.values() if c.state not in FINISHED]
        if not live:
            return None, ""
        if self.pace is None and not self._counts:  # only the round's total: each candidate's share
            if not self.estimate_s:
                return None, ""
            per = self.estimate_s / (sum(1 for c in self._cands.values() if c.state != SKIPPED) or 1)
            spent = [now - c.launched if c.launched is not None else 0.0 for c in live]
            return sum(max(0.0, per - s) for s in spent), "estimated"
        pace = measured(
            self.pace,
            startups=self._startups,
            singles=self._singles,
            levels=self._levels,
            counts=self._counts,
            stops=self._stops,
        )
        if pace is None:
            return None, ""
        return round_left_s(pace, [c.doing() for c in live], now), "measured" if self._counts else "estimated"

    def snapshot(self, now: float | None = None) -> TuneSnapshot:
        """The state now (``now``: wall-clock seconds, for the ETA; default the last event's time)."""
        eta, basis = self._eta(now)
        return TuneSnapshot(
            campaign=self.campaign,
            status=self.status,
            candidates=tuple(
                CandidateView(
                    c.name,
                    c.state,
                    c.step,
                    c.capacity,
                    c.per_user,
                    c.per_gpu,
                    c.startup_s,
                    c.pareto,
                    c.measured,
                    c.note,
                )
                for c in self._cands.values()
            ),
            round=self.round,
            best=self._best(),
            eta_s=eta,
            eta_basis=basis,
            last=self.last,
            winner=self.winner,
            error=self.error,
        )


def from_report(rep: Mapping[str, Any]) -> TuneSnapshot:
    """A finished campaign's snapshot (the journal's or a report file's)."""
    names: Sequence[Mapping[str, Any]] = [d for d in rep.get("candidates") or () if isinstance(d, Mapping)]
    p = TuneProgress(((str(d.get("name")), int(d.get("tp") or 1)) for d in names), campaign=str(rep.get("campaign")))
    p.apply_report(rep)
    return p.snapshot()


__all__ = [
    "DONE",
    "DROPPED",
    "FAILED",
    "MEASURING",
    "NOT_MEASURED",
    "QUEUED",
    "SKIPPED",
    "STARTING",
    "CandidateView",
    "TuneProgress",
    "TuneSnapshot",
    "from_report",
]
