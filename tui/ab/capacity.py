"""Capacity at an SLO: the highest concurrency whose benchmark level still meets the operator's
latency and per-user speed targets, and the single-user speed (the measuring core of a tuning
campaign; it ships to the GPU host: standard library only, Python >= 3.9).

**The SLO** is a list of terms ``METRIC:BOUND`` (:func:`parse_slo`):

* ``ttft_p50|p90|p99``, ``tpot_p50|p90|p99``, ``itl_p90|p99``, ``e2el_p90|p99``: an upper bound in
  ms on that statistic of the level (``p50`` is the median), read from the level summary's
  ``median_ttft_ms`` / ``p90_ttft_ms`` / ... keys (docs/benchmark-metrics.md §5);
* ``per_user_tok_s``: a lower bound on the output tokens/s each user gets, the summary's
  ``per_user_output_throughput`` (output throughput / concurrency, as ``vllm bench sweep
  plot_pareto`` counts it: it includes the wait for the first token).

A level meets the SLO (:func:`slo_check`) when every term holds, every request succeeded, and the
level ran to its end. A statistic the summary lacks (a percentile not asked for) is *unknown*,
which does not meet the SLO: the reason says which key is missing.

**The search** (:func:`find_capacity`), one benchmark level per step through the caller's
``measure(c)`` (a closed loop at concurrency ``c``):

1. ``C = 1`` first: it is also the single-user speed. When it misses the SLO, nothing more is
   measured: more users only add latency. The capacity is None and ``closest`` is that step.
2. Bracket: ``start`` (at least 2), then doubling, while each level meets the SLO and
   ``max_concurrency`` is not passed (the last bracket step is ``max_concurrency`` itself).
3. Bisect between the highest concurrency that met and the lowest that missed, until the gap is at
   most 10 % of the met value (at least 1).

Every step counts against ``max_steps`` (C = 1 included); no concurrency is measured twice. The
capacity is the highest concurrency measured that met the SLO. When none met, ``closest`` is the
step nearest to meeting it: the smallest worst ratio of measured value to bound over the terms
(bound to value for the lower bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

#: SLO metric -> (level summary key, unit, True for an upper bound)
SLO_METRICS: Dict[str, Tuple[str, str, bool]] = {
    "ttft_p50": ("median_ttft_ms", "ms", True),
    "ttft_p90": ("p90_ttft_ms", "ms", True),
    "ttft_p99": ("p99_ttft_ms", "ms", True),
    "tpot_p50": ("median_tpot_ms", "ms", True),
    "tpot_p90": ("p90_tpot_ms", "ms", True),
    "tpot_p99": ("p99_tpot_ms", "ms", True),
    "itl_p90": ("p90_itl_ms", "ms", True),
    "itl_p99": ("p99_itl_ms", "ms", True),
    "e2el_p90": ("p90_e2el_ms", "ms", True),
    "e2el_p99": ("p99_e2el_ms", "ms", True),
    "per_user_tok_s": ("per_user_output_throughput", "tok/s", False),
}

#: bisection stops when the gap between met and missed is at most this share of the met value
GAP = 0.10


@dataclass(frozen=True)
class SloTerm:
    """One bound: ``metric`` (a key of :data:`SLO_METRICS`) at most ``bound`` ms, or, for
    ``per_user_tok_s``, at least ``bound`` tok/s."""

    metric: str
    bound: float

    @property
    def key(self) -> str:
        """The level summary's key this term reads."""
        return SLO_METRICS[self.metric][0]

    @property
    def upper(self) -> bool:
        """True for an upper bound (latencies), False for the lower bound (per-user speed)."""
        return SLO_METRICS[self.metric][2]

    def __str__(self) -> str:
        return f"{self.metric}:{self.bound:g}"


