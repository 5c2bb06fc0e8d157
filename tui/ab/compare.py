"""Compare two servers' benchmark results the way an operator does by hand.

Pure functions: two :class:`Side` objects (each one or more repeats of
benchmark summaries in ``vllm bench serve`` key names, plus what was run)
give a :class:`Comparison` with one :class:`Row` per metric, the
configuration difference and warnings. Renderers are in :mod:`tui.ab.render`.

Rows (``s`` = the plan's lowest concurrency, normally C=1; ``p`` = the
highest, normally C=128):

* single-stream output tok/s (``output_throughput`` at s) and single-stream
  decode tok/s (``1000 / median_tpot_ms`` at s), higher is better;
* output tok/s at every intermediate concurrency (sweeps), higher is better;
* peak output tok/s (``output_throughput`` at p), higher is better;
* TTFT p50/p99, TPOT median and ITL p99 at s and at p, lower is better;
* server startup time (launch to ready), lower is better;
* speculative acceptance rate (``spec_decode_acceptance_rate``) where present;
* failed requests (all levels), lower is better.

Delta = (mean B - mean A) / |mean A| x 100.

Noise band (when a difference is called "within noise"):

* one repeat on either side: a fixed threshold, ``DEFAULT_NOISE_PCT`` (3 %)
  for throughputs, medians and TPOT, ``TAIL_NOISE_PCT`` (10 %) for p99 rows
  and ``STARTUP_NOISE_PCT`` (10 %) for startup time; ``noise_pct=`` scales
  the first and leaves the others at their ratio to it;
* two or more repeats on both sides: twice the standard error of the
  difference of the means, ``200 x sqrt(sA²/nA + sB²/nB) / |mean A|`` %
  (sample standard deviations), but never below ``MIN_NOISE_PCT`` (1 %).

Verdicts read as an operator writes them: ``B +18%`` (better),
``B −7% (worse)``, ``B −20% (better)`` for a lower-is-better metric,
``within noise``, ``n/a`` when either side lacks the number.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from tui.util.safety import redact_env

DEFAULT_NOISE_PCT = 3.0
TAIL_NOISE_PCT = 10.0
STARTUP_NOISE_PCT = 10.0
MIN_NOISE_PCT = 1.0
MINUS = "\u2212"

# ---------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class LevelResult:
    """One benchmark at one concurrency: a summary in vLLM key names."""

    concurrency: int
    summary: Mapping[str, Any]
    run_id: str | None = None


@dataclass(frozen=True)
class SideRun:
    """One repeat of one side: one server launch and its benchmarks."""

    levels: tuple[LevelResult, ...] = ()
    startup_s: float | None = None
    launch_run_id: str | None = None
    server_log: str | None = None
    acceptance_rate: float | None = None  # scraped from /metrics when the summary lacks it

    def level(self, concurrency: int) -> LevelResult | None:
        for lv in self.levels:
            if lv.concurrency == concurrency:
                return lv
        return None


@dataclass(frozen=True)
class Side:
    """Everything known about A or B."""

    label: str  # "A" or "B"
    profile: str
    engine: str = ""
    model: str = ""
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    #: endpoint, ignore_eos, temperature, and per level input_len/output_len/num_prompts
    params: Mapping[str, Any] = field(default_factory=dict)
    runs: tuple[SideRun, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.label} ({self.profile})" if self.profile else self.label

    def concurrencies(self) -> list[int]:
        cs: set[int] = set()
        for r in self.runs:
            cs.update(lv.concurrency for lv in r.levels)
        return sorted(cs)


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
class ConfigChange:
    kind: str  # "flag" | "env" | "command"
    name: str
    a: str | None  # None: absent on A
    b: str | None

    @property
    def text(self) -> str:
        if self.kind == "unknown":
            return f"? {self.name}: {self.a if self.a is not None else self.b}"
        if self.a is None:
            return f"+ {self.name}{'' if self.b == '' else '=' + str(self.b)}  (only B)"
        if self.b is None:
            return f"{MINUS} {self.name}{'' if self.a == '' else '=' + str(self.a)}  (only A)"
        return f"~ {self.name}: {self.a} \u2192 {self.b}"


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


def _num(summary: Mapping[str, Any] | None, key: str) -> float | None:
    if not summary:
        return None
    v = summary.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _decode_tok_s(summary: Mapping[str, Any] | None) -> float | None:
    tpot = _num(summary, "median_tpot_ms")
    if tpot is None or tpot <= 0:
        return None
    return 1000.0 / tpot


def _acceptance(summary: Mapping[str, Any] | None, run: SideRun) -> float | None:
    v = _num(summary, "spec_decode_acceptance_rate")
    if v is None:
        v = run.acceptance_rate
    return v


def fmt_pct(delta: float) -> str:
    mag = abs(delta)
    s = f"{mag:.0f}" if mag >= 10 else f"{mag:.1f}"
    sign = "+" if delta > 0 else (MINUS if delta < 0 else "\u00b1")
    return f"{sign}{s}%"


def noise_band(a: Stat, b: Stat, default_pct: float) -> float:
    if a.n >= 2 and b.n >= 2 and a.spread is not None and b.spread is not None and a.mean:
        se = math.sqrt(a.spread**2 / a.n + b.spread**2 / b.n)
        return max(MIN_NOISE_PCT, 200.0 * se / abs(a.mean))
    return default_pct


def judge(
    a: Stat | None, b: Stat | None, better: str, default_noise: float
) -> tuple[float | None, float, str, str]:
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


def parse_flags(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Split argv into the leading command words and ``{--flag: value}`` ('' for a switch)."""
    prefix: list[str] = []
    flags: dict[str, str] = {}
    i = 0
    argv = list(argv)
    while i < len(argv) and not _is_opt(argv[i]):
        prefix.append(argv[i])
        i += 1
    positional: list[str] = []
    while i < len(argv):
        tok = argv[i]
        if _is_opt(tok):
            if "=" in tok:
                k, v = tok.split("=", 1)
            elif i + 1 < len(argv) and not _is_opt(argv[i + 1]):
                k, v = tok, argv[i + 1]
                i += 1
            else:
                k, v = tok, ""
            flags[k] = f"{flags[k]},{v}" if k in flags else v
        else:
            positional.append(tok)
        i += 1
    if positional:
        prefix += positional
    return prefix, flags


