"""A benchmark level's timeline as the screens show it: immutable snapshots on one time axis.

The rows are ``timeline.jsonl`` lines (:mod:`tunedeck.hostside.timeline`: the client's tok/s,
the server's queue and KV cache, the GPUs' clocks and power, one line a second) or
the live ``timeline`` and ``tick`` events of a benchmark. Here they become:

* :class:`TimelineRow`: one second, the figures the charts draw (``None``: not known);
* :class:`TimelineSnapshot`: one level's rows, one per second, sorted, bounded;
* :class:`TimelineFeed`: a benchmark's events in, a snapshot per level out (bounded);
* :class:`TimelineFigure`: what the chart widget draws: panels of lines that share
  one x axis (second ``i`` of every line is the same moment), for one level or an
  A/B overlay. A panel whose lines have no value at all says "no data" instead of
  drawing zeros.

Pure data, no I/O, no Textual: the widgets only read these.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, fields, replace
from typing import Any, Iterable, Mapping, Sequence

from tunedeck.util.safety import visible

#: rows kept per level (an hour at one a second); older seconds are dropped first
MAX_ROWS = 3600
#: levels kept by a feed (a longer sweep drops its oldest levels)
MAX_LEVELS = 64
#: a row claiming a later second (a week) is not a row of a benchmark level
MAX_SECOND = 7 * 24 * 3600

Finding = tuple[str, str]  # (rule, evidence)


def _num(v: Any) -> float | None:
    """A finite number, else None (``null``, ``[N/A]``, bools, nan)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _mean(xs: Any) -> float | None:
    if not isinstance(xs, (list, tuple)):
        return _num(xs)
    vals = [f for f in (_num(x) for x in xs) if f is not None]
    return sum(vals) / len(vals) if vals else None


def _section(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``obj[key]`` when it is an object, else an empty one."""
    v = obj.get(key)
    return v if isinstance(v, Mapping) else {}


def _second(obj: Mapping[str, Any]) -> int | None:
    """The row's second (its 1-s bucket since the timed phase began): ``second`` when given,
    else from ``t`` (a tick at ``t`` = 4.001 closes bucket 3)."""
    s = obj.get("second")
    if isinstance(s, int) and not isinstance(s, bool):
        return s
    f = _num(s)
    if f is not None and f == int(f):
        return int(f)
    t = _num(obj.get("t"))
    if t is not None and t > 0:
        return max(0, round(t) - 1)
    return None


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One second of a level. GPU figures are means over the GPUs; ``None``: not known."""

    second: int
    """The 1-s bucket since the timed phase began (0 = the first second)."""
    tok_s: float | None = None
    """The client's output tok/s in this second."""
    running: float | None = None
    """Requests the server was running."""
    waiting: float | None = None
    """Requests waiting in the server's queue."""
    kv_pct: float | None = None
    """The server's KV cache usage, percent."""
    sm_clock: float | None = None
    """SM clock, MHz (mean over the GPUs)."""
    power: float | None = None
    """Power draw, W (mean over the GPUs)."""
    power_cap: float | None = None
    """Power limit, W (mean over the GPUs)."""

    @classmethod
    def from_json(cls, obj: Any) -> "TimelineRow | None":
        """A ``timeline.jsonl`` line (or a live ``timeline`` event's ``row``); None when it has no second."""
        if not isinstance(obj, Mapping):
            return None
        second = _second(obj)
        if second is None or not 0 <= second <= MAX_SECOND:
            return None
        c, g, v = (_section(obj, k) for k in ("client", "gpu", "server"))
        kv = _num(v.get("kv"))
        return cls(
            second,
            tok_s=_num(c.get("tok_s")),
            running=_num(v.get("running")),
            waiting=_num(v.get("waiting")),
            kv_pct=None if kv is None else 100.0 * kv,
            sm_clock=_mean(g.get("sm_clock")),
            power=_mean(g.get("power")),
            power_cap=_mean(g.get("power_limit")),
        )

    @classmethod
    def from_tick(cls, ev: Mapping[str, Any]) -> "TimelineRow | None":
        """The client's part of a second, from a bench ``tick`` event (a run without a host-side
        timeline still charts its tok/s)."""
        second = _second(ev)
        if second is None or not 0 <= second <= MAX_SECOND:
            return None
        return cls(second, tok_s=_num(ev.get("tok_s")))

    def merged(self, newer: "TimelineRow") -> "TimelineRow":
        """This second with ``newer``'s known values over it (a value is never replaced by None)."""
        changes = {f: getattr(newer, f) for f in _VALUE_FIELDS if getattr(newer, f) is not None}
        return replace(self, **changes) if changes else self


#: the value fields of a row (all but ``second``)
_VALUE_FIELDS = tuple(f.name for f in fields(TimelineRow))[1:]


def _validity(v: Any) -> tuple[Finding, ...] | None:
    """A summary's ``validity`` list as (rule, evidence) pairs; None when it was not checked."""
    if not isinstance(v, list):
        return None
    return tuple((str(f.get("rule", "?")), str(f.get("evidence", ""))) for f in v if isinstance(f, Mapping))


@dataclass(frozen=True, slots=True)
class TimelineSnapshot:
    """One level's timeline: at most one row a second, sorted by second."""

    label: str = ""
    """What the level is (``C=16``, a run id)."""
    rows: tuple[TimelineRow, ...] = ()
    """The seconds known, in order (gaps are seconds without a row)."""
    validity: tuple[Finding, ...] | None = None
    """The level's validity findings; None: not checked (yet)."""
    run_id: str | None = None
    """The level's result folder."""
    live: bool = False
    """The level is still running."""
    measures: str = ""
    """The level's workload and what the server said of it (:func:`workload_measures`)."""

    @property
    def seconds(self) -> int:
        """The length of the time axis: the last second + 1 (0 without rows)."""
        return self.rows[-1].second + 1 if self.rows else 0

    def values(self, name: str, length: int | None = None) -> tuple[float | None, ...]:
        """``name``'s value at every second ``0 .. length-1`` (None where unknown)."""
        n = self.seconds if length is None else length
        out: list[float | None] = [None] * n
        for r in self.rows:
            if r.second < n:
                out[r.second] = getattr(r, name)
        return tuple(out)

    def has(self, name: str) -> bool:
        return any(getattr(r, name) is not None for r in self.rows)

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[Any],
        *,
        label: str = "",
        validity: Any = None,
        run_id: str | None = None,
        live: bool = False,
        max_rows: int = MAX_ROWS,
        measures: str = "",
    ) -> "TimelineSnapshot":
        """Rows (``timeline.jsonl`` objects or :class:`TimelineRow`) in any order, with gaps or
        repeated seconds: one row a second (a repeated second merges, the later value wins),
        sorted, the last ``max_rows`` seconds kept. ``validity``: a summary's ``validity`` list."""
        by_second: dict[int, TimelineRow] = {}
        for raw in rows:
            row = raw if isinstance(raw, TimelineRow) else TimelineRow.from_json(raw)
            if row is None:
                continue
            old = by_second.get(row.second)
            by_second[row.second] = row if old is None else old.merged(row)
        keep = sorted(by_second)[-max_rows:] if max_rows > 0 else []
        v = validity if isinstance(validity, tuple) or validity is None else _validity(validity)
        return cls(label, tuple(by_second[s] for s in keep), v, run_id, live, measures)


