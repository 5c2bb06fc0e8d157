"""Benchmark statistics exactly as ``vllm bench serve`` computes them.

Source of the definitions: ``calculate_metrics`` in vllm/benchmarks/serve.py
(see docs/benchmark-metrics.md §2 and §5). Inputs are per-request records
(``samples.jsonl`` lines, seconds); outputs use vLLM's summary key names
(ms for latency statistics). numpy is not needed: mean, median, population
std and ``np.percentile``'s default linear interpolation are implemented here.

Only successful requests enter any statistic. An empty list gives 0.0, like
vLLM's ``np.mean(x or 0)``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from tunedeck.bench.counters import format_server_counters
from tunedeck.bench.records import SampleRecord
from tunedeck.bench.workloads import describe as describe_workload

#: Latency metrics with their printed names and section headers (vLLM's order).
METRICS: tuple[tuple[str, str, str], ...] = (
    ("ttft", "TTFT", "Time to First Token"),
    ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
    ("itl", "ITL", "Inter-token Latency"),
    ("e2el", "E2EL", "End-to-end Latency"),
)
#: SLO keys of ``--goodput``: vLLM's ttft, tpot and e2el, plus tunedeck's itl (see :func:`slo_value`)
GOODPUT_KEYS = ("ttft", "tpot", "itl", "e2el")
DEFAULT_PERCENTILES: tuple[float, ...] = (90.0, 99.0)


# ---------------------------------------------------------------- statistics


def mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs) if xs else 0.0


def std(xs: Sequence[float]) -> float:
    """Population standard deviation (numpy's default, ddof=0)."""
    if not xs:
        return 0.0
    m = mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / len(xs))


def percentile_sorted(s: Sequence[float], p: float) -> float:
    """``np.percentile(x, p)`` (method 'linear') on an already sorted sequence."""
    if not s:
        return 0.0
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p}: must be within 0..100")
    # numpy's order of operations, so results match it to the last bit:
    # q = p / 100, index = (n - 1) * q, then ``_lerp`` (from b when gamma >= 0.5)
    rank = (len(s) - 1) * (p / 100.0)
    if rank >= len(s) - 1:
        return s[-1]
    lo = math.floor(rank)
    gamma = rank - lo
    a, b = s[lo], s[lo + 1]
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def percentile(xs: Iterable[float], p: float) -> float:
    return percentile_sorted(sorted(xs), p)


def median(xs: Sequence[float]) -> float:
    return percentile(xs, 50.0)


def p_word(p: float) -> str:
    """vLLM's key spelling: ``99`` for whole numbers, else as given (``99.9``)."""
    return str(int(p)) if int(p) == p else str(p)


def stats_ms(name: str, xs: Sequence[float], percentiles: Sequence[float]) -> dict[str, float]:
    """``mean_{name}_ms``, ``median_…``, ``std_…``, ``p{P}_…`` from values in seconds."""
    s = sorted(xs)
    out = {
        f"mean_{name}_ms": mean(s) * 1000,
        f"median_{name}_ms": percentile_sorted(s, 50.0) * 1000,
        f"std_{name}_ms": std(s) * 1000,
    }
    for p in percentiles:
        out[f"p{p_word(p)}_{name}_ms"] = percentile_sorted(s, p) * 1000
    return out


# ---------------------------------------------------------------- helpers


def parse_slo_ms(text: str) -> float:
    """One SLO value in ms (a finite number >= 0); ValueError says what is wrong with it."""
    try:
        ms = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of milliseconds") from None
    if not ms >= 0 or math.isinf(ms):
        raise ValueError("must be a finite number >= 0")
    return ms


def parse_goodput(items: Iterable[str]) -> dict[str, float]:
    """``["ttft:200", "tpot:50"]`` → ``{"ttft": 200.0, "tpot": 50.0}`` (ms); ValueError names the bad item."""
    out: dict[str, float] = {}
    for item in items:
        for part in str(item).split():
            k, sep, v = part.partition(":")
            if not sep:
                raise ValueError(f"--goodput {part!r}: expected KEY:MS, e.g. ttft:200")
            if k not in GOODPUT_KEYS:
                raise ValueError(f"--goodput {part!r}: key must be one of {', '.join(GOODPUT_KEYS)}")
            try:
                out[k] = parse_slo_ms(v)
            except ValueError as e:
                raise ValueError(f"--goodput {part!r}: {e}") from None
    return out