def parse_slo(items: Sequence[str]) -> tuple[SloTerm, ...]:
    """``["ttft_p90:500", "tpot_p90:50", "per_user_tok_s:20"]`` (an item may hold several terms
    separated by spaces) → the terms; ValueError with one line naming the bad item."""
    out: List[SloTerm] = []
    seen: Dict[str, str] = {}
    for item in items:
        parts = str(item).split()
        if not parts:
            raise ValueError(f"SLO term {item!r}: empty; expected METRIC:BOUND, e.g. ttft_p90:500")
        for part in parts:
            name, sep, value = part.partition(":")
            if not sep or not name or not value:
                raise ValueError(f"SLO term {part!r}: expected METRIC:BOUND, e.g. ttft_p90:500")
            if name not in SLO_METRICS:
                raise ValueError(
                    f"SLO term {part!r}: unknown metric {name!r}; expected one of {', '.join(SLO_METRICS)}"
                )
            try:
                bound = float(value)
            except ValueError:
                raise ValueError(f"SLO term {part!r}: {value!r} is not a number") from None
            if not bound > 0 or math.isinf(bound):
                raise ValueError(f"SLO term {part!r}: the bound must be a finite number > 0")
            if name in seen:
                raise ValueError(f"SLO term {part!r}: {name} is already bounded by {seen[name]!r}")
            seen[name] = part
            out.append(SloTerm(name, bound))
    if not out:
        raise ValueError("SLO: no terms given; expected METRIC:BOUND, e.g. ttft_p90:500 tpot_p90:50")
    return tuple(out)


def _number(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _level_problem(summary: Mapping[str, Any]) -> Optional[str]:
    """Why a level cannot count as meeting any SLO (failed requests, cut short), or None."""
    completed = _number(summary.get("completed")) or 0
    failed = _number(summary.get("failed")) or 0
    if failed:
        return f"{int(failed)} of {int(completed + failed)} requests failed"
    if not completed:
        return "no request completed"
    if summary.get("partial"):
        return "the level was cut short (partial)"
    return None


def slo_check(summary: Mapping[str, Any], slo: Sequence[SloTerm]) -> tuple[bool, list[str]]:
    """Whether a level summary (as the benchmark writes it) meets every term, and one reason per
    term it violates or cannot judge (plus one for failed requests or a level cut short)."""
    reasons: List[str] = []
    problem = _level_problem(summary)
    if problem:
        reasons.append(problem)
    for t in slo:
        key, unit, upper = SLO_METRICS[t.metric]
        v = _number(summary.get(key))
        if v is None:
            reasons.append(f"{t.metric}: unknown ({key} is not in the level summary)")
        elif upper and v > t.bound:
            reasons.append(f"{t.metric} {v:.1f} {unit} > {t.bound:g} {unit}")
        elif not upper and v < t.bound:
            reasons.append(f"{t.metric} {v:.1f} {unit} < {t.bound:g} {unit}")
    return not reasons, reasons


def slo_excess(summary: Mapping[str, Any], slo: Sequence[SloTerm]) -> float:
    """How far a level is from meeting the SLO: the worst ratio of value to bound over the terms
    (bound to value for the lower bound); <= 1 meets every term, ``inf`` for a term it cannot judge
    or a level with failed requests."""
    if _level_problem(summary):
        return math.inf
    worst = 0.0
    for t in slo:
        v = _number(summary.get(t.key))
        if v is None:
            return math.inf
        if t.upper:
            r = v / t.bound
        else:
            r = t.bound / v if v > 0 else math.inf
        worst = max(worst, r)
    return worst


@dataclass
class CapacityStep:
    """One measured level: its concurrency, whether it met the SLO and why not, and its summary."""

    concurrency: int
    met: bool
    reasons: List[str]
    summary: Dict[str, Any]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "met": self.met,
            "reasons": list(self.reasons),
            "summary": dict(self.summary),
        }

    @classmethod
    def from_dict(cls, d: Any, where: str = "step") -> CapacityStep:
        if not isinstance(d, Mapping):
            raise ValueError(f"{where}: expected an object, got {type(d).__name__}")
        c = d.get("concurrency")
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise ValueError(f"{where}.concurrency: expected a whole number >= 1, got {c!r}")
        met = d.get("met")
        if not isinstance(met, bool):
            raise ValueError(f"{where}.met: expected true or false, got {met!r}")
        reasons = d.get("reasons", [])
        if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
            raise ValueError(f"{where}.reasons: expected a list of strings")
        summary = d.get("summary", {})
        if not isinstance(summary, Mapping):
            raise ValueError(f"{where}.summary: expected an object, got {type(summary).__name__}")
        return cls(c, met, list(reasons), dict(summary))


def _opt_float(d: Mapping[str, Any], key: str) -> Optional[float]:
    v = d.get(key)
    if v is None:
        return None
    n = _number(v)
    if n is None:
        raise ValueError(f"capacity result.{key}: expected a number or null, got {v!r}")
    return n


