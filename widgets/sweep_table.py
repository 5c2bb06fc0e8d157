"""The end report of a benchmark: one row per level, like ``vllm bench serve`` prints at the end
of a sweep, with each level's client-health mark and, under the table, the reasons.

Renders an immutable :class:`tunedeck.model.SweepReport` (rows appear as levels finish).
Latencies in ms; N/A where a level has no value (never 0).
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from tunedeck.fmt import fmt
from tunedeck.model import ClientHealth, SweepLevel, SweepReport
from tunedeck.widgets._fmt import theme_color

#: (header, cell) per column, headers on two lines (80 columns hold the table); the goodput
#: column only when the run had targets
COLUMNS: tuple[tuple[str, str], ...] = (
    ("\nLevel", "label"),
    ("Done/\nfail", "counts"),
    ("\nReq/s", "request_throughput"),
    ("Out\ntok/s", "output_throughput"),
    ("TTFT\nmean", "mean_ttft_ms"),
    ("TTFT\np99", "p99_ttft_ms"),
    ("TPOT\nmean", "mean_tpot_ms"),
    ("ITL\np99", "p99_itl_ms"),
    ("Good\nreq/s", "goodput"),
    ("Cache\nhit %", "prefix_cache_hit_pct"),
    ("Spec\nacc len", "spec_accept_length"),
    ("Disp\np99", "dispatch_lag_p99_ms"),
    ("\nClient", "health"),
)
#: columns shown only when some level has a value (the goodput targets, the server's counters, a schedule)
OPTIONAL = ("goodput", "prefix_cache_hit_pct", "spec_accept_length", "dispatch_lag_p99_ms")
SPECS = {
    "request_throughput": ".2f",
    "output_throughput": ".1f",
    "mean_ttft_ms": ".1f",
    "p99_ttft_ms": ".1f",
    "mean_tpot_ms": ".2f",
    "p99_itl_ms": ".2f",
    "goodput": ".2f",
    "prefix_cache_hit_pct": ".1f",
    "spec_accept_length": ".2f",
    "dispatch_lag_p99_ms": ".1f",
}


def health_cell(health: ClientHealth) -> str:
    """The Client column: ``ok``, ``client-bound``, ``machine busy`` or ``client-bound, busy``."""
    if health.client_bound and health.machine_busy:
        return "client-bound, busy"
    return health.mark


def title(report: SweepReport) -> str:
    n = len(report.levels)
    if n == 1 and report.planned <= 1:
        return "Result (latencies in ms)"
    if report.done:
        return f"Sweep: {n} levels (latencies in ms)"
    return f"Sweep: {n} of {report.planned} levels done (latencies in ms)"


class SweepTable(Static):
    """Shows one :class:`SweepReport`; call :meth:`show` with a new one."""

    DEFAULT_CSS = """
    SweepTable { height: auto; padding: 0 1; }
    """

    def __init__(self, **kw: Any) -> None:
        super().__init__("", **kw)
        self.report: SweepReport = SweepReport()
        """The report shown."""

    def _cell(self, lv: SweepLevel, key: str) -> Text:
        if key == "label":
            return Text(lv.label + (" partial" if lv.partial else ""))
        if key == "counts":
            return Text(
                f"{lv.completed}/{lv.failed}",
                justify="right",
                style=theme_color(self, "error", "red") if lv.failed else "",
            )
        if key == "health":
            if lv.health.ok:
                return Text("ok", style="dim")
            colour = theme_color(self, "error" if lv.health.client_bound else "warning", "yellow")
            return Text(health_cell(lv.health), style=f"bold {colour}")
        return Text(fmt(getattr(lv, key), SPECS[key]), justify="right")

    def render_report(self, report: SweepReport) -> Group:
        table = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            padding=0,
            expand=False,
            title=title(report),
            title_justify="left",
            title_style="bold",
        )
        cols = [(h, k) for h, k in COLUMNS if k not in OPTIONAL or report.has(k)]
        for header, key in cols:
            table.add_column(header, justify="left" if key in ("label", "health") else "right", no_wrap=key == "health")
        for lv in report.levels:
            table.add_row(*(self._cell(lv, key) for _h, key in cols))
        notes = Text()
        flagged = [(lv, line) for lv in report.levels for line in lv.health.reasons()]
        for lv, line in flagged:
            if notes:
                notes.append("\n")
            notes.append(f"{lv.label} ", style="bold")
            notes.append(line)  # untrusted text: never markup
        if report.levels and not flagged:
            notes.append("Client health: ok at every level (not client-bound, machine not busy)", style="dim")
        for lv in report.levels:
            for line in lv.notes:
                notes.append("\n")
                notes.append(f"{lv.label} ", style="bold")
                notes.append(line)  # untrusted text: never markup
        return Group(table, notes)

    def show(self, report: SweepReport) -> None:
        self.report = report
        self.update(self.render_report(report) if report.levels else "")


__all__ = ["COLUMNS", "OPTIONAL", "SweepTable", "health_cell", "title"]