def slo_value(s: SampleRecord, key: str) -> float:
    """A successful request's value (seconds) for the SLO ``key``, as goodput judges it.

    ``ttft``, ``e2el``: the request's TTFT and latency. ``tpot``: its TPOT, 0 when it had at
    most one output token (vLLM's rule). ``itl`` (tunedeck's, vLLM has no ITL SLO): the
    request's largest gap between two output events, 0 with a single event; a request
    meets it when it never stalled longer than the target.
    """
    if key == "ttft":
        return float(s["ttft"])
    if key == "e2el":
        return float(s["latency"])
    if key == "tpot":
        tp = tpot(s)
        return tp if tp is not None else 0.0
    if key == "itl":
        itl = s.get("itl") or ()
        return float(max(itl)) if itl else 0.0
    raise ValueError(f"goodput key {key!r}: must be one of {', '.join(GOODPUT_KEYS)}")


def slo_seconds(goodput_ms: Mapping[str, float]) -> dict[str, float]:
    """``--goodput`` targets (ms) in seconds, the unit :func:`meets_slo` compares in."""
    return {k: float(v) / 1000.0 for k, v in goodput_ms.items()}


def meets_slo(s: SampleRecord, slo_s: Mapping[str, float]) -> bool:
    """True when a successful request is within every target (``value <= SLO``, seconds).

    The one rule behind ``request_goodput`` and the live goodput count in progress ticks.
    """
    return all(slo_value(s, k) <= lim for k, lim in slo_s.items())


def output_len(s: SampleRecord) -> int:
    """usage.completion_tokens; without usage one token per output event (no tokenizer)."""
    n = s.get("output_tokens") or 0
    if not n and s.get("success"):
        n = 1 + len(s.get("itl") or [])
    return int(n)


def tpot(s: SampleRecord) -> Optional[float]:
    n = output_len(s)
    if n > 1:
        return float(s["latency"] - s["ttft"]) / (n - 1)
    return None


def event_times(s: SampleRecord) -> list[float]:
    """``start + ttft + cumsum(itl)``, as vLLM rebuilds them for the peak."""
    t = s["start_time"] + s["ttft"]
    out = [t]
    for g in s.get("itl") or ():
        t += g
        out.append(t)
    return out


def _seconds(ok: Sequence[SampleRecord]) -> Tuple[float, int]:
    """The earliest start of ``ok`` (non-empty), and how many 1-s bins from it hold every request."""
    t0 = min(s["start_time"] for s in ok)
    t_end = max(s["start_time"] + s["latency"] for s in ok)
    return t0, math.ceil(t_end - t0) + 1


def peak_output_per_s(ok: Sequence[SampleRecord]) -> float:
    """Max events in a 1-s bin from the earliest start (counts events, not tokens)."""
    if not ok:
        return 0.0
    t0, nbins = _seconds(ok)
    bins = [0] * nbins
    for s in ok:
        for t in event_times(s):
            b = int(t - t0)
            if 0 <= b < nbins:
                bins[b] += 1
    return float(max(bins))


def max_concurrent(ok: Sequence[SampleRecord]) -> int:
    """vLLM's peak concurrency: requests active at any time within each 1-s bin from the earliest start.

    A request counts in every bin from ``int(start - t0)`` to ``int(start + latency - t0)``
    inclusive; the result is the fullest bin (it can exceed the instantaneous maximum).
    """
    if not ok:
        return 0
    t0, nbins = _seconds(ok)
    bins = [0] * nbins
    for s in ok:
        a = int(s["start_time"] - t0)
        b = int(s["start_time"] + s["latency"] - t0)
        for k in range(a, min(b, nbins - 1) + 1):
            bins[k] += 1
    return max(bins)


def max_overlap(ok: Sequence[SampleRecord]) -> int:
    """Instantaneous peak: sweep-line over ``[start, start + latency)`` (a departure goes first)."""
    ev: List[Tuple[float, int]] = []
    for s in ok:
        ev.append((s["start_time"], 1))
        ev.append((s["start_time"] + s["latency"], -1))
    ev.sort()
    cur = best = 0
    for _t, d in ev:
        cur += d
        if cur > best:
            best = cur
    return best