def workload_measures(summary: Mapping[str, Any]) -> str:
    """One line of a level's workload and the figures that belong to it, from its summary:
    ``workload shared_prefix · prefix cache hit 88.9% · spec accept length 2.41 (rate 47.0%) ·
    dispatch lag p99 0.4 ms``; a figure the server did not give is left out. Summaries from
    before workloads were recorded sent random token ids."""
    wl = summary.get("workload")
    name = wl.get("name") if isinstance(wl, Mapping) else None
    parts = [f"workload {visible(name)[:40] if isinstance(name, str) and name else 'random'}"]
    hit = _num(summary.get("prefix_cache_hit_rate"))
    if hit is not None:
        parts.append(f"prefix cache hit {hit * 100:.1f}%")
    length = _num(summary.get("spec_decode_acceptance_length"))
    if length is not None:
        rate = _num(summary.get("spec_decode_acceptance_rate"))
        parts.append(f"spec accept length {length:.2f}" + (f" (rate {rate * 100:.1f}%)" if rate is not None else ""))
    lag = _num(summary.get("dispatch_lag_p99_ms"))
    if lag is not None:
        parts.append(f"dispatch lag p99 {lag:.1f} ms")
    return " · ".join(parts)


# ---------------------------------------------------------------------- live feed


class _Level:
    __slots__ = ("label", "live", "rows", "run_id", "validity")

    def __init__(self, label: str, run_id: str | None) -> None:
        self.label = label
        self.run_id = run_id
        self.rows: OrderedDict[int, TimelineRow] = OrderedDict()
        self.validity: tuple[Finding, ...] | None = None
        self.live = True


def level_label(ev: Mapping[str, Any]) -> str:
    """``C=16``, or ``4.0 req/s`` for a rate level without a concurrency cap."""
    c, rate = ev.get("concurrency"), ev.get("request_rate")
    if c is not None:
        return f"C={c}"
    if rate not in (None, "inf"):
        return f"{rate} req/s"
    lv = ev.get("level")
    return f"level {lv + 1}" if isinstance(lv, int) else "level"


