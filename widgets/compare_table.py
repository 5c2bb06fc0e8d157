"""The A/B comparison table: metric, A, B, delta and a coloured verdict per row.

Renders an immutable :class:`tui.ab.compare.Comparison`; rows are keyed by
metric so a refreshed comparison updates cells in place.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable, Static

from tui.ab.compare import Comparison, Row, fmt_pct
from tui.ab.render import fmt_value

COLUMNS = (("metric", "Metric"), ("a", "A"), ("b", "B"), ("delta", "\u0394"), ("verdict", "Verdict"))


def _theme(widget, name: str, fallback: str) -> str:
    try:
        return widget.app.theme_variables.get(name, fallback) or fallback
    except Exception:  # noqa: BLE001 - not mounted yet
        return fallback


class CompareTable(DataTable):
    """One keyed row per comparison metric; verdicts coloured by outcome."""

    DEFAULT_CSS = """
    CompareTable { height: auto; max-height: 24; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(zebra_stripes=True, cursor_type="row", **kw)
        self.comparison: Comparison | None = None
        """The comparison shown (None before the first one)."""

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

    def _cells(self, row: Row) -> dict[str, Text]:
        style = self._style(row)
        delta = "" if row.delta_pct is None or row.outcome == "same" else fmt_pct(row.delta_pct)
        return {
            "metric": Text(row.label),
            "a": Text(fmt_value(row.a, row.unit), justify="right"),
            "b": Text(fmt_value(row.b, row.unit), justify="right"),
            "delta": Text(delta, justify="right", style=style),
            "verdict": Text(row.verdict, style=style),
        }

    def show(self, cmp: Comparison) -> None:
        """Show ``cmp``: update changed cells, add new rows, drop rows that went away."""
        self.comparison = cmp
        self.columns["a"].label = Text(cmp.a)
        self.columns["b"].label = Text(cmp.b)
        keys = {r.key for r in cmp.rows}
        with self.app.batch_update():
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

    def show(self, cmp: Comparison) -> None:
        t = Text()
        t.append("Configuration A \u2192 B: ", style="bold")
        if not cmp.config_diff:
            t.append("no difference in flags or env")
        for c in cmp.config_diff:
            t.append("\n  ")
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
