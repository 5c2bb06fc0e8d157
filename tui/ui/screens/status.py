"""The status screen: GPUs, host and servers of the target host at a glance.

It draws from the app's latest snapshots (``app.latest``) and subscribes
to the app's signals (``gpu_signal``, ``host_signal``, ``server_signal``,
``link_signal``). While another mode is shown it skips drawing and marks
itself dirty; on resume it redraws once from the latest snapshots
(:class:`~tunedeck.ui.screens.live.LiveScreen`). The GPU feed is its fast
feed. The histories are kept by the app, so sparklines have no gaps.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence, cast

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header

from tunedeck.model import GpuStatus, HostStats, LinkState, ServerStats
from tunedeck.ui.screens.live import LiveScreen
from tunedeck.widgets._fmt import set_border_title
from tunedeck.widgets.gpu_table import GpuProcessTable, GpuStateLine, GpuTable
from tunedeck.widgets.host_banner import HostBanner
from tunedeck.widgets.host_panel import HostPanel
from tunedeck.widgets.line_table import LineTable
from tunedeck.widgets.server_panel import ServerPanel

if TYPE_CHECKING:  # pragma: no cover
    from tunedeck.ui.app import TunedeckApp


class StatusScreen(LiveScreen):
    """GPU table and process table, host panel, server panel, link banner."""

    BINDINGS = [
        Binding(
            "p",
            "toggle_processes",
            "Processes",
            tooltip="Show or hide the GPU process table",
            id="status-toggle-processes",
        ),
        Binding("g", "focus_gpus", "GPUs", tooltip="Focus the GPU table", id="status-focus-gpus", show=False),
        Binding(
            "R",
            "runs",
            "Runs",
            tooltip="Every server tunedeck launched on this host (/ filters, a header click sorts)",
            id="status-runs",
        ),
        Binding(
            "o",
            "open_run",
            "Open run",
            tooltip="Log, startup progress and stop for the highlighted server (enter on a server row does the same)",
            id="status-open-run",
        ),
    ]

    DEFAULT_CSS = """
    StatusScreen #gpu-panel { height: auto; border: round $primary 50%; }
    StatusScreen #bottom { height: 1fr; min-height: 7; }
    StatusScreen HostPanel { width: 40; height: 100%; }
    StatusScreen #procs-panel { width: 1fr; height: 100%; border: round $primary 50%; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._pending_host = False
        self._pending_servers = False

    @property
    def tapp(self) -> "TunedeckApp":
        return cast("TunedeckApp", self.app)

    def compose(self) -> ComposeResult:
        yield Header(icon="◆")
        yield HostBanner(id="banner")
        with Vertical(id="gpu-panel"):
            yield GpuStateLine(id="gpu-state")
            yield GpuTable(id="gpus")
        yield ServerPanel(id="servers")
        with Horizontal(id="bottom"):
            with Vertical(id="procs-panel"):
                yield GpuProcessTable(id="procs")
            yield HostPanel(id="host")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#gpu-panel").border_title = "GPUs"
        self.query_one("#procs-panel").border_title = "GPU processes"
        app = self.tapp
        app.gpu_signal.subscribe(self, self._on_gpu)
        app.host_signal.subscribe(self, self._on_host)
        app.server_signal.subscribe(self, self._on_servers)
        app.link_signal.subscribe(self, self._on_link)
        self.call_after_refresh(self.redraw)

    def fit_tables(self) -> Sequence[Any]:
        """Tables pick the columns that fit (80×24 keeps Temp/Power/Clock and Wait/KV/tok/s/TTFT)."""
        return (self.query_one(GpuTable), self.query_one(ServerPanel).table)

    # ---------------------------------------------------------------- signals
    def _on_gpu(self, status: GpuStatus) -> None:
        # A state other than ok (lost, no GPUs) is drawn at once; a burst of samples leaves one
        # pending draw of the newest status.
        self.feed_changed(at_once=status.state != "ok")

    def _gpu_heartbeat(self) -> bool:
        """True while GPU samples arrive steadily: other panels then ride along with the
        next GPU draw, so one screen update per second carries everything."""
        return self.tapp.latest.gpu.state == "ok" and time.monotonic() - self._last_draw < 1.2

    def _on_host(self, stats: HostStats) -> None:
        if not self._visible():
            return
        if self._gpu_heartbeat():
            self._pending_host = True
        else:
            self._show_host(stats)

    def _on_servers(self, servers: tuple[ServerStats, ...]) -> None:
        if not self._visible():
            return
        if self._gpu_heartbeat():
            self._pending_servers = True
        else:
            self.query_one(ServerPanel).update_servers(servers, self.tapp.server_history)

    def _on_link(self, link: LinkState) -> None:
        # The banner is cheap and must be right when the user comes back: always update.
        self.query_one(HostBanner).set_link(link)
        if self._visible():
            self._show_host(self.tapp.latest.host)

    # ---------------------------------------------------------------- drawing
    def redraw(self) -> None:
        """Draw everything from the app's latest snapshots."""
        self._dirty = False
        latest = self.tapp.latest
        self.query_one(HostBanner).set_link(latest.link)
        self._show_gpu(latest.gpu)
        self._show_host(latest.host)
        if latest.servers is not None:
            self.query_one(ServerPanel).update_servers(latest.servers, self.tapp.server_history)

    def draw_feed(self) -> None:
        self._show_gpu(self.tapp.latest.gpu)

    def _show_gpu(self, status: GpuStatus) -> None:
        self._last_draw = time.monotonic()
        latest = self.tapp.latest
        if self._pending_host:
            self._pending_host = False
            self._show_host(latest.host)
        if self._pending_servers and latest.servers is not None:
            self._pending_servers = False
            self.query_one(ServerPanel).update_servers(latest.servers, self.tapp.server_history)
        self.query_one(GpuStateLine).set_status(status)
        if status.gpus:
            self.query_one(GpuTable).update_gpus(status.gpus, self.tapp.gpu_history)
            self.query_one(GpuProcessTable).update_processes(status.processes)
            n = len(status.gpus)
            set_border_title(self.query_one("#gpu-panel"), f"GPUs ({n})")

    def _show_host(self, stats: HostStats | None) -> None:
        stale = not self.tapp.latest.link.ok and stats is not None
        self.query_one(HostPanel).update_stats(stats, stale=stale)

    # ---------------------------------------------------------------- actions
    def action_toggle_processes(self) -> None:
        panel = self.query_one("#procs-panel")
        panel.display = not panel.display

    def action_runs(self) -> None:
        from tunedeck.ui.screens.runs import RunsScreen

        self.app.push_screen(RunsScreen())

    def action_focus_gpus(self) -> None:
        self.query_one(GpuTable).focus()

    # ---------------------------------------------------------------- runs
    def server_for_row(self, row_key: str) -> ServerStats | None:
        """The server snapshot behind a server-table row key (``srv-<name>-<port>``)."""
        for s in self.query_one(ServerPanel).servers or ():
            if f"srv-{s.name}-{s.port}" == row_key:
                return s
        return None

    def action_open_run(self) -> None:
        panel = self.query_one(ServerPanel)
        servers = panel.servers or ()
        if not servers:
            self.notify("no servers on this host", severity="warning")
            return
        table = panel.table
        row = table.cursor_row if 0 <= table.cursor_row < table.row_count else 0
        server = self.server_for_row(table.row_keys()[row])
        if server is not None:
            self.open_run(server)

    @on(LineTable.RowSelected, "#server-table")
    def _server_selected(self, event: LineTable.RowSelected) -> None:
        event.stop()
        server = self.server_for_row(event.row_key)
        if server is not None:
            self.open_run(server)

    def open_run(self, server: ServerStats) -> None:
        """Open the run view (log, startup progress, stop) of a server tunedeck launched."""
        app = self.tapp
        if server.run_id is None:
            self.notify(f"{server.name} was not launched by tunedeck: no log to show", severity="warning")
            return
        from tunedeck.hostops.runstore import RunStore
        from tunedeck.services.deploy import DeploymentStore

        dep = DeploymentStore().for_run(server.run_id)
        if dep is not None:  # one node of a deployment: the deployment's view, every node at once
            from tunedeck.ui.screens.deployment import DeploymentScreen

            self.app.push_screen(DeploymentScreen(dep))
            return
        if app.host is None:
            self.notify("no host to follow the run on", severity="error")
            return
        rec = app.runs.get(server.run_id) or RunStore().load(server.run_id)
        if rec is None or rec.run_dir is None:
            self.notify(
                f"run {server.run_id}: no local record yet (press r to reconnect and reattach)", severity="warning"
            )
            return
        from tunedeck.ui.screens.run import RunScreen

        self.app.push_screen(RunScreen(app.host, rec))
