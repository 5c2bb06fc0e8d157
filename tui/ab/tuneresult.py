"""A tuning campaign's candidates and its result (:mod:`tunedeck.ab.tune` runs the campaign).

:class:`Cand` is a candidate as the runner keeps it (its state, measurements, launches and
findings; JSON in the job's ``state.json``), :func:`build_report` the campaign's result
(``report.json``, ``tune --json FILE``) and :func:`partial_report` the result of a campaign whose
job ended without writing one (its process killed more often than a follow restarts it): built
from the ``state.json`` it left, every finished measurement kept, the candidates it did not
measure named with why.

Stdlib only, Python 3.9: this ships in the host-side runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from tunedeck.ab.capacity import CapacityResult, parse_slo, slo_excess
from tunedeck.ab.confdiff import config_diff
from tunedeck.ab.ops import ProfileInfo
from tunedeck.util.safety import redact_argv, redact_env

#: the noise band (%) when a candidate's own measurements say less: the capacity search's
#: bisection stops within ~10 % of the capacity
DEFAULT_NOISE_PCT = 10.0
#: states a candidate can be in
PENDING, RUNNING, MEASURED, DROPPED, SKIPPED, FAILED = "pending", "running", "measured", "dropped", "skipped", "failed"


def noise_pct_of(spec: Mapping[str, Any]) -> float:
    """The campaign's least noise band (%)."""
    return float(spec.get("noise_pct") or DEFAULT_NOISE_PCT)


def repeats_max_of(spec: Mapping[str, Any]) -> int:
    return max(1, int(spec.get("repeats_max") or 1))


def seconds_of(spec: Mapping[str, Any], key: str) -> Optional[float]:
    """``budget_s`` or ``estimate_s`` of the spec (None: not given)."""
    v = spec.get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass
class Cand:
    """A candidate as the runner keeps it (JSON in the state file and the report)."""

    name: str
    changes: Dict[str, Any]
    info: Optional[ProfileInfo]
    tp: int = 1
    state: str = PENDING
    measurements: List[Dict[str, Any]] = field(default_factory=list)
    launches: List[Dict[str, Any]] = field(default_factory=list)
    findings: List[str] = field(default_factory=list)
    #: seconds each finished measurement took (launch to stop), for the budget
    durations: List[float] = field(default_factory=list)

    def to_state(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "changes": dict(self.changes),
            "info": self.info.to_json() if self.info else None,
            "tp": self.tp,
            "state": self.state,
            "measurements": self.measurements,
            "launches": self.launches,
            "findings": self.findings,
            "durations": self.durations,
        }

    @classmethod
    def from_state(cls, d: Mapping[str, Any]) -> "Cand":
        info = d.get("info")
        return cls(
            name=str(d["name"]),
            changes=dict(d.get("changes") or {}),
            info=ProfileInfo.from_json(info) if isinstance(info, Mapping) else None,
            tp=int(d.get("tp") or 1),
            state=str(d.get("state") or PENDING),
            measurements=list(d.get("measurements") or []),
            launches=list(d.get("launches") or []),
            findings=[str(x) for x in d.get("findings") or []],
            durations=[float(x) for x in d.get("durations") or []],
        )

    # ------------------------------------------------------------------ figures
    def results(self) -> List[CapacityResult]:
        return [CapacityResult.from_dict(m) for m in self.measurements]

    def capacities(self) -> List[int]:
        return [r.capacity for r in self.results() if r.capacity is not None]

    def _mean(self, vals: Sequence[Optional[float]]) -> Optional[float]:
        got = [float(v) for v in vals if isinstance(v, (int, float))]
        return sum(got) / len(got) if got else None

    def capacity(self) -> Optional[float]:
        """The mean capacity over the measurements that met the SLO somewhere (None: none did)."""
        return self._mean(self.capacities())

    def throughput(self) -> Optional[float]:
        return self._mean([r.throughput_at_capacity for r in self.results()])

    def single_user(self) -> Optional[float]:
        return self._mean([r.single_user_tok_s for r in self.results()])

    def startup_s(self) -> Optional[float]:
        return self._mean([la.get("startup_s") for la in self.launches if la.get("ready")])

    def noise_band_pct(self, floor: float) -> Optional[float]:
        """The larger of the search's resolution, the spread of the measurements and ``floor`` (%)."""
        if not self.measurements:
            return None
        band = floor
        for r in self.results():
            if r.capacity is None:
                continue
            above = [s.concurrency for s in r.steps if not s.met and s.concurrency > r.capacity]
            if above:
                band = max(band, (min(above) - r.capacity) / r.capacity * 100.0)
        caps = self.capacities()
        if len(caps) > 1:
            mean = sum(caps) / len(caps)
            band = max(band, (max(caps) - min(caps)) / 2.0 / mean * 100.0)
        return band

    def rank_key(self) -> Tuple[float, float, float]:
        cap = self.capacity()
        return (cap if cap is not None else -1.0, self.throughput() or 0.0, self.single_user() or 0.0)


