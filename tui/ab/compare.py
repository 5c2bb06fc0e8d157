"""Compare two servers' benchmark results the way an operator does by hand.

Pure functions: two :class:`~tunedeck.ab.sides.Side` objects (each one or more repeats of
benchmark summaries in ``vllm bench serve`` key names, plus what was run)
give a :class:`Comparison` with one :class:`Row` per metric, the
configuration difference (:mod:`tunedeck.ab.confdiff`) and warnings (:mod:`tunedeck.ab.warnings`).
Renderers are in :mod:`tunedeck.ab.render`.

Rows (``s`` = the plan's lowest concurrency, normally C=1; ``p`` = the
highest, normally C=128):

* single-stream output tok/s (``output_throughput`` at s) and single-stream
  decode tok/s (``1000 / median_tpot_ms`` at s), higher is better;
* output tok/s at every intermediate concurrency (sweeps), higher is better;
* peak output tok/s (``output_throughput`` at p), higher is better;
* TTFT p50/p99, TPOT median and ITL p99 at s and at p, lower is better;
* server startup time (launch to ready), lower is better;
* speculative acceptance rate (``spec_decode_acceptance_rate``) and length
  (``spec_decode_acceptance_length``), and the prefix cache hit rate
  (``prefix_cache_hit_rate``), from the server's counters over the level, where present;
* failed requests (all levels), lower is better.

Delta = (mean B - mean A) / |mean A| x 100.

Noise band (when a difference is called "within noise"):

* one repeat on either side: a fixed threshold, ``DEFAULT_NOISE_PCT`` (3 %)
  for throughputs, medians and TPOT, ``TAIL_NOISE_PCT`` (10 %) for p99 rows
  and ``STARTUP_NOISE_PCT`` (10 %) for startup time; ``noise_pct=`` scales
  the first and leaves the others at their ratio to it;
* two or more repeats on both sides: the 95 % t interval (Welch) of the
  difference of the means, ``100 x t(0.975, df) x sqrt(sA²/nA + sB²/nB) / |mean A|`` %
  (sample standard deviations, Welch-Satterthwaite df), but never below
  ``MIN_NOISE_PCT`` (1 %). With 3 + 3 repeats t is about 2.8, not 2.

Percentile rows need the samples to hold that percentile: p99 needs at least
100 requests at the level (``100 / (100 - p)``; ITL p99 counts token gaps) on
every repeat of both sides, else the row says how many were measured instead of
a verdict (plan ``quick``'s 5 requests at C=1 make "p99" the maximum).

The headline (the throughput rows) never rests on a level whose client was the
limit ("client bound") or whose client machine was busy, on either side: such
a row keeps its numbers but the headline says it was not judged.

Verdicts read as an operator writes them: ``B +18%`` (better),
``B −7% (worse)``, ``B −20% (better)`` for a lower-is-better metric,
``within noise``, ``n/a`` when either side lacks the number. A per-request
percentile row over fewer requests than it needs (p99: 100, p90: 10) gives no
verdict: ``p99 needs >= 100 requests at this level; N measured``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional

from tunedeck.ab.confdiff import MINUS, ConfigChange, config_diff
from tunedeck.ab.sides import Side, SideRun, summary_number
from tunedeck.ab.warnings import comparison_warnings, unreliable_levels, validity_differences

DEFAULT_NOISE_PCT = 3.0
TAIL_NOISE_PCT = 10.0
STARTUP_NOISE_PCT = 10.0
MIN_NOISE_PCT = 1.0

# ---------------------------------------------------------------------- inputs


# ---------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class Stat:
    mean: float
    spread: float | None  # sample standard deviation (n >= 2)
    n: int
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Iterable[float]) -> "Stat | None":
        vals = tuple(float(v) for v in values if v is not None and math.isfinite(float(v)))
        if not vals:
            return None
        sd = statistics.stdev(vals) if len(vals) >= 2 else None
        return cls(statistics.fmean(vals), sd, len(vals), vals)


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    unit: str
    better: str  # "higher" | "lower"
    a: Stat | None
    b: Stat | None
    delta_pct: float | None
    noise_pct: float
    outcome: str  # "better" | "worse" | "noise" | "same" | "na"
    verdict: str
    concurrency: int | None = None
    group: str = ""


@dataclass(frozen=True)
class Comparison:
    a: str  # display names, e.g. "A (sglang-base)"
    b: str
    a_profile: str
    b_profile: str
    rows: tuple[Row, ...]
    config_diff: tuple[ConfigChange, ...]
    warnings: tuple[str, ...]
    headline: str
    repeats: tuple[int, int]
    noise_method: str
    meta: Mapping[str, Any] = field(default_factory=dict)

    def row(self, key: str) -> Row | None:
        for r in self.rows:
            if r.key == key:
                return r
        return None

    @property
    def winner(self) -> str | None:
        """'A', 'B' or None (no clear winner), from the headline rows."""
        return self.meta.get("winner")


# ---------------------------------------------------------------------- helpers


def _decode_tok_s(summary: Mapping[str, Any] | None) -> float | None:
    tpot = summary_number(summary, "median_tpot_ms")
    if tpot is None or tpot <= 0:
        return None
    return 1000.0 / tpot


def _acceptance(summary: Mapping[str, Any] | None, run: SideRun) -> float | None:
    # the level's counters (%, like vllm bench serve); else the % read after the side's run
    v = summary_number(summary, "spec_decode_acceptance_rate")
    if v is None:
        v = run.acceptance_rate
    return v


def _pct(rate: float | None) -> float | None:
    return None if rate is None else rate * 100.0


def fmt_pct(delta: float) -> str:
    mag = abs(delta)
    s = f"{mag:.0f}" if mag >= 10 else f"{mag:.1f}"
    sign = "+" if delta > 0 else (MINUS if delta < 0 else "\u00b1")
    return f"{sign}{s}%"


#: t(0.975, df) for df = 1..30 (two-sided 95 %); beyond, the normal 1.96
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: float) -> float:
    """The two-sided 95 % t quantile for ``df`` degrees of freedom (fractional df rounds down)."""
    if df < 1:
        return _T975[0]
    k = int(df)
    return _T975[k - 1] if k <= len(_T975) else 1.96


def noise_band(a: Stat, b: Stat, default_pct: float) -> float:
    """Half-width (% of A's mean) of the 95 % Welch t interval of B - A; the fixed
    ``default_pct`` without two repeats on each side."""
    if a.n >= 2 and b.n >= 2 and a.spread is not None and b.spread is not None and a.mean:
        va, vb = a.spread**2 / a.n, b.spread**2 / b.n
        se = math.sqrt(va + vb)
        if se == 0:
            return MIN_NOISE_PCT
        df = (va + vb) ** 2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))
        return max(MIN_NOISE_PCT, 100.0 * t975(df) * se / abs(a.mean))
    return default_pct


def min_samples(pct: float) -> int:
    """Samples needed before percentile ``pct`` is more than the maximum: ``100 / (100 - pct)``."""
    return max(1, math.ceil(100.0 / (100.0 - pct) - 1e-9))


def _p_name(pct: float) -> str:
    return f"p{pct:g}"


def judge(a: Stat | None, b: Stat | None, better: str, default_noise: float) -> tuple[float | None, float, str, str]:
    """(delta %, noise %, outcome, verdict text) for one row."""
    if a is None or b is None:
        which = "A" if a is None and b is not None else "B" if b is None and a is not None else ""
        return None, default_noise, "na", f"n/a (no {which} value)" if which else "n/a"
    noise = noise_band(a, b, default_noise)
    if a.mean == 0:
        if b.mean == 0:
            return 0.0, noise, "same", "same"
        return None, noise, "na", "n/a (A is 0)"
    delta = (b.mean - a.mean) / abs(a.mean) * 100.0
    if abs(delta) <= noise:
        return delta, noise, "noise", "within noise"
    improved = (delta > 0) == (better == "higher")
    text = f"B {fmt_pct(delta)}"
    if not improved:
        text += " (worse)"
    elif better == "lower":
        text += " (better)"
    return delta, noise, "better" if improved else "worse", text


def judge_count(a: Stat | None, b: Stat | None) -> tuple[float | None, float, str, str]:
    """Counts where fewer is better (failed requests): any difference matters."""
    if a is None or b is None:
        return None, 0.0, "na", "n/a"
    diff = b.mean - a.mean
    if diff == 0:
        return 0.0, 0.0, "same", "same"
    delta = diff / a.mean * 100.0 if a.mean else None
    n = f"{abs(diff):g}"
    if diff > 0:
        return delta, 0.0, "worse", f"B +{n} (worse)"
    return delta, 0.0, "better", f"B {MINUS}{n} (better)"


# ---------------------------------------------------------------------- config diff


# ---------------------------------------------------------------------- warnings


# ---------------------------------------------------------------------- rows


#: a row's figure from one level's summary (None for run-wide rows) and its run
StatFn = Callable[[Optional[Mapping[str, Any]], "SideRun"], Optional[float]]


def _collect(side: Side, c: int | None, fn: StatFn) -> Stat | None:
    vals: list[float] = []
    for run in side.runs:
        if c is None:
            v = fn(None, run)
        else:
            lv = run.level(c)
            if lv is None:
                continue
            v = fn(lv.summary, run)
        if v is not None:
            vals.append(v)
    return Stat.of(vals)


def compare(a: Side, b: Side, *, noise_pct: float = DEFAULT_NOISE_PCT) -> Comparison:
    """Compare B against A."""
    scale = noise_pct / DEFAULT_NOISE_PCT if DEFAULT_NOISE_PCT else 1.0
    tail = TAIL_NOISE_PCT * scale
    startup_noise = STARTUP_NOISE_PCT * scale
    cs = sorted(set(a.concurrencies()) | set(b.concurrencies()))
    rows: list[Row] = []

    def add(
        key: str,
        label: str,
        unit: str,
        better: str,
        c: int | None,
        fn: StatFn,
        noise: float,
        group: str,
        count: bool = False,
        pct: float | None = None,
        samples: StatFn | None = None,
    ) -> None:
        sa, sb = _collect(a, c, fn), _collect(b, c, fn)
        if sa is None and sb is None:
            return
        if count:
            delta, band, outcome, verdict = judge_count(sa, sb)
        else:
            delta, band, outcome, verdict = judge(sa, sb, better, noise)
        if pct is not None and samples is not None and outcome != "na":
            need = min_samples(pct)
            measured = _fewest(a, c, samples), _fewest(b, c, samples)
            known = [n for n in measured if n is not None]
            if known and min(known) < need:
                what = "token gaps" if "ITL" in label else "requests"
                delta, outcome = None, "na"
                verdict = f"{_p_name(pct)} needs >= {need} {what} at this level; {min(known)} measured"
        rows.append(Row(key, label, unit, better, sa, sb, delta, band, outcome, verdict, c, group))

    def metric(key: str) -> StatFn:
        return lambda s, run: summary_number(s, key)

    def requests(s: Mapping[str, Any] | None, run: SideRun) -> float | None:
        return summary_number(s, "completed")

    def gaps(s: Mapping[str, Any] | None, run: SideRun) -> float | None:
        out, done = summary_number(s, "total_output_tokens"), summary_number(s, "completed")
        return None if out is None or done is None else max(0.0, out - done)

    if cs:
        lo, hi = cs[0], cs[-1]
        # the lowest level is single-stream only when it is C=1 (a plan may start higher)
        stream = "Single-stream" if lo == 1 else "Per-stream"
        add(
            "single_output_tok_s",
            f"Single-stream output tok/s (C={lo})" if lo == 1 else f"Output tok/s (C={lo})",
            "tok/s",
            "higher",
            lo,
            metric("output_throughput"),
            noise_pct,
            "throughput",
        )
        add(
            "single_decode_tok_s",
            f"{stream} decode tok/s (1000/median TPOT, C={lo})",
            "tok/s",
            "higher",
            lo,
            lambda s, run: _decode_tok_s(s),
            noise_pct,
            "throughput",
        )
        for c in cs[1:-1]:
            add(
                f"output_tok_s_c{c}",
                f"Output tok/s (C={c})",
                "tok/s",
                "higher",
                c,
                metric("output_throughput"),
                noise_pct,
                "throughput",
            )
        if hi != lo:
            add(
                "peak_output_tok_s",
                f"Peak output tok/s (C={hi})",
                "tok/s",
                "higher",
                hi,
                metric("output_throughput"),
                noise_pct,
                "throughput",
            )
        for c in [lo, hi] if hi != lo else [lo]:
            add(
                f"ttft_p50_ms_c{c}",
                f"TTFT p50 (ms, C={c})",
                "ms",
                "lower",
                c,
                metric("median_ttft_ms"),
                noise_pct,
                "latency",
            )
            add(
                f"ttft_p99_ms_c{c}",
                f"TTFT p99 (ms, C={c})",
                "ms",
                "lower",
                c,
                metric("p99_ttft_ms"),
                tail,
                "latency",
                pct=99.0,
                samples=requests,
            )
            add(
                f"tpot_median_ms_c{c}",
                f"TPOT median (ms, C={c})",
                "ms",
                "lower",
                c,
                metric("median_tpot_ms"),
                noise_pct,
                "latency",
            )
            add(
                f"itl_p99_ms_c{c}",
                f"ITL p99 (ms, per event, C={c})",
                "ms",
                "lower",
                c,
                metric("p99_itl_ms"),
                tail,
                "latency",
                pct=99.0,
                samples=gaps,
            )
        add(
            "spec_acceptance_pct",
            f"Spec acceptance rate (%, C={hi})",
            "%",
            "higher",
            hi,
            _acceptance,
            noise_pct,
            "speculative",
        )
        add(
            "prefix_cache_hit_pct",
            f"Prefix cache hit rate (%, C={hi})",
            "%",
            "higher",
            hi,
            lambda s, run: _pct(summary_number(s, "prefix_cache_hit_rate")),
            noise_pct,
            "server counters",
        )
        add(
            "spec_accept_length",
            f"Spec acceptance length (tokens per step, C={hi})",
            "tok/step",
            "higher",
            hi,
            metric("spec_decode_acceptance_length"),
            noise_pct,
            "speculative",
        )
    add("startup_s", "Startup time (s)", "s", "lower", None, lambda s, run: run.startup_s, startup_noise, "server")

    def failed_total(_s: Mapping[str, Any] | None, run: SideRun) -> float | None:
        if not run.levels:
            return None
        return sum(summary_number(lv.summary, "failed") or 0 for lv in run.levels)

    add("failed_requests", "Failed requests (all levels)", "", "lower", None, failed_total, 0.0, "server", count=True)

    warnings = comparison_warnings(a, b)
    diff = config_diff(a.argv, a.env, b.argv, b.env)
    unreliable: dict[int, list[str]] = {}
    for side in (a, b):
        for c, why in unreliable_levels(side).items():
            unreliable.setdefault(c, []).append(f"{side.label} {why}")
    headline, winner = _headline(a, b, rows, {c: "; ".join(w) for c, w in unreliable.items()})
    differs = validity_differences(a, b)
    if differs:
        headline += " Validity differs: " + "; ".join(differs) + "."
    multi = len(a.runs) >= 2 and len(b.runs) >= 2
    method = (
        f"noise band: 95% t interval (Welch) of the difference over {len(a.runs)}+{len(b.runs)} repeats "
        f"(at least {MIN_NOISE_PCT:g}%); p99 rows need >= {min_samples(99.0)} requests per level"
        if multi
        else f"noise band: single run, fixed {noise_pct:g}% ({tail:g}% for p99 rows, "
        f"{startup_noise:g}% for startup); use --repeats for a measured band"
    )
    return Comparison(
        a=a.name,
        b=b.name,
        a_profile=a.profile,
        b_profile=b.profile,
        rows=tuple(rows),
        config_diff=tuple(diff),
        warnings=tuple(warnings),
        headline=headline,
        repeats=(len(a.runs), len(b.runs)),
        noise_method=method,
        meta={"winner": winner},
    )


_KEY_ROWS = ("single_output_tok_s", "single_decode_tok_s", "peak_output_tok_s")


def _fewest(side: Side, c: int | None, fn: StatFn) -> int | None:
    """The smallest sample count over ``side``'s repeats at level ``c`` (None: none known)."""
    st = _collect(side, c, fn)
    return None if st is None else int(min(st.values))


def _headline(a: Side, b: Side, rows: list[Row], unreliable: Mapping[int, str]) -> tuple[str, str | None]:
    """The one-line verdict; ``unreliable``: concurrency -> why its level carries none."""
    skipped = [r for r in rows if r.key in _KEY_ROWS and r.outcome != "na" and r.concurrency in unreliable]
    note = "".join(
        f" Not judged: {r.label.split(' (')[0].lower()} at C={r.concurrency} ({unreliable[r.concurrency or 0]})."
        for r in skipped
    )
    head, winner = _verdict(a, b, [r for r in rows if r not in skipped])
    return head + note, winner


def _verdict(a: Side, b: Side, rows: list[Row]) -> tuple[str, str | None]:
    key = [r for r in rows if r.key in _KEY_ROWS and r.outcome != "na"]
    if not key:
        return "No throughput numbers to compare.", None
    better = [r for r in key if r.outcome == "better"]
    worse = [r for r in key if r.outcome == "worse"]

    def short(r: Row) -> str:
        name = {
            "single_output_tok_s": "single-stream" if r.concurrency == 1 else f"C={r.concurrency}",
            "single_decode_tok_s": "decode",
            "peak_output_tok_s": "peak",
        }[r.key]
        return f"{name} {fmt_pct(r.delta_pct or 0.0)}"

    bname = b.profile or "B"
    aname = a.profile or "A"
    # Regressions outside the throughput rows (TTFT, TPOT, ITL, failures, startup) are said too:
    # "B is faster" must not hide a 43% worse TTFT.
    regress = [r for r in rows if r.key not in _KEY_ROWS and r.outcome == "worse"]

    def reg(r: Row) -> str:
        c = f" at C={r.concurrency}" if r.concurrency is not None else ""
        name = r.label.split(" (")[0]
        if r.delta_pct is None:
            return f"{name}{c}"
        return f"{name}{c} {fmt_pct(r.delta_pct)}"

    but = ("; but worse: " + ", ".join(reg(r) for r in regress)) if regress else ""
    if better and not worse:
        head = "B ({b}) has higher throughput than A ({a})" if regress else "B ({b}) is faster than A ({a})"
        # the winner is still judged on throughput (the headline rows); the text says the regressions
        return head.format(a=aname, b=bname) + ": " + ", ".join(short(r) for r in key) + but + ".", "B"
    if worse and not better:
        return f"B ({bname}) is slower than A ({aname}): " + ", ".join(short(r) for r in key) + but + ".", "A"
    if better and worse:
        return (
            f"Mixed: B ({bname}) better on "
            + ", ".join(short(r) for r in better)
            + "; worse on "
            + ", ".join(short(r) for r in worse)
            + ("; also worse: " + ", ".join(reg(r) for r in regress) if regress else "")
            + ".",
            None,
        )
    if regress:
        return (
            f"No throughput difference beyond noise between A ({aname}) and B ({bname}); "
            f"B is worse on " + ", ".join(reg(r) for r in regress) + "."
        ), None
    return f"No throughput difference beyond noise between A ({aname}) and B ({bname}).", None


# ---------------------------------------------------------------------- adapters


__all__ = [
    "DEFAULT_NOISE_PCT",
    "Comparison",
    "Row",
    "Stat",
    "compare",
    "judge",
    "noise_band",
]


# ---------------------------------------------------------------------- (de)serialise
