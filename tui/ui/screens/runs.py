"""The runs list: every server tunedeck launched on this host (local records), newest first;
``/`` filters, a header click sorts, ``enter`` opens the run view (log, progress, stop)."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from widgets.filter_table import FilterTable, TableFilter

_COLUMNS = (
    ("run", "Run", 12),
    ("profile", "Profile", 15),
    ("engine", "Engine", 6),
    ("port", "Port", 5),
    ("status", "Status", 8),
    ("started", "Started", 17),
    ("rc", "rc", 3),
)
_STATUS_STYLE = {"ready": "green", "failed": "bold red", "starting": "yellow", "stopped": "dim", "exited": "dim"}


class RunsScreen(Screen[None]):
    """Runs launched by tunedeck on the app's host."""

    DEFAULT_CSS = """
    RunsScreen #runs-title { height: 1; background: $boost; padding: 0 1; }
    RunsScreen #runs { height: 1fr; }
    """
    BINDINGS = [
        Binding(
            "slash",
            "filter",
            "Filter",
            tooltip="Show only the runs matching some text (a header click sorts)",
            id="runs-filter",
        ),
        Binding("f5", "reload", "Reload", tooltip="Read the run records again", id="runs-reload"),
        Binding("escape", "close", "Back", id="runs-back"),
    ]

    def __init__(self, records: list[Any] | None = None) -> None:
        super().__init__()
        self._given = records
        #: run id → record
        self.records: dict[str, Any] = {}

    def compose(self) -> ComposeResult:
        yield Static(id="runs-title")
        with Vertical():
            yield TableFilter(id="runs-filter")
            yield FilterTable(id="runs", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#runs", FilterTable)
        for key, label, width in _COLUMNS:
            table.add_column(label, key=key, width=width)
        self.action_reload()
        table.focus()

    @property
    def table(self) -> FilterTable:
        return self.query_one("#runs", FilterTable)

    def action_reload(self) -> None:
        target = getattr(self.app, "target", None)
        if self._given is not None:
            recs = list(self._given)
        else:
            from tui.hostops.runstore import RunStore

            try:
                recs = RunStore().all(target)
            except OSError as e:
                self.notify(f"run records unreadable: {e}", severity="error", markup=False)
                recs = []
        recs.sort(key=lambda r: r.created or 0.0, reverse=True)
        self.records = {r.run_id: r for r in recs}
        rows = []
        for r in recs:
            when = r.started or r.created
            started = time.strftime("%Y-%m-%d %H:%MZ", time.gmtime(when)) if when else "N/A"  # UTC, like the logs
            rows.append(
                (
                    r.run_id,
                    (
                        r.run_id,
                        r.profile or "-",
                        r.engine,
                        "N/A" if r.port is None else str(r.port),
                        Text(r.status, style=_STATUS_STYLE.get(r.status, "")),
                        started,
                        "" if r.rc is None else str(r.rc),
                    ),
                )
            )
        self.table.set_rows(rows)
        self.query_one("#runs-title", Static).update(
            Text(f"Runs on {target or 'this host'} ({len(recs)}) · enter opens · / filters · header sorts")
        )

    def action_filter(self) -> None:
        self.query_one(TableFilter).open()

    def on_key(self, event: events.Key) -> None:
        box = self.query_one(TableFilter)
        if event.key == "slash" and not box.is_open and self.focused is self.table:
            event.stop()
            event.prevent_default()
            box.open()  # now: the keys typed after / are already queued for the table
            return
        if box.route(event):
            return
        if event.key == "escape" and box.is_open:
            event.stop()
            box.close(clear=True)
            self.table.set_filter("")
            self.table.focus()

    @on(Input.Changed, "#runs-filter")
    def _filter(self, event: Input.Changed) -> None:
        event.stop()
        self.table.set_filter(event.value)

    @on(Input.Submitted, "#runs-filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        event.stop()
        self.query_one(TableFilter).close(clear=False)
        self.table.focus()

    @on(DataTable.RowSelected, "#runs")
    def _open(self, event: DataTable.RowSelected) -> None:
        event.stop()
        rec = self.records.get(str(event.row_key.value))
        host = getattr(self.app, "host", None)
        if rec is None:
            return
        if host is None or rec.run_dir is None:
            self.notify(f"run {rec.run_id}: no host or no run folder to follow", severity="warning", markup=False)
            return
        from tui.ui.screens.run import RunScreen

        self.app.push_screen(RunScreen(host, rec))

    def action_close(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()


__all__ = ["RunsScreen"]
