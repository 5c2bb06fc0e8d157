"""The dashboard on several hosts at once (``tunedeck --host A --host B``, ``--host @GROUP``).

Each host is a :class:`~tunedeck.collectors.fleet.FleetMember`: its own Host (one SSH connection)
and its own sources (one host sampler), polled by its own three chained worker loops in the
group ``poll-<target>`` (``exit_on_error=False``), exactly as the single-host dashboard polls
its one host. The loops post the same messages (:mod:`tunedeck.ui.messages`, keyed by host, so a
newer one replaces an older one of the same host still queued); the app keeps the newest
snapshots of every host and names the host that changed on ``fleet_signal``. A host that
fails shows its state and reason while the others go on; an unreachable one is retried with
backoff and recovers by itself; a refused one (host key, auth) waits for ``r``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

from textual import on
from textual.app import App
from textual.binding import Binding
from textual.screen import Screen
from textual.signal import Signal
from textual.worker import Worker, WorkerState

from tunedeck.collectors.sources import BackoffFn
from tunedeck.model import DeploymentSummary
from tunedeck.ui.app import TunedeckApp
from tunedeck.ui.bindings import KEYS, QUIT
from tunedeck.ui.keymap import apply_keymap
from tunedeck.ui.messages import DeploymentSamples, GpuSamples, HostSamples, HostStateChanged, ServerSamples
from tunedeck.ui.palette import TunedeckCommands
from tunedeck.ui.polling import Latest, Poller, close_host, lift_refusal
from tunedeck.util.retry import delay as default_backoff
from tunedeck.widgets.fleet_table import FleetHost

if TYPE_CHECKING:  # pragma: no cover
    from tunedeck.collectors.fleet import FleetMember

log = logging.getLogger(__name__)


class FleetApp(App[int]):
    """tunedeck's dashboard over several hosts."""

    CSS_PATH = "app.tcss"
    TITLE = "tunedeck"
    COMMANDS = App.COMMANDS | {TunedeckCommands}
    BINDINGS = [
        Binding(
            "r",
            "reconnect",
            "Reconnect",
            tooltip="Try again now on every host that is down (also after a host-key or authentication refusal)",
            id="reconnect",
        ),
        KEYS,
        QUIT,
    ]

    # the single-host app's keymap, keys list and keys modal work unchanged here
    key_rows = TunedeckApp.key_rows
    action_keys = TunedeckApp.action_keys

    def __init__(
        self,
        members: Sequence["FleetMember"],
        *,
        interval: float = 1.0,
        sample_timeout: float = 10.0,
        backoff: BackoffFn | None = None,
        restart_delay: float = 5.0,
        close_host: bool = True,
        keymap: dict[str, str] | None = None,
        deployments_interval: float = 5.0,
    ) -> None:
        if not members:
            raise ValueError("FleetApp needs at least one host")
        self.members = {m.target: m for m in members}
        """target → member, in the order given."""
        self.interval = interval
        self.sample_timeout = sample_timeout
        self.backoff: BackoffFn = backoff or default_backoff
        self.restart_delay = restart_delay
        self.close_host = close_host
        self.deployments_interval = deployments_interval
        self._user_keymap = keymap
        self.mode_specs: dict[str, Any] = {}
        """No modes: the palette offers the bindings only."""
        self.available_modes: list[str] = []
        super().__init__()
        self.latest: dict[str, Latest] = {t: Latest.connecting(t, m.sources) for t, m in self.members.items()}
        """target → the newest snapshots of that host."""
        self.pollers: dict[str, Poller] = {t: self._poller(t) for t in self.members}
        """target → the poll loops of that host."""
        self.deployments: tuple[DeploymentSummary, ...] = ()
        """The deployments (this machine's records, not stopped) with a node in the fleet."""
        self.fleet_signal: Signal[str] = Signal(self, "fleet")
        """Publishes the target of a host whose snapshots changed."""
        self.sub_title = f"{len(self.members)} hosts"

    def get_default_screen(self) -> Screen[Any]:
        from tunedeck.ui.screens.fleet import FleetScreen

        return FleetScreen()

    def fleet_hosts(self) -> tuple[FleetHost, ...]:
        """Every host's newest snapshots, in the order given (what the fleet screen draws)."""
        return tuple(FleetHost(t, x.link, x.gpu, x.servers) for t, x in self.latest.items())

    # ------------------------------------------------------------------ lifecycle
    def on_mount(self) -> None:
        apply_keymap(self, self._user_keymap)
        for t in self.members:
            self.start_polling(t)
        self.run_worker(self._deployments_loop(), name="deployments", group="deployments", exit_on_error=False)

    async def on_unmount(self) -> None:
        await asyncio.gather(*(self.stop_polling(t) for t in self.members), return_exceptions=True)
        await asyncio.gather(
            *(close_host(t, m.sources, m.host if self.close_host else None) for t, m in self.members.items()),
            return_exceptions=True,
        )

    # ------------------------------------------------------------------ workers
    def _poller(self, target: str) -> Poller:
        return Poller(
            self,
            target,
            self.members[target].sources,
            settings=self,
            link_ok=lambda: self.latest[target].link.ok,
        )

    def start_polling(self, target: str) -> None:
        self.pollers[target].start()

    async def stop_polling(self, target: str, timeout: float = 5.0) -> None:
        """Cancel the host's poll workers and wait until they (and what they hold) ended."""
        await self.pollers[target].stop(timeout)

    async def _deployments_loop(self) -> None:
        """The deployments touching the fleet's hosts, every ``deployments_interval`` seconds:
        first re-read from their nodes' processes (a deployment whose nodes died reads failed
        within one poll), then from the local records (read in a thread: no disk I/O on the
        event loop)."""
        from tunedeck.collectors.fleet import deployments_on
        from tunedeck.services.deploy import reread_deployments

        targets = list(self.members)
        while True:
            try:
                recs, hosts = await asyncio.to_thread(self._live_deployments, targets)
                await reread_deployments(recs, hosts=hosts)
            except (OSError, ValueError) as e:
                log.warning("deployments not re-read from their nodes: %s", e)
            try:
                found = await asyncio.to_thread(deployments_on, targets)
            except Exception:
                log.exception("deployment records not read")
            else:
                self.post_message(DeploymentSamples(found))
            await asyncio.sleep(self.deployments_interval)

    def _live_deployments(self, targets: list[str]) -> tuple[list[Any], dict[str, Any]]:
        """The records of the deployments :func:`deployments_on` shows, and node → the fleet's
        own connection to it (a node outside the fleet, or one without a connection, is not
        re-read: no connection is opened for it)."""
        from tunedeck.collectors.fleet import deployments_on
        from tunedeck.services.deploy import DeploymentStore

        store = DeploymentStore()
        recs, hosts = [], {}
        for d in deployments_on(targets, store):
            rec = store.load(d.deploy_id)
            if rec is None:
                continue
            recs.append(rec)
            for node, target in zip(d.nodes, d.targets):
                m = self.members.get(target) if target is not None else None
                if m is not None and m.host is not None:
                    hosts[node] = m.host
        return recs, hosts

    @on(Worker.StateChanged)
    def _worker_state(self, event: Worker.StateChanged) -> None:
        if event.state != WorkerState.ERROR:
            return
        for poller in self.pollers.values():
            if event.worker.group == poller.group:
                poller.crashed(event.worker)

    # ------------------------------------------------------------------ messages
    @on(GpuSamples)
    def _gpu_samples(self, message: GpuSamples) -> None:
        latest = self.latest.get(message.host)
        if latest is None:
            return
        link = latest.link
        if self.members[message.host].sources.host is None:  # no host source: the GPU feed tells the link
            link = latest.link_from_gpu(message.status) or link
        self._changed(message.host, gpu=message.status, link=link)

    @on(HostSamples)
    def _host_samples(self, message: HostSamples) -> None:
        self._changed(message.host, host=message.stats)

    @on(ServerSamples)
    def _server_samples(self, message: ServerSamples) -> None:
        self._changed(message.host, servers=message.servers)

    @on(DeploymentSamples)
    def _deployment_samples(self, message: DeploymentSamples) -> None:
        if message.deployments != self.deployments:
            self.deployments = message.deployments
            self.fleet_signal.publish("")

    @on(HostStateChanged)
    def _host_state(self, message: HostStateChanged) -> None:
        self._changed(message.host, link=message.link)

    def _changed(self, target: str, **snapshots: Any) -> None:
        """The newest ``snapshots`` of ``target`` (:class:`Latest` fields), said on ``fleet_signal``;
        a host not in the fleet is ignored."""
        latest = self.latest.get(target)
        if latest is not None:
            self.latest[target] = replace(latest, **snapshots)
            self.fleet_signal.publish(target)

    # ------------------------------------------------------------------ actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "reconnect":
            return True if any(not x.link.ok for x in self.latest.values()) else None
        return True

    def action_reconnect(self) -> None:
        """Restart the collectors of every host that is not connected (also retries auth and
        host-key refusals); hosts that are up are left alone."""
        down = [t for t, x in self.latest.items() if not x.link.ok]
        if not down:
            self.notify("every host is connected")
            return
        for t in down:
            if any(w.group == f"reconnect-{t}" and not w.is_finished for w in self.workers):
                continue  # one already under way
            self.latest[t].link = replace(self.latest[t].link, state="connecting", retry_at=None)
            lift_refusal(self.members[t].host)
            self.run_worker(self.pollers[t].restart(), name="reconnect", group=f"reconnect-{t}")
            self.fleet_signal.publish(t)


def make_fleet_app(members: Sequence["FleetMember"], **kwargs: Any) -> FleetApp:
    """The fleet dashboard over ``members`` (real hosts and collectors, or injected sources)."""
    return FleetApp(members, **kwargs)


__all__ = ["FleetApp", "make_fleet_app"]