def rank(cands: Sequence[Cand]) -> List[Cand]:
    """Candidates with a measurement, best first (capacity, then output tok/s at capacity, then
    single-user tok/s)."""
    got = [c for c in cands if c.measurements and c.state in (MEASURED, DROPPED)]
    return sorted(got, key=lambda c: c.rank_key(), reverse=True)


def settle(cands: Sequence[Cand], round_: int) -> List[str]:
    """After the process that ran them ended: a candidate it was measuring is pending again (or
    measured, when it has earlier measurements), its unfinished launch of this round marked
    ``interrupted``. Returns the names of the candidates interrupted."""
    out = []
    for c in cands:
        if c.state == RUNNING:
            out.append(c.name)
            c.state = PENDING if not c.measurements else MEASURED
            for la in c.launches:
                if la.get("round") == round_ and not la.get("done"):
                    la["interrupted"] = True
    return out


def step_findings(result: CapacityResult) -> List[str]:
    """Validity findings of a measurement's steps (a busy client machine, a timeline rule), one
    line per finding with the concurrencies it was seen at."""
    seen: Dict[str, List[int]] = {}
    for s in result.steps:
        sm = s.summary
        found = []
        if sm.get("machine_busy"):
            found.append("the client machine was busy (the figure may be low)")
        if sm.get("client_bound"):
            found.append("the benchmark client was the limit")
        val = sm.get("validity")
        if isinstance(val, list) and val:
            found.append("validity: " + ", ".join(str(f.get("rule")) for f in val if isinstance(f, Mapping)))
        for f in found:
            seen.setdefault(f, []).append(s.concurrency)
    return [f"C={', '.join(str(c) for c in cs)}: {f}" for f, cs in seen.items()]


def pareto(points: Mapping[str, Tuple[float, float]]) -> List[str]:
    """Names whose (tok/s per user, tok/s per GPU) no other point beats on both (ties kept)."""
    out = []
    for n, (u, g) in points.items():
        beaten = any((u2 >= u and g2 >= g) and (u2 > u or g2 > g) for m, (u2, g2) in points.items() if m != n)
        if not beaten:
            out.append(n)
    return out


def _r(v: Optional[float], nd: int = 1) -> Optional[float]:
    return None if v is None else round(v, nd)


