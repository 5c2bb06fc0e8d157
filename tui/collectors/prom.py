"""A small Prometheus text-format (0.0.4) parser and histogram helpers.

Enough for SGLang's and vLLM's ``/metrics``: gauges, counters (samples end in
``_total``), histograms (``_bucket{le=…}``, ``_sum``, ``_count``), label
values with ``\\\\``, ``\\"`` and ``\\n`` escapes, ``NaN``/``+Inf``/``-Inf`` and
optional timestamps. ``*_created`` samples are dropped. Malformed lines are
skipped (counted in :attr:`Metrics.bad_lines`), never raised.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from tunedeck.util.safety import safe_line

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Labels
    value: float

    def label(self, key: str, default: str = "") -> str:
        for k, v in self.labels:
            if k == key:
                return v
        return default


@dataclass(frozen=True, slots=True)
class Histogram:
    """Cumulative buckets (upper bound, count), sorted, ending in +Inf; plus sum and count."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def quantile(self, q: float) -> float:
        return histogram_quantile(q, self.buckets)

    def mean(self) -> float:
        return self.sum / self.count if self.count > 0 else math.nan

    def minus(self, older: "Histogram | None") -> "Histogram":
        """The observations made since ``older`` (a window); self when there is no usable older one."""
        if older is None:
            return self
        old = dict(older.buckets)
        if self.count < older.count or any(c < old.get(le, 0.0) for le, c in self.buckets):
            return self  # counter reset (server restarted): everything is new
        return Histogram(
            tuple((le, c - old.get(le, 0.0)) for le, c in self.buckets),
            self.sum - older.sum,
            self.count - older.count,
        )


@dataclass
class Metrics:
    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    bad_lines: int = 0

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def get(self, name: str, where: Callable[[Sample], bool] | None = None) -> list[Sample]:
        return [s for s in self.samples if s.name == name and (where is None or where(s))]

    def has(self, name: str) -> bool:
        return any(s.name == name for s in self.samples)

    def sum(self, name: str) -> float | None:
        """Sum over all label sets; None when the metric is absent."""
        vals = [s.value for s in self.samples if s.name == name and not math.isnan(s.value)]
        return sum(vals) if vals else None

    def mean(self, name: str) -> float | None:
        vals = [s.value for s in self.samples if s.name == name and not math.isnan(s.value)]
        return sum(vals) / len(vals) if vals else None

    def first(self, *names: str, agg: str = "sum") -> float | None:
        """The first of ``names`` present, aggregated (``sum`` or ``mean``)."""
        for n in names:
            v = self.sum(n) if agg == "sum" else self.mean(n)
            if v is not None:
                return v
        return None

    def histogram(self, name: str, where: Callable[[Sample], bool] | None = None) -> Histogram | None:
        """The histogram ``name`` (base name), buckets summed over label sets (except ``le``)."""
        acc: dict[float, float] = {}
        total_sum = total_count = 0.0
        found = False
        for s in self.samples:
            if where is not None and not where(s):
                continue
            if s.name == name + "_bucket":
                le = _parse_float(s.label("le", "+Inf"))
                if le is None:
                    continue
                acc[le] = acc.get(le, 0.0) + s.value
                found = True
            elif s.name == name + "_sum":
                total_sum += s.value
            elif s.name == name + "_count":
                total_count += s.value
                found = True
        if not found:
            return None
        buckets = tuple(sorted(acc.items()))
        if not buckets or not math.isinf(buckets[-1][0]):
            buckets = buckets + ((math.inf, total_count),)
        if total_count == 0 and buckets:
            total_count = buckets[-1][1]
        return Histogram(buckets, total_sum, total_count)


def _parse_float(text: str) -> float | None:
    t = text.strip()
    low = t.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    try:
        return float(t)
    except ValueError:
        return None


#: one ``key="value"`` of a label set (after any blanks and commas before it)
_LABEL_RE = re.compile(r'[ \t,]*([\w:]+)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"', re.S)
#: the end of a label set
_LABELS_END_RE = re.compile(r"[ \t,]*\}")
_ESCAPE_RE = re.compile(r"\\(.)", re.S)
_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


def _unescape(value: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), value) if "\\" in value else value


def _parse_labels(text: str, i: int, shown: dict[str, str] | None = None) -> tuple[Labels, int] | None:
    """Parse ``{a="x",b="y"}`` starting at ``text[i] == '{'``; return labels and the index after '}'.
    ``shown``: label values already made safe to show (a scrape repeats the same few values)."""
    labels: list[tuple[str, str]] = []
    i += 1
    while True:
        end = _LABELS_END_RE.match(text, i)
        if end is not None:
            return tuple(labels), end.end()
        m = _LABEL_RE.match(text, i)
        if m is None:
            return None
        raw = m.group(2)
        value = shown.get(raw) if shown is not None else None
        if value is None:
            value = safe_line(_unescape(raw))  # a label value is host text: shown as is
            if shown is not None:
                shown[raw] = value
        labels.append((m.group(1), value))
        i = m.end()


def parse(text: str) -> Metrics:
    """Parse an exposition text."""
    m = Metrics()
    shown: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                m.types[parts[2]] = parts[3].strip()
            continue
        i = 0
        n = len(line)
        while i < n and line[i] not in "{ \t":
            i += 1
        name = line[:i]
        labels: Labels = ()
        if i < n and line[i] == "{":
            parsed = _parse_labels(line, i, shown)
            if parsed is None:
                m.bad_lines += 1
                continue
            labels, i = parsed
        rest = line[i:].split()
        if not name or not rest:
            m.bad_lines += 1
            continue
        value = _parse_float(rest[0])
        if value is None:
            m.bad_lines += 1
            continue
        if name.endswith("_created"):
            continue
        m.samples.append(Sample(name, labels, value))
    return m


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """Prometheus ``histogram_quantile`` on cumulative (le, count) buckets: linear within a bucket."""
    bs = sorted(buckets)
    if not bs:
        return math.nan
    total = bs[-1][1]
    if total <= 0 or math.isnan(total):
        return math.nan
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in bs:
        if c >= rank:
            if math.isinf(le):
                return prev_le  # in the +Inf bucket: the highest finite bound
            if c == prev_c:
                return le
            lower = prev_le if prev_le > 0 or le > 0 else le
            return lower + (le - lower) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    return bs[-1][0]


def labels_dict(labels: Labels) -> Mapping[str, str]:
    return dict(labels)