def _is_opt(tok: str) -> bool:
    if not tok.startswith("-") or tok == "-":
        return False
    try:
        float(tok)
        return False
    except ValueError:
        return True


def config_diff(
    a_argv: Sequence[str],
    a_env: Mapping[str, str],
    b_argv: Sequence[str],
    b_env: Mapping[str, str],
) -> list[ConfigChange]:
    """Flags and environment variables that differ between two server commands.

    A side whose bench did not record the server's command has an empty ``argv``: its flags and
    environment are unknown, so nothing is listed as different; one "unknown" entry says so."""
    out: list[ConfigChange] = []
    missing = [s for s, argv in (("A", a_argv), ("B", b_argv)) if not argv]
    if missing:
        who = " and ".join(missing)
        return [ConfigChange("unknown", "server command", f"unknown (not recorded for {who}): "
                             "flags and environment cannot be compared", None)]
    pa, fa = parse_flags(a_argv)
    pb, fb = parse_flags(b_argv)
    if pa != pb and (pa or pb):
        out.append(ConfigChange("command", "command", " ".join(pa), " ".join(pb)))
    for k in sorted(set(fa) | set(fb)):
        va, vb = fa.get(k), fb.get(k)
        if va != vb:
            out.append(ConfigChange("flag", k, va, vb))
    ea, eb = redact_env(dict(a_env)), redact_env(dict(b_env))
    for k in sorted(set(ea) | set(eb)):
        va, vb = ea.get(k), eb.get(k)
        if va != vb:
            out.append(ConfigChange("env", k, va, vb))
    return out


# ---------------------------------------------------------------------- warnings


def _level_params(side: Side) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for lv in side.params.get("levels", ()) or ():
        try:
            out[int(lv["concurrency"])] = dict(lv)
        except (KeyError, TypeError, ValueError):
            continue
    # fall back to what the summaries say
    for run in side.runs:
        for lv in run.levels:
            d = out.setdefault(lv.concurrency, {})
            sp = lv.summary.get("params") or lv.summary.get("parameters") or {}
            if isinstance(sp, Mapping):
                for k in ("input_len", "output_len", "ignore_eos", "num_prompts"):
                    if k not in d and k in sp:
                        d[k] = sp[k]
    return out


#: ``client.where`` of a result whose client reached the server through an SSH port forward
VIA_SSH = "local-via-ssh"