def is_cancelled(s: SampleRecord) -> bool:
    """A request cut short because the benchmark was stopped (not a failure of the server)."""
    return not s.get("success") and s.get("error_type") == "Cancelled"


def input_len_check(samples: Sequence[SampleRecord], requested: Optional[int]) -> Dict[str, Any]:
    """How the prompt lengths the server reported compare with the length asked for."""
    ok = [s for s in samples if s.get("success")]
    reported = [int(s.get("prompt_len") or 0) for s in ok if s.get("usage_present")]
    out: Dict[str, Any] = {
        "input_len_requested": requested,
        "input_len_reported_min": min(reported) if reported else None,
        "input_len_reported_max": max(reported) if reported else None,
        "input_len_reported_mean": mean(reported) if reported else None,
        "input_len_unverified": len(ok) - len(reported),
    }
    if requested:
        out["input_len_mismatch"] = sum(1 for n in reported if n != requested)
    else:  # lengths differ per request: each exact one is checked against what was sent
        out["input_len_mismatch"] = sum(
            1
            for s in ok
            if s.get("usage_present") and s.get("prompt_len_exact") and s.get("prompt_len") != s.get("prompt_len_sent")
        )
    return out


# ---------------------------------------------------------------- main entry


def calculate_metrics(
    samples: Sequence[SampleRecord],
    duration: float,
    *,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    goodput: Optional[Mapping[str, float]] = None,
    max_concurrency: Optional[int] = None,
    request_rate: float = math.inf,
    input_len: Optional[int] = None,
) -> Dict[str, Any]:
    """The results part of vLLM's summary JSON plus tunedeck's own keys.

    ``samples``: per-request records (seconds). ``duration``: seconds from
    the dispatch of the first timed request until all had finished.
    """
    ok = [s for s in samples if s.get("success")]
    cancelled = sum(1 for s in samples if is_cancelled(s))
    failed = len(samples) - len(ok) - cancelled
    ttfts: list[float] = []
    tpots: list[float] = []
    itls: list[float] = []
    e2els: list[float] = []
    out_lens: list[int] = []
    total_input = 0
    good = 0
    events = 0
    for s in ok:
        n = output_len(s)
        out_lens.append(n)
        total_input += int(s.get("prompt_len") or 0)
        tp = tpot(s)
        if tp is not None:
            tpots.append(tp)
        itl = s.get("itl") or []
        itls.extend(itl)
        events += 1 + len(itl)
        ttfts.append(s["ttft"])
        e2els.append(s["latency"])
    if goodput:
        slo = slo_seconds(goodput)
        good = sum(1 for s in ok if meets_slo(s, slo))
    total_output = sum(out_lens)
    dur = duration if duration > 0 else math.nan

    def rate(x: float) -> float:
        return x / dur if dur == dur else 0.0

    res: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": failed,
        # cut short by a stop the operator asked for: neither a success nor the server's failure
        "cancelled": cancelled,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": rate(len(ok)),
        "request_goodput": rate(good) if goodput else None,
        "output_throughput": rate(total_output),
        "total_token_throughput": rate(total_input + total_output),
        "max_output_tokens_per_s": peak_output_per_s(ok),
        "max_concurrent_requests": max_concurrent(ok),
        "rtfx": 0.0,
    }
    res.update(stats_ms("ttft", ttfts, percentiles))
    res.update(stats_ms("tpot", tpots, percentiles))
    res.update(stats_ms("itl", itls, percentiles))
    res.update(stats_ms("e2el", e2els, percentiles))
    queue = [float(s.get("client_queue_time") or 0.0) for s in ok]
    res.update(stats_ms("client_queue_time", queue, percentiles))
    if math.isfinite(request_rate):
        res.update(stats_ms("e2el_including_client_queue", [e + q for e, q in zip(e2els, queue)], percentiles))
    # ---- tunedeck's own keys
    res.update(stats_ms("send_time", [float(s.get("send_time") or 0.0) for s in ok], percentiles))
    # vLLM: one entry per request in request order ("" for a success); ours: counts by type
    ordered = sorted(samples, key=lambda s: s.get("index", 0))
    res["errors"] = ["" if s.get("success") else str(s.get("error") or s.get("error_type") or "error") for s in ordered]
    res["error_counts"] = dict(Counter(s.get("error_type") or "Unknown" for s in samples if not s.get("success")))
    res["max_overlap_requests"] = max_overlap(ok)
    res.update(input_len_check(samples, input_len))
    res["mean_tokens_per_event"] = total_output / events if events else 0.0
    res["usage_missing"] = sum(1 for s in ok if not s.get("usage_present"))
    res["failure_rate"] = failed / len(samples) if samples else 0.0
    conc = max_concurrency or res["max_concurrent_requests"] or 0
    res["per_user_output_throughput"] = res["output_throughput"] / conc if conc else 0.0
    med_tpot = res["median_tpot_ms"]
    res["decode_tok_s_per_user"] = 1000.0 / med_tpot if med_tpot > 0 else 0.0
    res.update(dispatch_lag(samples))
    return res


