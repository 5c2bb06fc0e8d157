"""A start-up's progress and ETA: the phases' shares of the whole, the rate of a progress bar,
and the phase durations of previous loads of the same profile on the same host
(``state_dir()/startup-history.json``).

Pure computation over what :class:`tunedeck.hostops.tracker.StartupTracker` saw; the history
file is the only state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

from tunedeck.logparse import PHASES
from tunedeck.util.files import atomic_write_json
from tunedeck.util.paths import state_dir

#: default share of the overall startup per phase (used without history)
DEFAULT_WEIGHTS: dict[str, float] = {
    "process-start": 0.03,
    "distributed-init": 0.05,
    "weight-loading": 0.55,
    "compile": 0.07,
    "kv-cache": 0.05,
    "graph-capture": 0.20,
    "warmup": 0.05,
}
_ORDER = [p for p in PHASES if p != "ready"]


# ============================================================================ history


def history_path() -> Path:
    return state_dir() / "startup-history.json"


def history_key(target: str, profile: str | None, argv: Sequence[str]) -> str:
    return f"{target}|{profile}" if profile else f"{target}|argv:{json.dumps(list(argv))}"


def load_history(key: str) -> list[dict[str, float]]:
    try:
        data = json.loads(history_path().read_text())
    except (OSError, ValueError):
        return []
    runs = data.get(key, []) if isinstance(data, dict) else []
    return [r for r in runs if isinstance(r, dict)]


def save_history(key: str, durations: dict[str, float], keep: int = 5) -> None:
    p = history_path()
    try:
        data = json.loads(p.read_text())
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    runs = [r for r in data.get(key, []) if isinstance(r, dict)]
    runs.append({k: round(v, 3) for k, v in durations.items()})
    data[key] = runs[-keep:]
    atomic_write_json(p, data)


def expected_durations(history: list[dict[str, float]]) -> dict[str, float] | None:
    """Median duration per phase over previous loads (None without history)."""
    if not history:
        return None
    out: dict[str, float] = {}
    for ph in _ORDER:
        vals = sorted(float(h[ph]) for h in history if isinstance(h.get(ph), (int, float)))
        if vals:
            out[ph] = vals[len(vals) // 2]
    return out or None


def phase_durations(phase_times: Mapping[str, float]) -> dict[str, float]:
    """Seconds per phase from the phases' start times (each lasts until the next one starts)."""
    pts = sorted(((t, p) for p, t in phase_times.items()), key=lambda x: x[0])
    out: dict[str, float] = {}
    for (t, p), nxt in zip(pts, pts[1:] + [(None, None)]):
        if p == "ready" or nxt[0] is None:
            continue
        out[p] = max(0.0, float(nxt[0]) - float(t))
    return out


# ============================================================================ estimate


def time_left_at_rate(progress: tuple[int, int], since: tuple[float, int], now: float) -> float | None:
    """Seconds until a bar at ``progress`` (n, total) ends at the rate it moved since ``since``
    (time, n then); None before it moved."""
    n, total = progress
    t0, n0 = since
    if n > n0 and now > t0:
        rate = (n - n0) / (now - t0)
        return (total - n) / rate if rate > 0 else None
    return None


def estimate(
    phase: str | None,
    pp: float | None,
    now: float,
    *,
    expected: Mapping[str, float] | None,
    phase_times: Mapping[str, float],
    rate_left: float | None,
) -> tuple[float, float | None, str]:
    """(fraction done, ETA in seconds or None, where the ETA comes from: ``history``, ``rate`` or
    ``""``) in ``phase`` at ``pp`` (its own progress, None when it has none). ``expected``: the
    phase durations of previous loads; ``rate_left``: the current phase's time left at its bar's
    rate (:func:`time_left_at_rate`)."""
    if phase is None:
        return 0.0, None, ""
    if phase == "ready":
        return 1.0, 0.0, ""
    weights = dict(DEFAULT_WEIGHTS)
    exp = expected
    if exp:
        tot = sum(exp.get(p, 0.0) for p in _ORDER)
        if tot > 0:
            weights = {p: exp.get(p, 0.0) / tot for p in _ORDER}
    idx = _ORDER.index(phase) if phase in _ORDER else len(_ORDER) - 1
    done = sum(weights[p] for p in _ORDER[:idx])
    cur_w = weights.get(phase, 0.0)
    inside = pp if pp is not None else 0.0
    fraction = min(0.99, done + cur_w * inside)
    # ETA
    phase_start = phase_times.get(phase, now)
    in_phase = max(0.0, now - phase_start)
    if exp:
        later = sum(exp.get(p, 0.0) for p in _ORDER[idx + 1 :])
        cur_exp = exp.get(phase)
        if rate_left is not None:
            cur_left = rate_left
        elif cur_exp is not None:
            cur_left = max(0.0, cur_exp * (1 - inside) if pp is not None else cur_exp - in_phase)
        else:
            cur_left = 0.0
        return fraction, cur_left + later, "history"
    if rate_left is not None and phase != "weight-loading":
        return fraction, rate_left, "rate"
    if rate_left is not None:
        # no history: scale the remaining phases by their default share of the weights phase
        w_share = weights["weight-loading"]
        elapsed_w = max(0.0, now - phase_times.get("weight-loading", now))
        total_w = elapsed_w + rate_left
        later = sum(weights[p] for p in _ORDER[idx + 1 :]) / w_share * total_w if w_share else 0.0
        return fraction, rate_left + later, "rate"
    return fraction, None, ""


__all__ = [
    "DEFAULT_WEIGHTS",
    "estimate",
    "expected_durations",
    "history_key",
    "history_path",
    "load_history",
    "phase_durations",
    "save_history",
    "time_left_at_rate",
]
