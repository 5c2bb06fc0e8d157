"""Is a benchmark result valid? Findings checked before and during the run, each with its evidence.

:func:`findings` reads a level's timeline (:mod:`tunedeck.hostside.timeline`), its summary
and what was on the GPUs when it started, and returns a list of
``{"rule": NAME, "evidence": TEXT}`` (empty: nothing found). The rules:

``gpu_busy_at_start``     a GPU was at >= ``BUSY_UTIL`` % before the first request
``other_gpu_processes``   a process that is not the server's held a GPU at the start
``sm_clock_low``          a working GPU's SM clock (utilization >= ``BUSY_UTIL`` %) was below
                          ``CLOCK_FRACTION`` of its maximum in more than ``SHARE`` of the busy seconds
``power_at_cap``          a GPU drew >= ``CAP_FRACTION`` of its power limit in more than
                          ``SHARE`` of the busy seconds
``kv_cache_full``         the server's KV cache reached ``KV_FULL``
``preemptions``           the server preempted (retracted) requests
``queue_growing``         a closed-loop level's waiting queue was still growing at its end
``client_bound``          the client itself was the limit (the summary says why)
``failed_requests``       requests failed (counted by type)

Standard library only, Python >= 3.9.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence

BUSY_UTIL = 10.0
CLOCK_FRACTION = 0.9
CAP_FRACTION = 0.97
SHARE = 0.2
KV_FULL = 0.95
#: a queue "grows" when its last third averages this many more requests than its first
GROWTH_MIN = 1.0

RULES = (
    "gpu_busy_at_start",
    "other_gpu_processes",
    "sm_clock_low",
    "power_at_cap",
    "kv_cache_full",
    "preemptions",
    "queue_growing",
    "client_bound",
    "failed_requests",
)


def _nums(xs: Any) -> List[float]:
    return [float(x) for x in (xs or []) if isinstance(x, (int, float)) and not isinstance(x, bool)]


def _busy(lines: Sequence[Mapping[str, Any]]) -> List[Mapping[str, Any]]:
    """Seconds in which the client received tokens (the run proper, not its ramp-down)."""
    return [ln for ln in lines if ((ln.get("client") or {}).get("tok_s") or 0) > 0]


def _finding(rule: str, evidence: str) -> Dict[str, str]:
    return {"rule": rule, "evidence": evidence}


def start_findings(start: Mapping[str, Any]) -> List[Dict[str, str]]:
    """``start``: ``{"gpu": {util: [...]}, "others": [{pid, name, gpu_uuid, used_mib}], "others_unknown": why}``."""
    out = []
    util = (start.get("gpu") or {}).get("util") or []
    busy = [(i, u) for i, u in enumerate(util) if isinstance(u, (int, float)) and u >= BUSY_UTIL]
    if busy:
        desc = ", ".join(f"GPU {i} at {u:.0f}%" for i, u in busy[:4]) + (" …" if len(busy) > 4 else "")
        out.append(_finding("gpu_busy_at_start", f"{desc} before the first request"))
    others = start.get("others") or []
    if others:
        desc = ", ".join(
            f"pid {p.get('pid')} ({p.get('name') or '?'}, {p.get('used_mib') or '?'} MiB)" for p in others[:4]
        )
        out.append(_finding("other_gpu_processes", f"{desc} on the GPUs, not the server's"))
    return out


def run_findings(lines: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> List[Dict[str, str]]:
    out: List[Dict[str, str]] = []
    busy = _busy(lines)
    n = len(busy)
    if n:
        low, clocks, top = 0, [], 0.0
        for ln in busy:
            g = ln.get("gpu") or {}
            top = max([top, *_nums(g.get("sm_clock_max")), *_nums(g.get("sm_clock"))])
        working = 0
        for ln in busy:
            g = ln.get("gpu") or {}
            # an idle GPU clocks down by design: only GPUs at work count
            sm = [
                float(c)
                for c, u in zip(g.get("sm_clock") or [], g.get("util") or [])
                if isinstance(c, (int, float)) and isinstance(u, (int, float)) and u >= BUSY_UTIL
            ]
            if sm and top:
                working += 1
                clocks.append(sum(sm) / len(sm))
                if min(sm) < CLOCK_FRACTION * top:
                    low += 1
        if low > SHARE * working:
            out.append(
                _finding(
                    "sm_clock_low",
                    f"SM clock below {CLOCK_FRACTION:.0%} of {top:.0f} MHz in {low} of "
                    f"{working} s at work (mean {sum(clocks) / len(clocks):.0f} MHz)",
                )
            )
        capped, watts, limit = 0, [], 0.0
        for ln in busy:
            g = ln.get("gpu") or {}
            pw, lim = g.get("power") or [], g.get("power_limit") or []
            pairs = [
                (float(p), float(q))
                for p, q in zip(pw, lim)
                if isinstance(p, (int, float)) and isinstance(q, (int, float)) and q > 0
            ]
            if pairs:
                watts.append(max(p for p, _ in pairs))
                limit = max(q for _, q in pairs)
                if any(p >= CAP_FRACTION * q for p, q in pairs):
                    capped += 1
        if capped > SHARE * n:
            out.append(
                _finding(
                    "power_at_cap", f"power at its {limit:.0f} W limit in {capped} of {n} s (peak {max(watts):.0f} W)"
                )
            )
    kv = [
        (float(v), ln.get("second"))
        for ln in lines
        for v in ((ln.get("server") or {}).get("kv"),)
        if isinstance(v, (int, float))
    ]
    if kv:
        top_kv, at = max(kv)
        if top_kv >= KV_FULL:
            out.append(_finding("kv_cache_full", f"KV cache at {top_kv:.0%} (second {at})"))
    pre = _nums((ln.get("server") or {}).get("preemptions") for ln in lines)
    if pre and max(pre) > 0:
        out.append(_finding("preemptions", f"{max(pre):.0f} requests preempted by the server"))
    rate = summary.get("request_rate")
    closed = rate is None or rate == "inf" or (isinstance(rate, float) and math.isinf(rate))
    waiting = [w for w in (_nums([(ln.get("server") or {}).get("waiting")]) for ln in busy) if w]
    if closed and len(waiting) >= 6:
        w = [x[0] for x in waiting]
        third = len(w) // 3
        first, last = sum(w[:third]) / third, sum(w[-third:]) / third
        if last >= first + GROWTH_MIN and last > 1.1 * first:
            out.append(
                _finding(
                    "queue_growing",
                    f"waiting requests rose from {first:.1f} to {last:.1f} "
                    f"(first and last thirds) in a closed-loop level",
                )
            )
    if summary.get("client_bound"):
        why = (summary.get("client") or {}).get("client_bound_reason") or "the client was the limit"
        out.append(_finding("client_bound", str(why)))
    failed = summary.get("failed") or 0
    if failed:
        counts = summary.get("error_counts") or {}
        # requests a stop cut short are "cancelled", not failures
        desc = (
            ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "Cancelled")
            if isinstance(counts, dict)
            else ""
        )
        total = (summary.get("completed") or 0) + failed
        out.append(_finding("failed_requests", f"{failed} of {total} failed" + (f" ({desc})" if desc else "")))
    return out


def findings(
    lines: Sequence[Mapping[str, Any]], summary: Mapping[str, Any], start: Optional[Mapping[str, Any]] = None
) -> List[Dict[str, str]]:
    return start_findings(start or {}) + run_findings(lines, summary)


def label(validity: Any) -> str:
    """``valid`` or the rule names, for tables."""
    if not isinstance(validity, list):
        return "not checked"
    return "valid" if not validity else ", ".join(str(f.get("rule")) for f in validity if isinstance(f, dict))
