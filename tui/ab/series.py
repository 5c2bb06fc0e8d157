"""Output tok/s over time for a benchmark run, from its per-request samples.

Each successful request's output events are rebuilt as
``start_time + ttft + cumsum(itl)`` (benchmark-metrics.md §2, as vLLM does for
the peak) and bucketed into 1-s bins from the earliest start. Tokens per
event come from ``tokens_per_event`` when recorded, else the request's
``output_tokens`` spread evenly over its events.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

from tunedeck.util.files import read_jsonl
from tunedeck.util.paths import data_dir


def throughput_series(samples: Iterable[Mapping[str, Any]], bucket_s: float = 1.0) -> list[float]:
    events: list[tuple[float, float]] = []
    t0 = math.inf
    for s in samples:
        if not s.get("success", True):
            continue
        start, ttft = s.get("start_time"), s.get("ttft")
        if not isinstance(start, (int, float)) or not isinstance(ttft, (int, float)):
            continue
        itl = [x for x in (s.get("itl") or []) if isinstance(x, (int, float))]
        n_events = len(itl) + 1
        tpe = s.get("tokens_per_event")
        if isinstance(tpe, list) and len(tpe) == n_events:
            toks = [float(x) if isinstance(x, (int, float)) else 1.0 for x in tpe]
        else:
            out = s.get("output_tokens")
            per = float(out) / n_events if isinstance(out, (int, float)) and out > 0 else 1.0
            toks = [per] * n_events
        t = float(start) + float(ttft)
        t0 = min(t0, float(start))
        events.append((t, toks[0]))
        for gap, k in zip(itl, toks[1:]):
            t += float(gap)
            events.append((t, k))
    if not events:
        return []
    n = max(1, math.floor((max(t for t, _ in events) - t0) / bucket_s) + 1)
    bins = [0.0] * n
    for t, k in events:
        i = min(n - 1, int((t - t0) / bucket_s))
        bins[i] += k
    return [b / bucket_s for b in bins]


def run_samples_path(run_id: str) -> Path:
    return data_dir() / "results" / run_id / "samples.jsonl"


def run_series(run_id: str | None) -> list[float]:
    """The tok/s series of a stored benchmark run ([] when it has no samples here)."""
    if not run_id or "/" in run_id or run_id.startswith("."):
        return []
    p = run_samples_path(run_id)
    if not p.is_file():
        return []
    try:
        vals = throughput_series(read_jsonl(p))
    except OSError:
        return []
    return vals[:-1] if len(vals) > 2 else vals  # the last second is cut short by the run's end


__all__ = ["run_samples_path", "run_series", "throughput_series"]