def tunnel_levels(side: Side) -> list[int]:
    """Concurrencies of ``side`` measured through an SSH tunnel (not the server's truth)."""
    out = set()
    for run in side.runs:
        for lv in run.levels:
            client = lv.summary.get("client")
            if isinstance(client, Mapping) and client.get("where") == VIA_SSH:
                out.add(lv.concurrency)
    return sorted(out)


def _validity_by_level(side: Side) -> dict[int, set[str] | None]:
    """Concurrency -> the validity rules found over the side's repeats (None: not checked)."""
    out: dict[int, set[str] | None] = {}
    for run in side.runs:
        for lv in run.levels:
            found = lv.summary.get("validity")
            if not isinstance(found, list):
                out.setdefault(lv.concurrency, None)
                continue
            rules = {str(f.get("rule")) for f in found if isinstance(f, dict)}
            out[lv.concurrency] = (out.get(lv.concurrency) or set()) | rules
    return out


def _rules_text(rules: set[str]) -> str:
    return "valid" if not rules else "[" + ", ".join(sorted(rules)) + "]"


def validity_differences(a: Side, b: Side) -> list[str]:
    """``C=16: A valid, B [power_at_cap]`` for each level where A's and B's validity findings differ."""
    va, vb = _validity_by_level(a), _validity_by_level(b)
    out = []
    for c in sorted(set(va) & set(vb)):
        ra, rb = va[c], vb[c]
        if ra is not None and rb is not None and ra != rb:
            out.append(f"C={c}: A {_rules_text(ra)}, B {_rules_text(rb)}")
    return out


def comparison_warnings(a: Side, b: Side) -> list[str]:
    w: list[str] = []
    vla, vlb = _validity_by_level(a), _validity_by_level(b)
    for c in sorted(set(vla) & set(vlb)):
        ra, rb = vla[c], vlb[c]
        if ra is not None and rb is not None and ra != rb:
            w.append(f"C={c}: A and B differ in validity: A {_rules_text(ra)}, B {_rules_text(rb)} "
                     "(see `tunedeck results show RUN`)")
        elif ra and rb:
            w.append(f"C={c}: both A and B are invalid: {_rules_text(ra)}")
    for side in (a, b):
        cs = tunnel_levels(side)
        if cs:
            w.append(f"{side.label}: measured through an SSH tunnel at C={','.join(map(str, cs))}: the link's "
                     "latency and buffering are in these numbers, not the server's truth")
    if a.model and b.model and a.model != b.model:
        w.append(f"A and B serve different models: {a.model!r} vs {b.model!r}")
    if a.engine and b.engine and a.engine != b.engine:
        w.append(f"A and B use different engines: {a.engine} vs {b.engine}")
    for key, what in (
        ("ignore_eos", "ignore_eos"),
        ("endpoint", "endpoint"),
        ("temperature", "temperature"),
    ):
        va, vb = a.params.get(key), b.params.get(key)
        if va is not None and vb is not None and va != vb:
            w.append(f"A and B were benchmarked with different {what}: {va!r} vs {vb!r}")
    for side in (a, b):
        if side.params.get("ignore_eos") is False:
            w.append(
                f"{side.label}: ignore_eos is off, so output lengths vary with the model's "
                "stopping and throughput is not comparable"
            )
    la, lb = _level_params(a), _level_params(b)
    for c in sorted(set(la) & set(lb)):
        for key, what in (("input_len", "prompt length"), ("output_len", "output length")):
            va, vb = la[c].get(key), lb[c].get(key)
            if va is not None and vb is not None and va != vb:
                w.append(f"C={c}: A and B differ in {what}: {va} vs {vb}")
        va, vb = la[c].get("ignore_eos"), lb[c].get("ignore_eos")
        if va is not None and vb is not None and va != vb and a.params.get("ignore_eos") is None:
            w.append(f"C={c}: A and B differ in ignore_eos: {va} vs {vb}")
    ca, cb = set(a.concurrencies()), set(b.concurrencies())
    if ca != cb and ca and cb:
        w.append(
            "A and B were run at different concurrencies: "
            f"{sorted(ca)} vs {sorted(cb)}; rows for the others show n/a"
        )
    for side in (a, b):
        for i, run in enumerate(side.runs):
            rep = f" (repeat {i + 1})" if len(side.runs) > 1 else ""
            for lv in run.levels:
                s = lv.summary
                failed = _num(s, "failed") or 0
                if failed:
                    done = _num(s, "completed") or 0
                    w.append(
                        f"{side.label}{rep}: {int(failed)} of {int(failed + done)} requests failed "
                        f"at C={lv.concurrency}"
                    )
                if s.get("client_bound"):
                    w.append(
                        f"{side.label}{rep}: the benchmark client was saturated at C={lv.concurrency}"
                        f"{_client_reason(s, 'client_bound_reason')}; throughput may be understated"
                    )
                if s.get("machine_busy"):
                    w.append(
                        f"{side.label}{rep}: the benchmark client's machine was busy at C={lv.concurrency}"
                        f"{_client_reason(s, 'machine_busy_reason')}; its timestamps may be late"
                    )
                if s.get("usage_missing") or s.get("usage_present") is False:
                    w.append(
                        f"{side.label}{rep}: the server sent no usage at C={lv.concurrency}; "
                        "token counts are estimates"
                    )
    return w


