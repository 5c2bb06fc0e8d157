"""A tuning campaign as the dashboard shows it: every candidate's state and the step being
measured, the best so far, an ETA and the Pareto frontier, folded from the campaign's events
(:class:`~tui.ab.runner.ABEvent`, as :mod:`tui.ab.tune` emits them) and, at the end, its report.

:class:`TuneProgress` takes the events; :meth:`TuneProgress.snapshot` is an immutable
:class:`TuneSnapshot` that the Tune screen renders. No Textual here.

Candidate states (the screen's words for the runner's): ``queued`` (not measured yet in this
round), ``starting`` (launched, waiting for ready), ``measuring`` (a capacity step: ``C=16``),
``done`` (measured), ``failed`` (did not start, or its benchmark failed), ``dropped`` (a clear
loser after a round), ``skipped`` (pre-flight, or the budget), ``not measured`` (the campaign
ended before it: a cancelled or partial campaign's report).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from tui.ab.runner import ABEvent
from tui.ab.tuneresult import pareto

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
    #: where the ETA comes from: ``measured`` (the mean of finished candidates) or ``estimated``
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
    started_at: float | None = None
    durations: list[float] = field(default_factory=list)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class TuneProgress:
    """Folds a campaign's events into :class:`TuneSnapshot`\\ s. ``candidates``: (name, tp) of
    each, in the campaign's order; ones first seen in an event are added. ``estimate_s``: the
    campaign's estimate of one round (before any candidate finished, the ETA is its share)."""

    def __init__(
        self, candidates: Iterable[tuple[str, int]] = (), *, campaign: str = "", estimate_s: float | None = None
    ) -> None:
        self.campaign = campaign
        self.estimate_s = estimate_s
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
        if c is not None:
            if kind == "launch":
                c.state, c.step, c.started_at = STARTING, "launching", ev.time
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
                self._finish(c, ev.time)
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
        self._finish(c, ev.time)
        self._frontier()

    def _finish(self, c: _Cand, t: float) -> None:
        if c.started_at is not None and t >= c.started_at:
            c.durations.append(t - c.started_at)
        c.started_at = None

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
        durs = [d for c in self._cands.values() for d in c.durations]
        live = [c for c in self._cands.values() if c.state not in FINISHED]
        if not live:
            return None, ""
        if durs:
            per, basis = sum(durs) / len(durs), "measured"
        elif self.estimate_s:
            n = sum(1 for c in self._cands.values() if c.state != SKIPPED) or 1
            per, basis = self.estimate_s / n, "estimated"
        else:
            return None, ""
        left = 0.0
        for c in live:
            spent = now - c.started_at if c.started_at is not None else 0.0
            left += max(0.0, per - spent)
        return left, basis

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
