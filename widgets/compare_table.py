"""The A/B comparison table: metric, A, B, delta and a coloured verdict per row.

Renders an immutable :class:`tunedeck.ab.compare.Comparison`; rows are keyed by
metric so a refreshed comparison updates cells in place.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widget import Widget
from textual.widgets import DataTable, Static

from tunedeck.ab.compare import Comparison, Row, fmt_pct
from tunedeck.ab.render import fmt_value

COLUMNS = (("metric", "Metric"), ("a", "A"), ("b", "B"), ("delta", "\u0394"), ("verdict", "Verdict"))


def _theme(widget: Widget, name: str, fallback: str) -> str:
    try:
        return widget.app.theme_variables.get(name, fallback) or fallback
    except Exception:  # noqa: BLE001 - not mounted yet
        return fallback


#: metric key → its compact name in the table (followed by the row's concurrency, if any)
SHORT_NAMES = {
    "single_output_tok_s": "1-stream output tok/s",
    "single_decode_tok_s": "1-stream decode tok/s",
    "peak_output_tok_s": "Peak output tok/s",
    "spec_acceptance_pct": "Spec acceptance %",
    "spec_accept_length": "Spec accept length",
    "prefix_cache_hit_pct": "Prefix cache hit %",
}
#: metric key → its compact name, for the figures of the whole run (no concurrency)
WHOLE_RUN_NAMES = {"startup_s": "Startup s", "failed_requests": "Failed requests"}
#: metric key prefix → the compact name of its family (one key per concurrency or SLO)
SHORT_PREFIXES = (
    ("output_tok_s_c", "Output tok/s"),
    ("ttft_p50", "TTFT p50 ms"),
    ("ttft_p99", "TTFT p99 ms"),
    ("tpot_median", "TPOT median ms"),
    ("itl_p99", "ITL p99 ms"),
)


class CompareTable(DataTable[Any]):
    """One keyed row per comparison metric; verdicts coloured by outcome."""

    DEFAULT_CSS = """
    CompareTable { height: auto; max-height: 24; }
    """

    def __init__(self, **kw: Any) -> None:
        super().__init__(zebra_stripes=True, cursor_type="row", **kw)
        self.comparison: Comparison | None = None
        """The comparison shown (None before the first one)."""
        self._labels: tuple[str, str] = ("A", "B")

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def _style(self, row: Row) -> str:
        if row.outcome == "better":
            return f"bold {_theme(self, 'success', 'green')}"
        if row.outcome == "worse":
            return f"bold {_theme(self, 'error', 'red')}"
        if row.outcome in ("noise", "same"):
            return _theme(self, "foreground-muted", "grey62") or "dim"
        return "dim"

    @staticmethod
    def short_label(row: Row) -> str:
        """A compact metric name for the table (the full one is in exports)."""
        c = f" C={row.concurrency}" if row.concurrency is not None else ""
        k = row.key
        if k in SHORT_NAMES:
            return SHORT_NAMES[k] + c
        if k in WHOLE_RUN_NAMES:
            return WHOLE_RUN_NAMES[k]
        for prefix, name in SHORT_PREFIXES:
            if k.startswith(prefix):
                return name + c
        return row.label

    def _cells(self, row: Row) -> dict[str, Text]:
        style = self._style(row)
        delta = "" if row.delta_pct is None or row.outcome == "same" else fmt_pct(row.delta_pct)
        return {
            "metric": Text(self.short_label(row)),
            "a": Text(fmt_value(row.a, row.unit), justify="right"),
            "b": Text(fmt_value(row.b, row.unit), justify="right"),
            "delta": Text(delta, justify="right", style=style),
            "verdict": Text(row.verdict, style=style),
        }

    def reset(self) -> None:
        """Show nothing (a new A/B started, or the last one ended without a comparison)."""
        self.comparison = None
        self.clear()

    def show(self, cmp: Comparison, *, compact: bool = False) -> None:
        """Show ``cmp``: update changed cells, add new rows, drop rows that went away. ``compact``
        (a narrow terminal): the side columns are headed A and B (the headline names them)."""
        labels = ("A", "B") if compact else (f"A {cmp.a_profile}".strip(), f"B {cmp.b_profile}".strip())
        old, old_labels = self.comparison, self._labels
        self.comparison, self._labels = cmp, labels
        keys = {r.key for r in cmp.rows}
        with self.app.batch_update():
            if old is None or old_labels != labels:
                self.clear(columns=True)  # new sides: headers (and widths) follow the profile names
                for key, label in COLUMNS:
                    self.add_column({"a": labels[0], "b": labels[1]}.get(key, label), key=key)
            for rk in list(self.rows):
                if rk.value not in keys:
                    self.remove_row(rk)
            for r in cmp.rows:
                cells = self._cells(r)
                if r.key in {k.value for k in self.rows}:
                    for col, val in cells.items():
                        self.update_cell(r.key, col, val)
                else:
                    self.add_row(*(cells[k] for k, _ in COLUMNS), key=r.key)
            self.refresh(layout=True)


class ConfigDiff(Static):
    """Flags and environment variables that differ between A and B."""

    DEFAULT_CSS = """
    ConfigDiff { height: auto; padding: 0 1; }
    """

    def reset(self) -> None:
        self.update("")

    def show(self, cmp: Comparison) -> None:
        t = Text()
        t.append("Configuration A \u2192 B: ", style="bold")
        if not cmp.config_diff:
            t.append("no difference in flags or env")
        for c in cmp.config_diff:
            t.append("\n  ")
            if c.kind == "unknown":
                t.append("? ", style=_theme(self, "warning", "yellow"))
                t.append(c.text[2:])
                continue
            if c.a is None:
                t.append("+ ", style=_theme(self, "success", "green"))
            elif c.b is None:
                t.append("\u2212 ", style=_theme(self, "error", "red"))
            else:
                t.append("~ ", style=_theme(self, "warning", "yellow"))
            t.append(c.text[2:] if c.text[:2] in ("+ ", "~ ") or c.text.startswith("\u2212 ") else c.text)
        if cmp.warnings:
            for w in cmp.warnings:
                t.append("\n")
                t.append("warning: ", style=f"bold {_theme(self, 'warning', 'yellow')}")
                t.append(w)
        t.append("\n")
        t.append(cmp.noise_method, style="dim")
        self.update(t)


__all__ = ["CompareTable", "ConfigDiff"]