@dataclass
class CapacityResult:
    """What :func:`find_capacity` found (docs in the module docstring)."""

    #: highest concurrency measured that met the SLO (None: not even C=1)
    capacity: Optional[int]
    #: per-user output tok/s at C=1
    single_user_tok_s: Optional[float]
    #: every measured level, in the order measured
    steps: List[CapacityStep] = field(default_factory=list)
    #: when nothing met: the step nearest to meeting it
    closest: Optional[CapacityStep] = None
    #: output tok/s of the capacity step
    throughput_at_capacity: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        return {
            "capacity": self.capacity,
            "single_user_tok_s": self.single_user_tok_s,
            "throughput_at_capacity": self.throughput_at_capacity,
            "steps": [s.to_dict() for s in self.steps],
            "closest": self.closest.to_dict() if self.closest is not None else None,
        }

    @classmethod
    def from_dict(cls, d: Any) -> CapacityResult:
        """The result :meth:`to_dict` wrote; ValueError naming the bad field."""
        if not isinstance(d, Mapping):
            raise ValueError(f"capacity result: expected an object, got {type(d).__name__}")
        cap = d.get("capacity")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(f"capacity result.capacity: expected a whole number >= 1 or null, got {cap!r}")
        steps = d.get("steps", [])
        if not isinstance(steps, list):
            raise ValueError("capacity result.steps: expected a list")
        closest = d.get("closest")
        return cls(
            capacity=cap,
            single_user_tok_s=_opt_float(d, "single_user_tok_s"),
            steps=[CapacityStep.from_dict(s, f"capacity result.steps[{i}]") for i, s in enumerate(steps)],
            closest=CapacityStep.from_dict(closest, "capacity result.closest") if closest is not None else None,
            throughput_at_capacity=_opt_float(d, "throughput_at_capacity"),
        )


def _gap_closed(met: int, missed: int) -> bool:
    return missed - met <= max(1.0, GAP * met)


async def find_capacity(
    measure: Callable[[int], Awaitable[Mapping[str, Any]]],
    slo: Sequence[SloTerm],
    *,
    start: int = 1,
    max_concurrency: int = 1024,
    max_steps: int = 8,
    on_step: Optional[Callable[[CapacityStep], None]] = None,
) -> CapacityResult:
    """The highest concurrency that meets ``slo``: C = 1, then bracketing from ``start`` by
    doubling, then bisection (the rules are in the module docstring). ``measure(c)`` runs one
    benchmark level at concurrency ``c`` and returns its summary; ``on_step`` sees each step as it
    is measured. ValueError for a bad ``start``, ``max_concurrency`` or ``max_steps``."""
    for name, v in (("start", start), ("max_concurrency", max_concurrency), ("max_steps", max_steps)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"find_capacity {name}={v!r}: expected a whole number >= 1")
    steps: List[CapacityStep] = []
    by_c: Dict[int, CapacityStep] = {}

    async def step(c: int) -> CapacityStep:
        summary = dict(await measure(c))
        met, reasons = slo_check(summary, slo)
        s = CapacityStep(c, met, reasons, summary)
        steps.append(s)
        by_c[c] = s
        if on_step is not None:
            on_step(s)
        return s

    first = await step(1)
    single = _number(first.summary.get("per_user_output_throughput"))
    met: Optional[int] = 1 if first.met else None
    missed: Optional[int] = None if first.met else 1
    # bracket: start (>= 2), doubling, the last one max_concurrency itself
    c = min(max(2, start), max_concurrency)
    while met is not None and missed is None and len(steps) < max_steps and c > met:
        s = await step(c)
        if s.met:
            met = c
            c = min(c * 2, max_concurrency)
        else:
            missed = c
    # bisect
    while met is not None and missed is not None and len(steps) < max_steps and not _gap_closed(met, missed):
        mid = (met + missed) // 2
        if mid in by_c or mid <= met:
            break
        s = await step(mid)
        if s.met:
            met = mid
        else:
            missed = mid
    cap_step = by_c[met] if met is not None else None
    closest = None
    if cap_step is None and steps:
        closest = min(steps, key=lambda s: slo_excess(s.summary, slo))
    return CapacityResult(
        capacity=met,
        single_user_tok_s=single,
        steps=steps,
        closest=closest,
        throughput_at_capacity=_number(cap_step.summary.get("output_throughput")) if cap_step else None,
    )
