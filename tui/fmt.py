"""The one way numbers become text, in the CLI and the dashboard alike.

A value that was not reported (:data:`tunedeck.model.NA`, None, NaN, not a number) reads
``N/A``, never 0. Sizes: :func:`human_bytes` (auto unit) and :func:`gib`; durations:
:func:`uptime` (how long something has run) and :func:`eta` (a countdown or estimate). Tables of
text: :func:`text_table`.
"""

from __future__ import annotations

import math
from typing import Callable, Collection, Iterable, Sequence

from tunedeck.model import NA

NA_TEXT = "N/A"


def num(value: object) -> float | None:
    """A finite float, or None for NA / None / NaN / infinities / non-numbers."""
    if value is NA or value is None or isinstance(value, bool):
        return None
    if not isinstance(value, (int, float, str)):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) or math.isinf(f) else f


def _or_na(value: object, text: Callable[[float], str]) -> str:
    """``text`` of ``value`` as a finite float; ``N/A`` when it was not reported (see :func:`num`)."""
    f = num(value)
    return NA_TEXT if f is None else text(f)


def fmt(value: object, spec: str = ".0f", unit: str = "") -> str:
    """``value`` formatted with ``spec`` and ``unit``; ``N/A`` when not reported."""
    return _or_na(value, lambda f: f"{f:{spec}}{unit}")


def human_bytes(value: object) -> str:
    """Bytes in the largest binary unit below 1024: ``512 B``, ``1.5 GiB``."""
    return _or_na(value, _bytes_text)


def _bytes_text(f: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(f) < 1024 or unit == "TiB":
            return f"{f:.0f} {unit}" if unit == "B" else f"{f:.1f} {unit}"
        f /= 1024
    return NA_TEXT  # pragma: no cover


def gib(value: object, unit: str = "") -> str:
    """Bytes as GiB with one decimal (``12.3``), ``unit`` appended."""
    return _or_na(value, lambda f: f"{f / 2**30:.1f}{unit}")


def uptime(seconds: object) -> str:
    """How long something has run: ``3d 4h 5m``, ``4h 5m``, ``5m 6s``."""
    return _or_na(seconds, _uptime_text)


def _uptime_text(f: float) -> str:
    s = int(f)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h {m}m"
    if h:
        return f"{h}h {m}m"
    return f"{m}m {s}s"


def eta(seconds: object) -> str:
    """A countdown or estimate, compact: ``1h02m``, ``3m04s``, ``42s``; ``?`` when unknown."""
    f = num(seconds)
    if f is None:
        return "?"
    s = round(max(0.0, f))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def text_table(
    headers: Sequence[str] | None,
    rows: Iterable[Sequence[object]],
    *,
    indent: str = "",
    right: Collection[int] = (),
    rule: bool = False,
) -> list[str]:
    """Rows of plain text in aligned columns: the one table printer of the command line.

    Columns are as wide as their widest cell and two spaces apart; the last column is not padded
    (a long command or path runs on), trailing spaces are dropped. ``right`` holds the indexes of
    right-aligned (numeric) columns; ``rule`` puts a line of dashes under the headers; with
    ``headers`` None there is no header line (a listing of names and values). Cells are shown with
    ``str``; text of host origin must be made safe before it gets here. Stdlib only: the host-side
    runtime prints its tables with it too."""
    body = [[str(c) for c in r] for r in rows]
    head = [str(h) for h in headers] if headers is not None else []
    n = len(head) if headers is not None else max((len(r) for r in body), default=0)
    widths = [max([len(head[i]) if head else 0] + [len(r[i]) for r in body if i < len(r)]) for i in range(n)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, c in enumerate(cells):
            if i == len(cells) - 1 and i not in right:
                out.append(c)
            else:
                out.append(c.rjust(widths[i]) if i in right else c.ljust(widths[i]))
        return (indent + "  ".join(out)).rstrip()

    lines = [line(head)] if headers is not None else []
    if rule and headers is not None:
        lines.append(indent + "  ".join("-" * w for w in widths))
    lines += [line(r) for r in body]
    return lines


def _target_forms(target: str) -> tuple[str, str, str, str]:
    """A target's names from shortest to full: host, host:port, user@host, user@host:port."""
    user, at, rest = target.rpartition("@")
    if rest.startswith("["):  # [v6]:port
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
        shown_host = f"[{host}]" if port else host
    else:
        host, colon, port = rest.rpartition(":")
        if not colon or not port.isdigit():
            host, port = rest, ""
        shown_host = host
    hp = f"{shown_host}:{port}" if port else host
    uh = f"{user}@{host}" if at else host
    return host, hp, uh, target


def short_targets(targets: Sequence[str]) -> dict[str, str]:
    """Each target's shortest name that tells it from the others (k9s shows contexts so): the
    host alone, else host:port where only the ports differ, else user@host, else the whole target."""
    forms = {t: _target_forms(t) for t in targets}
    out: dict[str, str] = {}
    for t, fs in forms.items():
        for level, name in enumerate(fs):
            if all(o == t or of[level] != name for o, of in forms.items()):
                out[t] = name
                break
        else:
            out[t] = t
    return out