class TimelineFeed:
    """A benchmark's progress events in, one :class:`TimelineSnapshot` per level out.

    ``level_start`` opens a level; ``tick`` gives its client tok/s, ``timeline`` (the host's
    row for that second) everything else; ``level_done`` closes it with its validity
    findings. Bounded: ``max_rows`` seconds a level, ``max_levels`` levels. Not thread-safe:
    one worker feeds it.
    """

    def __init__(self, *, max_rows: int = MAX_ROWS, max_levels: int = MAX_LEVELS) -> None:
        self.max_rows = max_rows
        self.max_levels = max_levels
        self._levels: OrderedDict[int, _Level] = OrderedDict()

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(self._levels)

    def run_ids(self) -> dict[int, str]:
        """Level -> its result folder's run id (levels that announced one)."""
        return {k: lv.run_id for k, lv in self._levels.items() if lv.run_id}

    def _level(self, ev: Mapping[str, Any]) -> tuple[int, _Level] | None:
        k = ev.get("level")
        if not isinstance(k, int) or isinstance(k, bool):
            return None
        lv = self._levels.get(k)
        if lv is None:
            lv = self._open(k, level_label(ev), ev.get("run_id"))
        return k, lv

    def _open(self, k: int, label: str, run_id: Any) -> _Level:
        lv = _Level(label, str(run_id) if run_id else None)
        self._levels[k] = lv
        while len(self._levels) > self.max_levels:
            self._levels.popitem(last=False)
        return lv

    def _put(self, lv: _Level, row: TimelineRow) -> None:
        old = lv.rows.get(row.second)
        late = old is None and bool(lv.rows) and row.second < next(reversed(lv.rows))
        lv.rows[row.second] = row if old is None else old.merged(row)
        if late:
            lv.rows = OrderedDict(sorted(lv.rows.items()))  # a second that came late: keep them in order
        while len(lv.rows) > self.max_rows:
            lv.rows.popitem(last=False)

    def on_event(self, ev: Mapping[str, Any]) -> int | None:
        """Take one event; returns the level whose snapshot changed (None: nothing did)."""
        kind = ev.get("type")
        if kind == "level_start":
            k = ev.get("level")
            if not isinstance(k, int) or isinstance(k, bool):
                return None
            self._levels.pop(k, None)  # a level that starts again starts empty
            self._open(k, level_label(ev), ev.get("run_id"))
            return k
        if kind not in ("tick", "timeline", "level_done"):
            return None
        got = self._level(ev)
        if got is None:
            return None
        k, lv = got
        if kind == "tick":
            row = TimelineRow.from_tick(ev)
        elif kind == "timeline":
            row = TimelineRow.from_json(ev.get("row"))
        else:
            summary = _section(ev, "summary")
            lv.validity = _validity(summary.get("validity"))
            lv.live = False
            if not lv.run_id and (ev.get("run_id") or summary.get("run_id")):
                lv.run_id = str(ev.get("run_id") or summary.get("run_id"))
            return k
        if row is None:
            return None
        self._put(lv, row)
        return k

    def merge_rows(self, level: int, rows: Iterable[Any], validity: Any = None) -> bool:
        """Rows read back from the level's stored ``timeline.jsonl`` (complete where the live
        feed may have missed some) over what the feed has; ``validity``: the stored summary's."""
        lv = self._levels.get(level)
        if lv is None:
            return False
        changed = False
        for raw in rows:
            row = raw if isinstance(raw, TimelineRow) else TimelineRow.from_json(raw)
            if row is not None:
                self._put(lv, row)
                changed = True
        v = _validity(validity)
        if v is not None:
            lv.validity, changed = v, True
        return changed

    def finish(self) -> None:
        """The run ended: no level is live any more."""
        for lv in self._levels.values():
            lv.live = False

    def snapshot(self, level: int) -> TimelineSnapshot:
        lv = self._levels.get(level)
        if lv is None:
            return TimelineSnapshot()
        return TimelineSnapshot(lv.label, tuple(lv.rows.values()), lv.validity, lv.run_id, lv.live)


# ---------------------------------------------------------------------- figures


@dataclass(frozen=True, slots=True)
class Line:
    """One series on a panel: a value (or None) for every second of the figure's axis."""

    label: str
    values: tuple[float | None, ...]
    tone: str = "a"
    """``a`` / ``b``: the first and second series; ``limit``: a reference line (the power cap)."""
    short: str = ""
    """A shorter label for a narrow legend (``A`` for ``A (sglang-base)``); empty: the label."""

    @property
    def has_data(self) -> bool:
        return any(v is not None for v in self.values)