#: dispatch fell behind its schedule when p99 lateness exceeds this (ms) ...
DISPATCH_LAG_P99_WARN_MS = 10.0
#: ... or any request was this late (ms)
DISPATCH_LAG_MAX_WARN_MS = 100.0


def dispatch_lag(samples: Sequence[SampleRecord]) -> Dict[str, Any]:
    """How late the client sent scheduled requests (open loop, trace replay, think times).

    ``dispatch_lag_*_ms`` are None for a level without a schedule (closed
    loop); ``dispatch_behind`` says the schedule was not kept (p99 over
    :data:`DISPATCH_LAG_P99_WARN_MS` or any request over
    :data:`DISPATCH_LAG_MAX_WARN_MS`), so the load was not the one asked for.
    """
    lags = sorted(float(v) for v in (s.get("dispatch_lag") for s in samples) if isinstance(v, (int, float)))
    if not lags:
        return {
            "dispatch_lag_p50_ms": None,
            "dispatch_lag_p99_ms": None,
            "dispatch_lag_max_ms": None,
            "dispatch_late_requests": 0,
            "dispatch_behind": False,
        }
    p99 = percentile_sorted(lags, 99) * 1000
    mx = lags[-1] * 1000
    return {
        "dispatch_lag_p50_ms": percentile_sorted(lags, 50) * 1000,
        "dispatch_lag_p99_ms": p99,
        "dispatch_lag_max_ms": mx,
        "dispatch_late_requests": sum(1 for x in lags if x * 1000 > DISPATCH_LAG_MAX_WARN_MS),
        "dispatch_behind": p99 > DISPATCH_LAG_P99_WARN_MS or mx > DISPATCH_LAG_MAX_WARN_MS,
    }


def dispatch_warning(summary: Mapping[str, Any]) -> Optional[str]:
    """One line when the level's dispatch fell behind its schedule, else None."""
    if not summary.get("dispatch_behind"):
        return None
    return (
        "DISPATCH BEHIND: requests were sent late for their schedule (p99 {:.1f} ms, max {:.1f} ms, "
        "{} over {:.0f} ms); the load was lighter than asked".format(
            summary.get("dispatch_lag_p99_ms") or 0.0,
            summary.get("dispatch_lag_max_ms") or 0.0,
            summary.get("dispatch_late_requests") or 0,
            DISPATCH_LAG_MAX_WARN_MS,
        )
    )


def error_counts(summary: Mapping[str, Any]) -> Dict[str, int]:
    """Failures by type (``error_counts``; older summaries kept them in ``errors`` as a dict)."""
    c = summary.get("error_counts")
    if isinstance(c, Mapping):
        return dict(c)
    e = summary.get("errors")
    return dict(e) if isinstance(e, Mapping) else {}


