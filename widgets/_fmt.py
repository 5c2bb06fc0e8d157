"""What only the widgets draw: bars, text sparklines, theme colours (numbers as text: :mod:`tunedeck.fmt`)."""

from __future__ import annotations

import math
from typing import Iterable

from tunedeck.fmt import NA_TEXT, num

SPARK = "▁▂▃▄▅▆▇█"


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


def theme_color(widget: object, name: str, fallback: str = "") -> str:
    """A colour from the running app's theme variables (``success``, ``error``, ...)."""
    try:
        return str(widget.app.theme_variables.get(name, fallback))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - not mounted yet
        return fallback


def set_border_title(widget: object, title: str) -> None:
    """Set a border title only when it changes: Textual repaints the whole widget on every set,
    and a panel titled from a 1 Hz feed would repaint once a second for nothing."""
    if getattr(widget, "_tunedeck_title", None) != title:
        widget._tunedeck_title = title  # type: ignore[attr-defined]
        widget.border_title = title  # type: ignore[attr-defined]
