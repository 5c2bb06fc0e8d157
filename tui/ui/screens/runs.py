"""The runs list: every server tunedeck launched on this host (local records), newest first,
and every multi-node deployment as one row (its member runs are not listed apart);
``/`` filters, a header click sorts, ``enter`` opens the run view (log, progress, stop) or the
deployment view (a bar per node, the merged log, stop as a unit).

While it is open it re-reads the host's processes every :data:`REREAD_EVERY` seconds (one
re-read in flight at a time): a run whose process died reads ``failed`` with its cause within
one poll, whether or not anything follows its log."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from tunedeck.ui.bindings import back, filter_rows
from tunedeck.util.safety import visible
from tunedeck.widgets.filter_table import FilterTable, TableFilter

_COLUMNS = (
    ("run", "Run", 12),
    ("profile", "Profile", 15),
    ("engine", "Engine", 6),
    ("port", "Port", 5),
    ("status", "Status", 8),
    ("started", "Started", 17),
    ("rc", "rc", 3),
)
#: the cause of a failed (or stalled) run or deployment: the last column
_CAUSE_COLUMN = ("cause", "Cause", 60)
#: shown only when there are deployments
_NODES_COLUMN = ("nodes", "Nodes", 24)
#: row-key prefix of a deployment's row
_DEPLOY = "deploy:"
log = logging.getLogger(__name__)

#: seconds between two re-reads of the host's processes while the view is open
REREAD_EVERY = 3.0
#: statuses whose diagnosis is the run's cause
_CAUSED = ("failed", "stalled", "stale", "exited")
_STATUS_STYLE = {
    "ready": "green",
    "failed": "bold red",
    "starting": "yellow",
    "stopped": "dim",
    "exited": "dim",
    "stalled": "bold yellow",
    "partial": "bold yellow",
}


class RunsScreen(Screen[None]):
    """Runs launched by tunedeck on the app's host."""

    DEFAULT_CSS = """
    RunsScreen #runs-title { height: 1; background: $boost; padding: 0 1; }
    RunsScreen #runs { height: 1fr; }
    RunsScreen #runs-advice { height: auto; max-height: 3; padding: 0 1; color: $text-muted; }
    """
    BINDINGS = [
        filter_rows("runs", "runs"),
        Binding("f5", "reload", "Reload", tooltip="Read the run records again", id="runs-reload"),
        back("runs"),
    ]

    def __init__(
        self,
        records: list[Any] | None = None,
        *,
        deployments: list[Any] | None = None,
        host_factory: Any = None,
    ) -> None:
        super().__init__()
        self._given = records
        self._given_deployments = deployments
        #: node → Host for the deployment view (default: tunedeck.services.targets)
        self.host_factory = host_factory
        #: run id → record
        self.records: dict[str, Any] = {}
        #: deployment id → record
        self.deployments: dict[str, Any] = {}
        self._columns: tuple[tuple[str, str, int], ...] = ()
        #: node → its connection, for re-reading the deployments' processes
        self._node_conns: dict[str, Any] = {}
        #: how many reads of the records have been shown (they are read in a thread)
        self.loads = 0
        #: one read at a time (F5 and the re-read loop): each starts after the last was shown, so
        #: a read begun before a re-read saved new statuses never lands after it
        self._reading = asyncio.Lock()

    def compose(self) -> ComposeResult:
        yield Static(id="runs-title")
        with Vertical():
            yield TableFilter("#runs", id="runs-filter")
            yield FilterTable(id="runs", zebra_stripes=True)
            yield Static(id="runs-advice")
        yield Footer()

    def on_mount(self) -> None:
        self.action_reload()
        self.table.focus()
        if self._given is None and getattr(self.app, "host", None) is not None:
            self.run_worker(self._reread_loop(), name="runs-reread", group="runs-reread", exit_on_error=False)

    async def _node_hosts(self) -> dict[str, Any]:
        """One connection per node of the deployments not yet settled, opened once and kept
        while the view is open (closed on unmount)."""
        from tunedeck.services.deploy import SETTLED, DeploymentStore, open_hosts

        recs = await asyncio.to_thread(DeploymentStore().all)
        need = sorted({n for r in recs if r.status not in SETTLED for n in r.nodes} - set(self._node_conns))
        if need:
            self._node_conns.update(await open_hosts(need, self.host_factory))
        return self._node_conns

    async def on_unmount(self) -> None:
        from tunedeck.services.deploy import close_hosts

        conns, self._node_conns = self._node_conns, {}
        await close_hosts(conns)

    async def _reread_loop(self) -> None:
        """Re-read the host's runs from their processes (a dead one settled with its cause, the
        journal corrected), then the rows; chained, never overlapping."""
        from tunedeck.hostops.hosts import HostError
        from tunedeck.services.deploy import reread_deployments
        from tunedeck.services.journal import reread_runs

        host = self.app.host  # type: ignore[attr-defined]
        while True:
            t0 = time.monotonic()
            try:
                await asyncio.wait_for(reread_runs(host), 60)
                if self._given_deployments is None:
                    await reread_deployments(hosts=await self._node_hosts())
            except (HostError, OSError, asyncio.TimeoutError) as e:
                log.warning("runs view: re-reading the runs on %s failed: %s", getattr(host, "target", "?"), e)
            else:
                await self._reload()
            await asyncio.sleep(max(0.0, REREAD_EVERY - (time.monotonic() - t0)))

    def _set_columns(self, columns: tuple[tuple[str, str, int], ...]) -> None:
        if columns == self._columns:
            return
        table = self.table
        table.clear(columns=True)
        if table.sort_column not in (None, *(key for key, _, _ in columns)):
            table.sort_column = None
        for key, label, width in columns:
            table.add_column(label, key=key, width=width)
        self._columns = columns

    def _read(self, target: str | None) -> tuple[list[Any], list[Any], list[str]]:
        """The run and deployment records (given, or read from their stores: call it in a thread),
        and a line for each store that could not be read."""
        from tunedeck.hostops.runstore import RunStore
        from tunedeck.services.deploy import DeploymentStore

        errors: list[str] = []
        recs: list[Any] = []
        deps: list[Any] = []
        try:
            recs = list(self._given) if self._given is not None else RunStore().all(target)
        except OSError as e:
            errors.append(f"run records unreadable: {e}")
        try:
            deps = list(self._given_deployments) if self._given_deployments is not None else DeploymentStore().all()
        except OSError as e:
            errors.append(f"deployment records unreadable: {e}")
        return recs, deps, errors

    @property
    def table(self) -> FilterTable:
        return self.query_one("#runs", FilterTable)

    def action_reload(self) -> None:
        self._reload_worker()

    @work(group="runs-reload", exclusive=True)
    async def _reload_worker(self) -> None:
        await self._reload()

    async def _reload(self) -> None:
        """Read the records in a thread (one file a run, and the store only grows), then show them."""
        target = getattr(self.app, "target", None)
        async with self._reading:
            recs, deps, errors = await asyncio.to_thread(self._read, target)
            for line in errors:
                self.notify(line, severity="error", markup=False)
            self._show(target, recs, deps)
            self.loads += 1

    def _show(self, target: str | None, recs: list[Any], deps: list[Any]) -> None:
        members = {m.run_id for d in deps for m in d.members}
        recs = [r for r in recs if r.run_id not in members]  # shown as their deployment's row
        recs.sort(key=lambda r: r.created or 0.0, reverse=True)
        deps.sort(key=lambda d: d.created or 0.0, reverse=True)
        self.records = {r.run_id: r for r in recs}
        self.deployments = {d.deploy_id: d for d in deps}
        self._set_columns(_COLUMNS + ((_NODES_COLUMN,) if deps else ()) + (_CAUSE_COLUMN,))
        extra: tuple[str, ...] = ("",) if deps else ()
        rows = []
        for d in deps:
            rows.append(
                (
                    _DEPLOY + d.deploy_id,
                    (
                        d.deploy_id,
                        d.profile or "-",
                        d.engine,
                        "N/A" if not d.http_port else str(d.http_port),
                        Text(d.status, style=_STATUS_STYLE.get(d.status, "")),
                        _when(d.created),
                        "",
                        Text(f"{len(d.nodes)}: " + ", ".join(d.nodes)),
                        Text(visible(d.diagnosis or "") if d.status in _CAUSED else ""),
                    ),
                )
            )
        for r in recs:
            rows.append(
                (
                    r.run_id,
                    (
                        r.run_id,
                        r.profile or "-",
                        r.engine,
                        "N/A" if r.port is None else str(r.port),
                        Text(r.status, style=_STATUS_STYLE.get(r.status, "")),
                        _when(r.started or r.created),
                        "" if r.rc is None else str(r.rc),
                        *extra,
                        Text(visible(r.diagnosis or "") if r.status in _CAUSED else ""),
                    ),
                )
            )
        self.table.set_rows(rows)
        what = f"({len(recs)})" if not deps else f"({len(recs)}, {len(deps)} multi-node)"
        self.query_one("#runs-title", Static).update(
            Text(f"Runs on {target or 'this host'} {what} · enter opens · / filters · header sorts")
        )

    def action_filter(self) -> None:
        self.query_one(TableFilter).open()

    def on_key(self, event: events.Key) -> None:
        self.query_one(TableFilter).screen_key(event)

    @on(DataTable.RowHighlighted, "#runs")
    def _advise(self, event: DataTable.RowHighlighted) -> None:
        """Under the table: what to do about the highlighted run's failure (docs/log-diagnosis.md)."""
        from tunedeck.logparse import advice_for

        key = str(event.row_key.value)
        rec: Any = self.deployments.get(key.removeprefix(_DEPLOY)) if key.startswith(_DEPLOY) else None
        rec = rec if rec is not None else self.records.get(key)
        tip = ""
        if rec is not None and rec.status in _CAUSED:
            tip = advice_for(rec.diagnosis, getattr(rec, "proof", None))
        self.query_one("#runs-advice", Static).update(Text(f"advice: {tip}" if tip else ""))

    @on(DataTable.RowSelected, "#runs")
    def _open(self, event: DataTable.RowSelected) -> None:
        event.stop()
        key = str(event.row_key.value)
        if key.startswith(_DEPLOY):
            dep = self.deployments.get(key.removeprefix(_DEPLOY))
            if dep is not None:
                from tunedeck.ui.screens.deployment import DeploymentScreen

                self.app.push_screen(DeploymentScreen(dep, host_factory=self.host_factory))
            return
        rec = self.records.get(key)
        host = getattr(self.app, "host", None)
        if rec is None:
            return
        if host is None or rec.run_dir is None:
            self.notify(f"run {rec.run_id}: no host or no run folder to follow", severity="warning", markup=False)
            return
        from tunedeck.ui.screens.run import RunScreen

        self.app.push_screen(RunScreen(host, rec))

    def action_close(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%MZ", time.gmtime(t)) if t else "N/A"  # UTC, like the logs


__all__ = ["RunsScreen"]