def build_report(
    spec: Mapping[str, Any],
    cands: Sequence[Cand],
    *,
    status: str,
    error: Optional[str],
    host: str,
    spent_s: float,
    resumes: int,
    warnings: Sequence[str] = (),
    left_running: Sequence[str] = (),
) -> Dict[str, Any]:
    """The campaign's result (the job's report.json, ``tune --json FILE``): candidates with their
    figures, the ranking, the Pareto frontier, the winner and its configuration diff."""
    slo = parse_slo([str(t) for t in spec["slo"]])
    noise_pct = noise_pct_of(spec)
    ranked = rank(cands)
    place = {c.name: i + 1 for i, c in enumerate(ranked)}
    winner = next((c for c in ranked if c.capacity() is not None), None)
    points: Dict[str, Tuple[float, float]] = {}
    out = []
    for c in cands:
        cap = c.capacity()
        tput = c.throughput()
        per_gpu = tput / c.tp if tput is not None and c.tp else None
        per_user = tput / cap if tput is not None and cap else None
        if per_gpu is not None and per_user is not None:
            points[c.name] = (per_user, per_gpu)
        results = c.results()
        info = c.info
        out.append(
            {
                "name": c.name,
                "changes": c.changes,
                "state": c.state,
                "rank": place.get(c.name),
                "capacity": None if cap is None else round(cap),
                "capacities": c.capacities(),
                "single_user_tok_s": _r(c.single_user()),
                "throughput_at_capacity": _r(tput),
                "tok_s_per_gpu": _r(per_gpu),
                "tok_s_per_user": _r(per_user),
                "startup_s": _r(c.startup_s()),
                "startup_phases": next((la.get("timeline") for la in c.launches if la.get("ready")), []),
                "noise_band_pct": _r(c.noise_band_pct(noise_pct)),
                "steps": results[-1].to_dict()["steps"] if results else [],
                "measurements": c.measurements,
                "launches": c.launches,
                "findings": c.findings,
                "tp": c.tp,
                "engine": info.engine if info else None,
                "argv": redact_argv(info.argv) if info else [],
                "env": redact_env(info.env) if info else {},
            }
        )
    front = pareto(points)
    for d in out:
        d["pareto"] = d["name"] in front
    closest = None
    if winner is None:
        best = None
        for c in cands:
            for r in c.results():
                if r.closest is not None:
                    x = slo_excess(r.closest.summary, slo)
                    if best is None or x < best[2]:
                        best = (c.name, r.closest, x)
        if best is not None:
            closest = {"name": best[0], "concurrency": best[1].concurrency, "reasons": best[1].reasons}
    diff: List[Dict[str, Any]] = []
    base = cands[0] if cands else None
    if winner is not None and base is not None and base.info and winner.info and winner is not base:
        diff = [
            {"kind": ch.kind, "name": ch.name, "base": ch.a, "winner": ch.b, "text": ch.text}
            for ch in config_diff(base.info.argv, base.info.env, winner.info.argv, winner.info.env)
        ]
    return {
        "kind": "tune",
        "campaign": str(spec["campaign"]),
        "status": status,
        "error": error,
        "host": host,
        "base": str(spec.get("base") or (base.name if base else "")),
        "slo": [str(t) for t in spec["slo"]],
        "workload": spec["workload"],
        "budget_s": seconds_of(spec, "budget_s"),
        "estimate_s": seconds_of(spec, "estimate_s"),
        "spent_s": spent_s,
        "repeats_max": repeats_max_of(spec),
        "noise_pct": noise_pct,
        "resumes": resumes,
        "candidates": out,
        "ranking": [c.name for c in ranked],
        "pareto": front,
        "winner": winner.name if winner else None,
        "closest": closest,
        "winner_diff": diff,
        "not_measured": [c.name for c in cands if c.state == PENDING],
        "warnings": list(warnings),
        "left_running": list(left_running),
    }


def partial_report(
    spec: Mapping[str, Any],
    state: Mapping[str, Any],
    *,
    why: str,
    status: str = "partial",
    left_running: Sequence[str] = (),
) -> Optional[Dict[str, Any]]:
    """The result of a campaign whose job ended without its report, from the ``state.json`` it
    left (``why``: how it ended): every finished candidate as it stands, the ones it did not
    measure (the one it was measuring, the ones not reached, a leader's repeat) each with a
    finding that says so, ``status`` ``partial`` (``cancelled`` for a cancel). None when it
    finished no candidate (nothing was measured and none failed)."""
    cands = [Cand.from_state(c) for c in state["candidates"]]
    round_ = int(state.get("round") or 0)
    interrupted = settle(cands, round_)
    if not any(c.measurements or c.state == FAILED for c in cands):
        return None
    for c in cands:
        if c.state == PENDING:
            cut = sum(1 for la in c.launches if la.get("interrupted"))
            c.findings.append(
                f"not measured: its measurement was cut short {cut} time(s) by the end of the campaign's process"
                if c.name in interrupted or cut
                else "not measured: the campaign's process ended before it was reached"
            )
        elif c.state == MEASURED and round_ and len(c.measurements) <= round_:
            c.findings.append(f"measurement {round_ + 1} not made: the campaign's process ended first")
    todo = [c.name for c in cands if c.state == PENDING]
    done = sum(1 for c in cands if c.measurements)
    told = f"{why}; {done} of {sum(1 for c in cands if c.state != SKIPPED)} candidate(s) measured, read from the job folder"
    if todo:
        told += f"; not measured: {', '.join(todo)}"
    return build_report(
        spec,
        cands,
        status=status,
        error=told,
        host=str(spec.get("host_label") or "?"),
        spent_s=float(state.get("spent_s") or 0.0),
        resumes=int(state.get("resumes") or 0),
        warnings=[str(w) for w in state.get("warnings") or []],
        left_running=left_running,
    )


__all__ = [
    "DEFAULT_NOISE_PCT",
    "Cand",
    "build_report",
    "pareto",
    "partial_report",
    "rank",
    "settle",
    "step_findings",
]