def format_result(summary: Mapping[str, Any], percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> str:
    """vLLM's ``Serving Benchmark Result`` block for one summary."""
    lines: list[str] = []
    add = lines.append

    def row(label: str, value: Any, fmt: str = "") -> None:
        add(("{:<40} {:<10" + fmt + "}").format(label, value))

    add("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    row("Successful requests:", summary["completed"])
    row("Failed requests:", summary["failed"])
    if summary.get("cancelled"):
        row("Cancelled requests (stopped):", summary["cancelled"])
    if summary.get("max_concurrency") is not None:
        row("Maximum request concurrency:", summary["max_concurrency"])
    rr = summary.get("request_rate", "inf")
    if rr not in ("inf", None) and math.isfinite(float(rr)):
        row("Request rate configured (RPS):", float(rr), ".2f")
    row("Benchmark duration (s):", summary["duration"], ".2f")
    row("Total input tokens:", summary["total_input_tokens"])
    row("Total generated tokens:", summary["total_output_tokens"])
    row("Request throughput (req/s):", summary["request_throughput"], ".2f")
    if summary.get("request_goodput") is not None:
        row("Request goodput (req/s):", summary["request_goodput"], ".2f")
    row("Output token throughput (tok/s):", summary["output_throughput"], ".2f")
    row("Peak output token throughput (tok/s):", summary["max_output_tokens_per_s"], ".2f")
    row("Peak concurrent requests:", float(summary["max_concurrent_requests"]), ".2f")
    row("Total token throughput (tok/s):", summary["total_token_throughput"], ".2f")
    for key, name, header in METRICS:
        add("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        row(f"Mean {name} (ms):", summary[f"mean_{key}_ms"], ".2f")
        row(f"Median {name} (ms):", summary[f"median_{key}_ms"], ".2f")
        for p in percentiles:
            k = f"p{p_word(p)}_{key}_ms"
            if k in summary:
                row(f"P{p_word(p)} {name} (ms):", summary[k], ".2f")
    add("=" * 50)
    return "\n".join(lines)


def format_lengths(lens: Mapping[str, Any]) -> str:
    """``input min/mean/p50/p90/p99/max 12/40.5/38/70/88/90, output ...`` (a length distribution)."""
    parts = []
    for key in ("input", "output"):
        d = lens.get(key)
        if isinstance(d, Mapping) and d.get("count"):
            vals = "/".join(f"{d.get(k):g}" if isinstance(d.get(k), (int, float)) else "-" for k in _LEN_KEYS)
            parts.append(f"{key} {'/'.join(_LEN_KEYS)} {vals}")
    return ", ".join(parts) or "-"


_LEN_KEYS = ("min", "mean", "p50", "p90", "p99", "max")


def format_context_limit(ctx: Mapping[str, Any]) -> str:
    """``4096 tokens (the server's max_model_len)``, ``... (--context-limit)`` or ``none (the server
    did not say)``."""
    tokens, source = ctx.get("tokens"), ctx.get("source")
    if not isinstance(tokens, int) or isinstance(tokens, bool):
        return "none (the server did not say; --context-limit N sets one)"
    where = {"option": "--context-limit", "server": "the server's max_model_len"}.get(str(source), "source unknown")
    return f"{tokens} tokens ({where})"


def format_extras(summary: Mapping[str, Any]) -> str:
    """tunedeck's lines under the vLLM block: settings, failures, client health."""
    lines = []
    params = summary.get("params") or {}
    if params:
        shown = " ".join(
            f"{k}={params.get(k)}" for k in ("ignore_eos", "temperature", "input_len", "output_len", "seed")
        )
        lines.append(f"{shown} endpoint={summary.get('endpoint_type')}")
    wl = summary.get("workload")
    if isinstance(wl, Mapping):
        lines.append("Workload: " + describe_workload(wl))
        lens = summary.get("workload_lengths")
        if isinstance(lens, Mapping):
            lines.append("Lengths planned (output: max_tokens asked): " + format_lengths(lens))
        skipped = summary.get("workload_skipped")
        if skipped:
            lines.append("Skipped: " + ", ".join(f"{k}={v}" for k, v in sorted(skipped.items())))
        ctx = summary.get("context_limit")
        if isinstance(ctx, Mapping):
            lines.append("Context limit: " + format_context_limit(ctx))
    measured = summary.get("measured_lengths")
    if isinstance(measured, Mapping) and any(isinstance(d, Mapping) and d.get("count") for d in measured.values()):
        lines.append("Lengths measured (server's token counts): " + format_lengths(measured))
    how = {
        "token-ids": "token ids, exact length",
        "server-tokenizer": "text fitted with the server's /tokenize",
        "estimate": "text, length estimated (the server's count is used)",
    }.get(str(params.get("prompt_lengths")))
    if how:
        lines.append(f"Prompts: {how}; tokenizer_id={summary.get('tokenizer_id')}")
    counts = error_counts(summary)
    if counts:
        lines.append("Failures by type: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    req = summary.get("input_len_requested")
    if req and summary.get("input_len_mismatch"):
        lines.append(
            "Input length: {} request(s) not {} tokens (server counted {}..{})".format(
                summary["input_len_mismatch"],
                req,
                summary.get("input_len_reported_min"),
                summary.get("input_len_reported_max"),
            )
        )
    elif not req and summary.get("input_len_mismatch"):
        lines.append(f"Input length: {summary['input_len_mismatch']} request(s) not the exact length sent")
    if summary.get("input_len_unverified"):
        lines.append(f"Input length: {summary['input_len_unverified']} request(s) without usage.prompt_tokens")
    tpe = summary.get("mean_tokens_per_event") or 0.0
    lines.append(
        f"Tokens per event (mean): {tpe:.2f}" + ("  (>1: ITL is per event, not per token)" if tpe > 1.01 else "")
    )
    if summary.get("usage_missing"):
        lines.append(f"Warning: {summary['usage_missing']} request(s) without usage; output counted per event")
    cl = summary.get("client") or {}
    if cl:
        lines.append(
            "Client: {} ({}) workers={} cpu/worker mean={:.2f} max={:.2f} loop lag p99={:.1f} ms{}".format(
                cl.get("hostname"),
                cl.get("where"),
                cl.get("workers"),
                cl.get("cpu_mean", 0.0),
                cl.get("cpu_max", 0.0),
                cl.get("loop_lag_p99_ms", 0.0),
                "  CLIENT-BOUND: numbers may be limited by the client" if summary.get("client_bound") else "",
            )
        )
        mach = []
        if cl.get("loop_lag_max_ms") is not None:
            mach.append("max loop stall {:.1f} ms".format(cl["loop_lag_max_ms"]))
        if cl.get("machine_load1_max") is not None:
            mach.append("machine load {:.1f} on {} cores".format(cl["machine_load1_max"], cl.get("machine_ncpu")))
        if cl.get("machine_steal") is not None:
            mach.append("steal {:.1f} %".format(cl["machine_steal"] * 100))
        if cl.get("connect_ms_mean") is not None:
            mach.append(
                "{} connection(s) opened before t0 in {:.2f} ms mean, {:.2f} max".format(
                    cl.get("connections"), cl["connect_ms_mean"], cl["connect_ms_max"]
                )
            )
        if mach:
            lines.append("Client machine: " + ", ".join(mach))
        if summary.get("client_bound") and cl.get("client_bound_reason"):
            lines.append("CLIENT-BOUND: " + str(cl["client_bound_reason"]))
        if summary.get("machine_busy"):
            lines.append("MACHINE BUSY: " + str(cl.get("machine_busy_reason") or "other load on the client machine"))
    if summary.get("dispatch_lag_p99_ms") is not None:
        lines.append(
            "Dispatch lag: p50 {:.2f} ms, p99 {:.2f} ms, max {:.2f} ms".format(
                summary.get("dispatch_lag_p50_ms") or 0.0,
                summary["dispatch_lag_p99_ms"],
                summary.get("dispatch_lag_max_ms") or 0.0,
            )
        )
    behind = dispatch_warning(summary)
    if behind:
        lines.append(behind)
    lines.extend(format_server_counters(summary))
    if summary.get("partial"):
        lines.append("PARTIAL: the run did not finish; statistics cover the finished requests only")
    lines.extend(format_validity(summary.get("validity")))
    return "\n".join(lines)


def format_validity(found: Any) -> List[str]:
    """``validity: valid`` or ``validity: [rules]`` and one line per finding with its evidence
    (:mod:`tunedeck.hostside.validity`); nothing for a result that was not checked."""
    if not isinstance(found, list):
        return []
    if not found:
        return [
            "validity: valid (GPUs idle at start, clocks and power normal, no KV pressure or preemption, "
            "no growing queue, not client-bound, no failures)"
        ]
    rules = [f for f in found if isinstance(f, dict)]
    return [f"validity: [{', '.join(str(f.get('rule')) for f in rules)}]"] + [
        f"  {f.get('rule')}: {f.get('evidence')}" for f in rules
    ]
