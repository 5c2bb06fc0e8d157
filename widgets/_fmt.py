"""Formatting helpers shared by the widgets: NA-aware numbers, bars, text sparklines."""

from __future__ import annotations

import math
from typing import Iterable

from tui.model import NA

SPARK = "▁▂▃▄▅▆▇█"
NA_TEXT = "N/A"


def num(value: object) -> float | None:
    """A finite float, or None for NA / nan / non-numbers."""
    if value is NA or value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) or math.isinf(f) else f


def fmt(value: object, spec: str = ".0f", unit: str = "") -> str:
    """``value`` formatted with ``spec`` and ``unit``; N/A when not reported (never 0)."""
    f = num(value)
    return NA_TEXT if f is None else f"{f:{spec}}{unit}"


def ratio(used: object, total: object) -> float | None:
    u, t = num(used), num(total)
    if u is None or t is None or t <= 0:
        return None
    return max(0.0, min(1.0, u / t))


def bar(frac: float | None, width: int) -> str:
    """A horizontal bar of ``width`` cells in eighths; blank track when unknown."""
    if frac is None:
        return "·" * width
    eighths = round(max(0.0, min(1.0, frac)) * width * 8)
    full, part = divmod(eighths, 8)
    s = "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")
    return s + "░" * (width - len(s))


def sparkline(values: Iterable[float], width: int, lo: float = 0.0, hi: float = 100.0) -> str:
    """The last ``width`` values as block characters; gaps (nan) are blank."""
    vals = list(values)[-width:]
    out = []
    span = (hi - lo) or 1.0
    for v in vals:
        if v is None or math.isnan(v):
            out.append(" ")
            continue
        i = int((max(lo, min(hi, v)) - lo) / span * (len(SPARK) - 1) + 0.5)
        out.append(SPARK[i])
    return "".join(out).rjust(width)


def gib_pair(used_mib: object, total_mib: object) -> str:
    u, t = num(used_mib), num(total_mib)
    if u is None and t is None:
        return NA_TEXT
    us = NA_TEXT if u is None else f"{u / 1024:.1f}"
    ts = NA_TEXT if t is None else f"{t / 1024:.1f}"
    return f"{us}/{ts}G"


def human_bytes(value: object) -> str:
    f = num(value)
    if f is None:
        return NA_TEXT
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(f) < 1024 or unit == "TiB":
            return f"{f:.0f} {unit}" if unit == "B" else f"{f:.1f} {unit}"
        f /= 1024
    return NA_TEXT  # pragma: no cover


def duration(seconds: object) -> str:
    f = num(seconds)
    if f is None:
        return NA_TEXT
    s = int(f)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h {m}m"
    if h:
        return f"{h}h {m}m"
    return f"{m}m {s}s"


def theme_color(widget: object, name: str, fallback: str = "") -> str:
    """A colour from the running app's theme variables (``success``, ``error``, ...)."""
    try:
        return widget.app.theme_variables.get(name, fallback)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - not mounted yet
        return fallback
