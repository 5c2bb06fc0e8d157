"""The fleet view: several hosts on one screen.

A row group per host (its GPUs summarised: count, model, mean util, memory used/total,
power, hottest GPU, servers ready, state; under the table, one line per host that does not
answer with its reason and retry countdown), ``enter`` / ``e``
expands a host to a row per GPU and collapses it again, ``E`` expands or collapses every
host; below, the servers of every host with a host column, and the multi-node deployments
(this machine's records) with a node among the hosts, each node marked up or down; ``enter``
on one opens its view.

It draws from the app's newest snapshots (``app.hosts``) when the app's ``fleet_signal``
names a host that changed, at most every :attr:`FleetScreen.MIN_REDRAW` seconds whatever
the number of hosts (a redraw writes only the cells that changed; the pace and the redraw on
coming back are :class:`~tunedeck.ui.screens.live.LiveScreen`'s).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence, cast

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Footer, Header

from tunedeck.ui.screens.live import LiveScreen
from tunedeck.widgets._fmt import set_border_title
from tunedeck.widgets.fleet_table import FleetDeploymentTable, FleetNotes, FleetServerTable, FleetTable

if TYPE_CHECKING:  # pragma: no cover
    from tunedeck.ui.fleet_app import FleetApp


class FleetScreen(LiveScreen):
    """Hosts (expandable to GPUs) and the servers of every host. The fast feed is every host's:
    they are coalesced into one redraw."""

    BINDINGS = [
        Binding(
            "e",
            "toggle_host",
            "Expand",
            tooltip="Show or hide the GPUs of the highlighted host (enter on a host row does the same)",
            id="fleet-toggle-host",
        ),
        Binding("E", "toggle_all", "Expand all", tooltip="Show or hide the GPUs of every host", id="fleet-toggle-all"),
        Binding("g", "focus_hosts", "Hosts", tooltip="Focus the host table", id="fleet-focus-hosts", show=False),
    ]

    DEFAULT_CSS = """
    FleetScreen #hosts-panel { height: auto; max-height: 3fr; border: round $primary 50%; }
    FleetScreen #servers-panel { height: auto; max-height: 1fr; border: round $primary 50%; }
    FleetScreen #deployments-panel { height: auto; max-height: 10; border: round $primary 50%; display: none; }
    FleetScreen #deployments-panel.-shown { display: block; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.expanded: set[str] = set()
        """Targets whose GPU rows are shown."""

    @property
    def fapp(self) -> "FleetApp":
        return cast("FleetApp", self.app)

    def compose(self) -> ComposeResult:
        yield Header(icon="◆")
        with Vertical(id="hosts-panel"):
            yield FleetTable(id="fleet-table")
            yield FleetNotes(id="fleet-notes")
        with Vertical(id="servers-panel"):
            yield FleetServerTable(id="fleet-servers")
        with Vertical(id="deployments-panel"):
            yield FleetDeploymentTable(id="fleet-deployments")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#servers-panel").border_title = "Servers"
        self.query_one("#deployments-panel").border_title = "Deployments"
        self.fapp.fleet_signal.subscribe(self, self._on_host)
        self.set_interval(1.0, self._tick)  # retry countdowns of hosts that are down
        self.call_after_refresh(self.redraw)

    def fit_tables(self) -> Sequence[Any]:
        return (self.query_one(FleetTable), self.query_one(FleetServerTable), self.query_one(FleetDeploymentTable))

    # ---------------------------------------------------------------- signals
    def _on_host(self, _target: str) -> None:
        self.feed_changed()

    def _tick(self) -> None:
        if self.is_current and any(h.link.state == "unreachable" for h in self.fapp.fleet_hosts()):
            self._on_host("")

    # ---------------------------------------------------------------- drawing
    def draw_feed(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        """Draw every host from the app's newest snapshots."""
        self._dirty = False
        self._last_draw = time.monotonic()
        hosts = self.fapp.fleet_hosts()
        table = self.query_one(FleetTable)
        table.update_fleet(hosts, self.expanded)
        self.query_one(FleetNotes).update_notes(hosts)
        self.query_one(FleetServerTable).update_servers(hosts)
        deployments = self.fapp.deployments
        self.query_one(FleetDeploymentTable).update_deployments(deployments, hosts)
        self.query_one("#deployments-panel").set_class(bool(deployments), "-shown")
        up = sum(1 for h in hosts if h.link.ok)
        gpus = sum(len(h.gpu.gpus) for h in hosts)
        set_border_title(self.query_one("#hosts-panel"), f"Hosts ({up}/{len(hosts)} up, {gpus} GPUs)")

    # ---------------------------------------------------------------- actions
    def toggle(self, target: str) -> None:
        """Show or hide the GPU rows of ``target``."""
        if target in self.expanded:
            self.expanded.discard(target)
        else:
            self.expanded.add(target)
        self.redraw()

    def action_toggle_host(self) -> None:
        target = self.query_one(FleetTable).target_at_cursor()
        if target is None:
            self.notify("no host highlighted", severity="warning")
            return
        self.toggle(target)

    def action_toggle_all(self) -> None:
        targets = [h.target for h in self.fapp.fleet_hosts()]
        self.expanded = set() if self.expanded >= set(targets) else set(targets)
        self.redraw()

    def action_focus_hosts(self) -> None:
        self.query_one(FleetTable).focus()

    @on(DataTable.RowSelected, "#fleet-deployments")
    def _deployment_selected(self, event: DataTable.RowSelected) -> None:
        """The deployment's view: a bar per node, the verdict, the merged log, stop."""
        event.stop()
        from tunedeck.services.deploy import DeploymentStore
        from tunedeck.ui.screens.deployment import DeploymentScreen

        deploy_id = str(event.row_key.value).removeprefix("dep:")
        rec = DeploymentStore().load(deploy_id)
        if rec is None:
            self.notify(f"deployment {deploy_id}: no local record", severity="warning", markup=False)
            return
        self.app.push_screen(DeploymentScreen(rec))

    @on(DataTable.RowSelected, "#fleet-table")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        key = str(event.row_key.value)
        if key.startswith("host:"):
            self.toggle(key[len("host:") :])