def _client_reason(summary: Mapping[str, Any], key: str) -> str:
    """`` (why)`` from the summary's client-health record, or nothing when it gives no reason."""
    client = summary.get("client")
    why = client.get(key) if isinstance(client, Mapping) else None
    return f" ({why})" if why else ""


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

    def add(key: str, label: str, unit: str, better: str, c: int | None, fn: StatFn, noise: float, group: str,
            count: bool = False) -> None:
        sa, sb = _collect(a, c, fn), _collect(b, c, fn)
        if sa is None and sb is None:
            return
        if count:
            delta, band, outcome, verdict = judge_count(sa, sb)
        else:
            delta, band, outcome, verdict = judge(sa, sb, better, noise)
        rows.append(Row(key, label, unit, better, sa, sb, delta, band, outcome, verdict, c, group))

    def metric(key: str) -> StatFn:
        return lambda s, run: _num(s, key)

    if cs:
        lo, hi = cs[0], cs[-1]
        add("single_output_tok_s", f"Single-stream output tok/s (C={lo})", "tok/s", "higher", lo,
            metric("output_throughput"), noise_pct, "throughput")
        add("single_decode_tok_s", f"Single-stream decode tok/s (1000/median TPOT, C={lo})", "tok/s",
            "higher", lo, lambda s, run: _decode_tok_s(s), noise_pct, "throughput")
        for c in cs[1:-1]:
            add(f"output_tok_s_c{c}", f"Output tok/s (C={c})", "tok/s", "higher", c,
                metric("output_throughput"), noise_pct, "throughput")
        if hi != lo:
            add("peak_output_tok_s", f"Peak output tok/s (C={hi})", "tok/s", "higher", hi,
                metric("output_throughput"), noise_pct, "throughput")
        for c in ([lo, hi] if hi != lo else [lo]):
            add(f"ttft_p50_ms_c{c}", f"TTFT p50 (ms, C={c})", "ms", "lower", c,
                metric("median_ttft_ms"), noise_pct, "latency")
            add(f"ttft_p99_ms_c{c}", f"TTFT p99 (ms, C={c})", "ms", "lower", c,
                metric("p99_ttft_ms"), tail, "latency")
            add(f"tpot_median_ms_c{c}", f"TPOT median (ms, C={c})", "ms", "lower", c,
                metric("median_tpot_ms"), noise_pct, "latency")
            add(f"itl_p99_ms_c{c}", f"ITL p99 (ms, per event, C={c})", "ms", "lower", c,
                metric("p99_itl_ms"), tail, "latency")
        add("spec_acceptance_pct", f"Spec acceptance rate (%, C={hi})", "%", "higher", hi,
            _acceptance, noise_pct, "speculative")
    add("startup_s", "Startup time (s)", "s", "lower", None,
        lambda s, run: run.startup_s, startup_noise, "server")

    def failed_total(_s: Mapping[str, Any] | None, run: SideRun) -> float | None:
        if not run.levels:
            return None
        return sum(_num(lv.summary, "failed") or 0 for lv in run.levels)

    add("failed_requests", "Failed requests (all levels)", "", "lower", None, failed_total, 0.0, "server",
        count=True)

    warnings = comparison_warnings(a, b)
    diff = config_diff(a.argv, a.env, b.argv, b.env)
    headline, winner = _headline(a, b, rows)
    differs = validity_differences(a, b)
    if differs:
        headline += " Validity differs: " + "; ".join(differs) + "."
    multi = len(a.runs) >= 2 and len(b.runs) >= 2
    method = (
        f"noise band: 2 x standard error of the difference over {len(a.runs)}+{len(b.runs)} repeats "
        f"(at least {MIN_NOISE_PCT:g}%)"
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


def _headline(a: Side, b: Side, rows: list[Row]) -> tuple[str, str | None]:
    key = [r for r in rows if r.key in _KEY_ROWS and r.outcome != "na"]
    if not key:
        return "No throughput numbers to compare.", None
    better = [r for r in key if r.outcome == "better"]
    worse = [r for r in key if r.outcome == "worse"]

    def short(r: Row) -> str:
        name = {
            "single_output_tok_s": "single-stream",
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
            f"Mixed: B ({bname}) better on " + ", ".join(short(r) for r in better)
            + "; worse on " + ", ".join(short(r) for r in worse) + (
                "; also worse: " + ", ".join(reg(r) for r in regress) if regress else "") + ".",
            None,
        )
    if regress:
        return (f"No throughput difference beyond noise between A ({aname}) and B ({bname}); "
                f"B is worse on " + ", ".join(reg(r) for r in regress) + "."), None
    return f"No throughput difference beyond noise between A ({aname}) and B ({bname}).", None


# ---------------------------------------------------------------------- adapters


def summaries_to_levels(obj: Any, run_id: str | None = None) -> list[LevelResult]:
    """Accept the shapes a benchmark result comes in and give one LevelResult per concurrency.

    A single summary (``max_concurrency`` names its level), a list of them, or
    a sweep object holding them under ``levels``/``results``/``runs``/``sweep``.
    """
    if obj is None:
        return []
    if isinstance(obj, Mapping):
        for key in ("levels", "results", "runs", "sweep", "summaries"):
            inner = obj.get(key)
            if isinstance(inner, list) and inner and all(isinstance(x, Mapping) for x in inner):
                return summaries_to_levels(inner, run_id)
            if isinstance(inner, Mapping) and inner and all(isinstance(x, Mapping) for x in inner.values()):
                return summaries_to_levels(list(inner.values()), run_id)
        c = obj.get("max_concurrency", obj.get("concurrency"))
        if isinstance(c, (int, float)) and not isinstance(c, bool):
            return [LevelResult(int(c), obj, run_id or obj.get("run_id"))]
        return [LevelResult(0, obj, run_id or obj.get("run_id"))]
    if isinstance(obj, (list, tuple)):
        out: list[LevelResult] = []
        for x in obj:
            out.extend(summaries_to_levels(x, run_id))
        return out
    return []


__all__ = [
    "Comparison",
    "ConfigChange",
    "DEFAULT_NOISE_PCT",
    "LevelResult",
    "Row",
    "Side",
    "SideRun",
    "Stat",
    "compare",
    "comparison_warnings",
    "validity_differences",
    "config_diff",
    "judge",
    "noise_band",
    "parse_flags",
    "summaries_to_levels",
]


# ---------------------------------------------------------------------- (de)serialise


def side_to_dict(side: Side) -> dict[str, Any]:
    return {
        "label": side.label,
        "profile": side.profile,
        "engine": side.engine,
        "model": side.model,
        "argv": list(side.argv),
        "env": redact_env(dict(side.env)),
        "params": dict(side.params),
        "runs": [
            {
                "startup_s": r.startup_s,
                "launch_run_id": r.launch_run_id,
                "server_log": r.server_log,
                "acceptance_rate": r.acceptance_rate,
                "levels": [
                    {"concurrency": lv.concurrency, "run_id": lv.run_id, "summary": dict(lv.summary)}
                    for lv in r.levels
                ],
            }
            for r in side.runs
        ],
    }


def side_from_dict(d: Mapping[str, Any]) -> Side:
    runs = []
    for r in d.get("runs") or ():
        levels = tuple(
            LevelResult(int(lv["concurrency"]), dict(lv.get("summary") or {}), lv.get("run_id"))
            for lv in r.get("levels") or ()
        )
        runs.append(
            SideRun(
                levels=levels,
                startup_s=r.get("startup_s"),
                launch_run_id=r.get("launch_run_id"),
                server_log=r.get("server_log"),
                acceptance_rate=r.get("acceptance_rate"),
            )
        )
    return Side(
        label=str(d.get("label", "?")),
        profile=str(d.get("profile", "")),
        engine=str(d.get("engine", "")),
        model=str(d.get("model", "")),
        argv=tuple(d.get("argv") or ()),
        env=dict(d.get("env") or {}),
        params=dict(d.get("params") or {}),
        runs=tuple(runs),
    )