@dataclass(frozen=True, slots=True)
class Panel:
    """One chart of the stack."""

    key: str
    title: str
    unit: str
    lines: tuple[Line, ...]
    y_from_zero: bool = True
    """The y axis starts at 0 (else at the data's low end: clocks)."""
    y_max: float | None = None
    """A fixed top of the y axis (100 for percentages)."""
    missing: tuple[str, ...] = ()
    """Sides of an overlay with no data for this panel (the other side's is drawn)."""

    @property
    def has_data(self) -> bool:
        """Some series other than a reference line has a value: else the panel says "no data"."""
        return any(ln.has_data for ln in self.lines if ln.tone != "limit")


@dataclass(frozen=True, slots=True)
class ValidityNote:
    """A side's validity findings (None: not checked)."""

    side: str
    findings: tuple[Finding, ...] | None


@dataclass(frozen=True, slots=True)
class TimelineFigure:
    """Stacked panels on one time axis: seconds ``0 .. seconds`` since the timed phase began."""

    title: str
    seconds: int
    panels: tuple[Panel, ...]
    notes: tuple[ValidityNote, ...] = ()
    live: bool = False

    @property
    def empty(self) -> bool:
        return not any(p.has_data for p in self.panels)


#: (key, title, unit, y_from_zero, y_max) of the panels, top to bottom
PANELS = (
    ("tok_s", "client throughput", "tok/s", True, None),
    ("kv_pct", "KV cache", "%", True, 100.0),
    ("queue", "queue", "requests", True, None),
    ("sm_clock", "SM clock", "MHz", False, None),
    ("power", "power", "W, mean per GPU", True, None),
)


def _cap_line(label: str, snaps: Sequence[TimelineSnapshot], n: int) -> Line | None:
    """One power-cap line: the caps' highest value each second (None without any)."""
    caps = [s.values("power_cap", n) for s in snaps if s.has("power_cap")]
    if not caps:
        return None
    vals: list[float | None] = []
    for i in range(n):
        known = [x for x in (c[i] for c in caps) if x is not None]
        vals.append(max(known) if known else None)
    return Line(label, tuple(vals), "limit")


def figure(snap: TimelineSnapshot, title: str | None = None) -> TimelineFigure:
    """The stacked panels of one level."""
    n = snap.seconds
    panels = []
    for key, name, unit, zero, top in PANELS:
        lines: tuple[Line, ...]
        if key == "queue":
            lines = (Line("running", snap.values("running", n), "a"), Line("waiting", snap.values("waiting", n), "b"))
        elif key == "power":
            cap = _cap_line("cap", [snap], n)
            lines = (Line("power", snap.values("power", n), "a"),) + ((cap,) if cap else ())
        else:
            lines = (Line(name, snap.values(key, n), "a"),)
        panels.append(Panel(key, name, unit, lines, zero, top))
    notes = (ValidityNote(snap.label or "this level", snap.validity),)
    return TimelineFigure(snap.label if title is None else title, n, tuple(panels), notes, snap.live)


def _short(label: str) -> str:
    return label.split(" (", 1)[0] if " (" in label else ""


def overlay(
    a: TimelineSnapshot, b: TimelineSnapshot, a_label: str = "A", b_label: str = "B", title: str = ""
) -> TimelineFigure:
    """A's and B's timelines on one axis (second ``i`` of both is ``i`` s after each one's
    timed phase began), each panel with an A and a B line. The queue becomes two panels
    (running, waiting): four lines in one strip would not read."""
    n = max(a.seconds, b.seconds)
    panels = []
    for key, name, unit, zero, top in PANELS:
        keys = (("running", "queue: running"), ("waiting", "queue: waiting")) if key == "queue" else ((key, name),)
        for field_, title_ in keys:
            la = Line(a_label, a.values(field_, n), "a", _short(a_label))
            lb = Line(b_label, b.values(field_, n), "b", _short(b_label))
            lines: tuple[Line, ...] = (la, lb)
            if key == "power":
                cap = _cap_line("cap", [a, b], n)
                lines += (cap,) if cap else ()
            missing = tuple(ln.short or ln.label for ln in (la, lb) if not ln.has_data)
            panels.append(
                Panel(
                    field_,
                    title_,
                    "requests" if key == "queue" else unit,
                    lines,
                    zero,
                    top,
                    missing if len(missing) == 1 else (),
                )
            )
    notes = (ValidityNote(a_label, a.validity), ValidityNote(b_label, b.validity))
    return TimelineFigure(title, n, tuple(panels), notes, a.live or b.live)


def validity_text(findings: tuple[Finding, ...] | None) -> str:
    """``valid``, ``not checked`` or the rule names."""
    if findings is None:
        return "not checked"
    return "valid" if not findings else ", ".join(r for r, _ in findings)


__all__ = [
    "MAX_LEVELS",
    "MAX_ROWS",
    "PANELS",
    "Line",
    "Panel",
    "TimelineFeed",
    "TimelineFigure",
    "TimelineRow",
    "TimelineSnapshot",
    "ValidityNote",
    "figure",
    "level_label",
    "overlay",
    "validity_text",
]
