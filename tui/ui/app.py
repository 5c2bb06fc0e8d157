"""The Textual application: modes (Status / Launch / Bench / Compare / Tune), bindings,
command palette, and the data path from collectors to screens.

Data path: one worker per collector in the group ``poll-<target>``
(``exit_on_error=False``), each a chained loop (:mod:`tunedeck.ui.polling`: the
next poll starts only after the previous one ended; never ``set_interval`` +
``exclusive``), posts a message carrying an immutable snapshot to the app
(:mod:`tunedeck.ui.messages`; state messages coalesce). The app keeps the latest
snapshots (``app.latest``) and the GPU histories (``app.gpu_history``),
and republishes each snapshot on a signal that screens subscribe to:
``gpu_signal`` (GpuStatus), ``host_signal`` (HostStats), ``server_signal``
(tuple[ServerStats, ...]), ``link_signal`` (LinkState). One
``Worker.StateChanged`` handler turns a crashed collector into a visible
state and restarts it.

Adding a screen: one line in :data:`~tunedeck.ui.modes.MODE_REGISTRY` (the modes
and when each is offered: :mod:`tunedeck.ui.modes`). Screens read
``app.latest`` (newest GpuStatus / HostStats / servers / LinkState) and
subscribe to the signals above; bindings carry ids, so ``[keymap]`` in
the config file remaps them (:mod:`tunedeck.ui.keymap`), and every binding of the
current screen is also a command-palette entry (:mod:`tunedeck.ui.palette`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import TYPE_CHECKING, Any, Callable

from textual import on
from textual.app import App, UnknownModeError
from textual.binding import Binding
from textual.screen import Screen
from textual.signal import Signal
from textual.worker import Worker, WorkerState

from tunedeck.collectors.sources import BackoffFn, Sources
from tunedeck.model import GpuStatus, HostStats, LinkState, ServerStats
from tunedeck.ui.bindings import KEYS, QUIT
from tunedeck.ui.messages import GpuSamples, HostSamples, HostStateChanged, ServerSamples
from tunedeck.ui.modes import MODE_REGISTRY, ModeSpec, mode_bindings, screen_factory
from tunedeck.ui.palette import TunedeckCommands
from tunedeck.ui.polling import Latest, Poller, close_host, lift_refusal
from tunedeck.util.retry import delay as default_backoff
from tunedeck.widgets.gpu_table import GpuHistory
from tunedeck.widgets.server_panel import ServerHistory

if TYPE_CHECKING:  # pragma: no cover
    from tunedeck.hostops.hosts import Host


log = logging.getLogger(__name__)


class TunedeckApp(App[int]):
    """tunedeck's dashboard."""

    CSS_PATH = "app.tcss"
    TITLE = "tunedeck"
    DEFAULT_MODE = "status"
    COMMANDS = App.COMMANDS | {TunedeckCommands}
    BINDINGS = [
        *mode_bindings(),
        Binding("r", "reconnect", "Reconnect", tooltip="Reconnect to the host now", id="reconnect"),
        KEYS,
        Binding("H", "hosts", "Hosts", tooltip="Switch to another host (~/.ssh/config, used before, demo)", id="hosts"),
        QUIT,
    ]

    @property
    def _background_screens(self) -> list[Screen[Any]]:
        """The screens that show through the top one: none under an opaque screen. Textual 8
        lists the screen right under the top one even then; it counts as current, and each of
        its messages (the signals it follows) repaints the whole top screen: a run view over the
        status screen rendered every line of its log about three times a second for nothing."""
        if self.screen.styles.background.a == 1:
            return []
        return super()._background_screens

    def __init__(
        self,
        host: "Host | None" = None,
        *,
        sources: Sources | None = None,
        target: str | None = None,
        interval: float = 1.0,
        sample_timeout: float = 10.0,
        backoff: BackoffFn | None = None,
        restart_delay: float = 5.0,
        history: int = 60,
        modes: dict[str, ModeSpec] | None = None,
        initial_mode: str = "status",
        close_host: bool = True,
        demo: bool = False,
        sim: bool = False,
        keymap: dict[str, str] | None = None,
        host_factory: Callable[[str], tuple["Host | None", Sources]] | None = None,
    ) -> None:
        if sources is None:
            if host is None:
                raise ValueError("TunedeckApp needs a host or sources")
            from tunedeck.collectors.sources import default_sources

            sources = default_sources(host, interval=interval)
        self.host = host
        """The target host (None when the app runs on injected sources only)."""
        self.target = target or (host.target if host is not None else "local")
        """The host as the user named it (header, message keys, worker group)."""
        self.sources = sources
        self.demo = demo
        """True when the host is the built-in simulator (screens swap executables for ``tunedeck sim``)."""
        self.sim = sim and not demo
        """``--sim``: every launch, pre-flight and A/B runs the simulator from the host-side runtime."""
        self._user_keymap = keymap
        self.host_factory = host_factory
        """target → (host, sources) for the host switcher (default: the real host and collectors)."""
        self.interval = interval
        self.sample_timeout = sample_timeout
        self.backoff: BackoffFn = backoff or default_backoff
        self.restart_delay = restart_delay
        self.close_host = close_host
        self.mode_specs = dict(modes if modes is not None else MODE_REGISTRY)
        """Every mode tunedeck knows (available or not)."""
        self.available_modes: list[str] = []
        """Modes whose screen exists."""
        self._initial_mode = initial_mode
        super().__init__()
        for mode, spec in self.mode_specs.items():
            factory = screen_factory(self, spec.screen)
            if factory is not None:
                self.add_mode(mode, factory)
                self.available_modes.append(mode)
        self.latest = Latest.connecting(self.target, sources)
        self.poller = self._poller()
        """The poll loops of the host (:class:`~tunedeck.ui.polling.Poller`)."""
        self.runs: dict[str, Any] = {}
        """Runs still alive on the host (run id → RunRecord), found by reattaching on start."""
        self.gpu_history = GpuHistory(maxlen=history)
        """Bounded per-GPU utilization and memory histories (fed while hidden too)."""
        self.server_history = ServerHistory(maxlen=history)
        """Bounded per-server running / waiting / KV % / tok/s histories (the status sparklines)."""
        self.gpu_signal: Signal[GpuStatus] = Signal(self, "gpu")
        self.host_signal: Signal[HostStats] = Signal(self, "host")
        self.server_signal: Signal[tuple[ServerStats, ...]] = Signal(self, "servers")
        self.link_signal: Signal[LinkState] = Signal(self, "link")
        self._update_subtitle()

    def _apply_keymap(self) -> None:
        from tunedeck.ui.keymap import apply_keymap

        apply_keymap(self, self._user_keymap)

    def _poller(self) -> Poller:
        return Poller(
            self,
            self.target,
            self.sources,
            settings=self,
            link_ok=lambda: self.latest.link.ok,
        )

    # ------------------------------------------------------------------ lifecycle
    #: set by :meth:`run` (a terminal session): the start-up heap is frozen after the first frame
    _freeze_heap = False

    def run(self, *args: Any, **kwargs: Any) -> int | None:
        self._freeze_heap = True  # not under Pilot: a test process runs hundreds of apps
        return super().run(*args, **kwargs)

    def _freeze_startup_heap(self) -> None:
        """Keep the start-up heap (Textual, the imports, the screens: ~85,000 objects that live as
        long as the app) out of every later collection, as the simulator and the benchmark client
        do: a full collection walked all of it every ~20 s, 65-70 ms each, about a sixth of the
        idle dashboard's CPU."""
        gc.collect()
        gc.freeze()

    def on_mount(self) -> None:
        if self._freeze_heap:
            self.call_after_refresh(self._freeze_startup_heap)
        self._apply_keymap()
        if self._initial_mode != self.current_mode and self._initial_mode in self.available_modes:
            self.switch_mode(self._initial_mode)
        self.start_polling()
        if self.host is not None:
            self.run_worker(self._reattach(), name="reattach", group="reattach", exit_on_error=False)
            from tunedeck.ui.screens.hosts import remember_host

            remember_host(self.target)  # offered by the host switcher next time

    async def _reattach(self) -> None:
        """Adopt the runs still alive on the host (launched earlier, from here or elsewhere):
        their local records are merged so the server panel can open them."""
        from tunedeck.hostops.hosts import HostError
        from tunedeck.services.journal import reread_runs

        try:
            recs = await asyncio.wait_for(reread_runs(self.host), self.sample_timeout * 3)  # type: ignore[arg-type]
        except (HostError, OSError, asyncio.TimeoutError, TimeoutError) as e:
            log.warning("reattach failed: %s", e)
            return
        self.runs = {r.run_id: r for r in recs}
        if recs:
            names = ", ".join(r.profile or r.run_id for r in recs[:4])
            self.notify(f"reattached {len(recs)} running server(s): {names}", title="Runs")

    async def on_unmount(self) -> None:
        await self.stop_polling()
        await close_host(self.target, self.sources, self.host if self.close_host else None)

    # ------------------------------------------------------------------ workers
    def start_polling(self) -> None:
        self.poller.start()

    async def stop_polling(self, timeout: float = 5.0) -> None:
        """Cancel the poll workers and wait until they (and the processes they hold) ended."""
        await self.poller.stop(timeout)

    @on(Worker.StateChanged)
    def _worker_state(self, event: Worker.StateChanged) -> None:
        if event.worker.group == self.poller.group and event.state == WorkerState.ERROR:
            self.poller.crashed(event.worker)

    # ------------------------------------------------------------------ messages
    @on(GpuSamples)
    def _gpu_samples(self, message: GpuSamples) -> None:
        if message.host != self.target:
            return
        status = message.status
        self.latest.gpu = status
        self.gpu_history.add(status)
        if self.sources.host is None:  # no host sampler: the GPU feed tells the link state
            link = self.latest.link_from_gpu(status)
            if link is not None:
                self._apply_link(link)
        self.gpu_signal.publish(status)

    @on(HostSamples)
    def _host_samples(self, message: HostSamples) -> None:
        if message.host == self.target:
            self.latest.host = message.stats
            self.host_signal.publish(message.stats)

    @on(ServerSamples)
    def _server_samples(self, message: ServerSamples) -> None:
        if message.host == self.target:
            self.latest.servers = message.servers
            self.server_history.add(message.servers)
            self.server_signal.publish(message.servers)

    @on(HostStateChanged)
    def _host_state(self, message: HostStateChanged) -> None:
        if message.host == self.target:
            self._apply_link(message.link)

    def _apply_link(self, link: LinkState) -> None:
        self.latest.link = link
        self._update_subtitle()
        self.link_signal.publish(link)

    def _update_subtitle(self) -> None:
        link = self.latest.link
        word = {
            "connected": "connected",
            "connecting": "connecting…",
            "unreachable": "unreachable",
            "failed": "failed",
            "error": "collector error",
        }.get(link.state, link.state)
        self.sub_title = f"{self.target} · {word}"

    def on_launch_screen_launch_requested(self, message: Any) -> None:
        """The launch form asked to run a profile: open the run view, which launches it
        detached on the host (refusals shown there) and follows its startup and log."""
        if self.host is None:
            self.notify("no target host to launch on", severity="error")
            return
        from tunedeck.ui.screens.run import RunScreen

        cmd, profile = message.command, message.profile
        self.push_screen(
            RunScreen.for_launch(
                self.host,
                list(cmd.argv),
                cmd.env_dict,
                engine=cmd.engine,
                port=profile.port or None,
                profile=profile.name,
                demo=self.demo,
                python=profile.python,
            )
        )

    # ------------------------------------------------------------------ actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "mode":
            mode = str(parameters[0]) if parameters else ""
            if mode not in self.available_modes:
                return False
            return None if mode == self.current_mode else True
        return True

    async def action_mode(self, mode: str) -> None:
        """Switch to a top-level screen."""
        if mode in self.available_modes and mode != self.current_mode:
            try:
                await self.switch_mode(mode)
            except Exception as e:
                log.error("opening the %s screen failed", mode, exc_info=True)
                self.notify(
                    f"cannot open {self.mode_specs[mode].title}: {type(e).__name__}: {e}",
                    severity="error",
                    timeout=8,
                    markup=False,
                )

    def key_rows(self) -> list[tuple[str, str, str, bool]]:
        """(keys, description, tooltip, enabled) for the bindings of the current screen, the
        focused tunedeck widget and the app (Textual's own cursor keys are left out); keys bound
        to the same action are shown together ("enter, e"), after any keymap remapping."""
        nodes: list[Any] = []
        focused = self.screen.focused
        while focused is not None and focused is not self.screen:
            if type(focused).__module__.split(".")[0] == "tunedeck":
                nodes.append(focused)
            focused = focused.parent  # type: ignore[assignment]
        nodes += [self.screen, self]
        active = self.active_bindings
        by_action: dict[str, Any] = {}
        for key, ab in active.items():
            by_action.setdefault(ab.binding.action, []).append((key, ab))
        rows: list[tuple[str, str, str, bool]] = []
        seen: set[str] = set()
        for node in nodes:
            own = [
                b
                for cls in type(node).__mro__
                if cls.__module__.split(".")[0] == "tunedeck" and "BINDINGS" in cls.__dict__
                for b in cls.__dict__["BINDINGS"]
            ]
            for b in Binding.make_bindings(own):
                if not b.description or b.action in seen:
                    continue
                seen.add(b.action)
                # the keys that reach this action now (a [keymap] remap included), else the declared ones
                live = [(k, ab) for k, ab in by_action.get(b.action, []) if ab.node is node]
                keys = list(dict.fromkeys([k.strip() for k in b.key.split(",")] + [k for k, _ in live]))
                enabled = bool(live[0][1].enabled) if live else True
                rows.append(
                    (
                        ", ".join(self.get_key_display(b.with_key(k)) for k in keys),
                        b.description,
                        b.tooltip or "",
                        enabled,
                    )
                )
        return rows

    def action_keys(self) -> None:
        """Show the keys of the current screen (``?``)."""
        from tunedeck.ui.screens.modals import KeysModal

        if isinstance(self.screen, KeysModal):
            return
        name = type(self.screen).__name__.removesuffix("Screen") or "screen"
        self.push_screen(KeysModal(name, self.key_rows()))

    def action_hosts(self) -> None:
        """Pick another host (k9s contexts): ``~/.ssh/config``, hosts used before, local, demo."""
        from tunedeck.ui.screens.hosts import HostsModal, host_choices

        if isinstance(self.screen, HostsModal):
            return

        def chosen(target: str | None) -> None:
            if target and target != self.target:
                self.run_worker(
                    self.switch_host(target),
                    name="switch-host",
                    group="switch-host",
                    exclusive=True,
                    exit_on_error=False,
                )

        self.push_screen(HostsModal(self.target, host_choices(self.target)), chosen)

    def _make_host(self, target: str) -> tuple["Host | None", Sources]:
        if self.host_factory is not None:
            return self.host_factory(target)
        from tunedeck.collectors.sources import default_sources
        from tunedeck.services.targets import get_host

        host = get_host(None if target == "demo" else target, demo=target == "demo")
        return host, default_sources(host, interval=self.interval)

    async def switch_host(self, target: str) -> None:
        """Leave the current host (its collectors end first) and show ``target``."""
        from tunedeck.ui.screens.hosts import remember_host

        try:
            host, sources = self._make_host(target)
        except Exception as e:  # noqa: BLE001 - HostError, UnsafeInput, no simulator: say why, stay
            self.notify(f"cannot switch to {target}: {e}", severity="error", markup=False, timeout=8)
            return
        if self.current_mode != "status" and "status" in self.available_modes:
            await self.switch_mode("status")
        # a view pushed over Status (a run, a deployment) shows the old host's run: close it
        while len(self.screen_stack) > 1:
            await self.pop_screen()
        await self.stop_polling()
        old_host = self.host if self.close_host and self.host is not host else None
        await close_host(self.target, self.sources, old_host)
        self.host, self.sources, self.demo = host, sources, target == "demo"
        self.target = target
        self.runs = {}
        self.latest = Latest.connecting(self.target, sources)
        self.poller = self._poller()
        self.gpu_history = GpuHistory(maxlen=self.gpu_history.maxlen)
        self.server_history = ServerHistory(maxlen=self.server_history.maxlen)
        # the other modes were built for the old host: build them again when next opened
        for mode in list(self.available_modes):
            if mode == self.current_mode:
                continue
            try:
                await self.remove_mode(mode)
            except UnknownModeError:  # never opened yet
                pass
            factory = screen_factory(self, self.mode_specs[mode].screen)
            if factory is not None:
                self.add_mode(mode, factory)
        self._apply_link(self.latest.link)
        redraw = getattr(self.screen, "redraw", None)
        if redraw is not None:
            redraw()
        self.start_polling()
        if self.host is not None:
            self.run_worker(self._reattach(), name="reattach", group="reattach", exit_on_error=False)
        remember_host(target)
        self.notify(f"now on {target}", title="Host")

    def action_reconnect(self) -> None:
        """Restart every collector now (also retries auth / host-key failures)."""
        if any(w.group == "reconnect" and not w.is_finished for w in self.workers):
            return  # one already under way
        self._apply_link(LinkState(self.target, "connecting"))
        lift_refusal(self.host)
        self.run_worker(self._restart_polling(), name="reconnect", group="reconnect")

    async def _restart_polling(self) -> None:
        await self.poller.restart()
        if self.host is not None:
            await self._reattach()


def make_app(
    host: "Host | None" = None,
    *,
    sources: Sources | None = None,
    gpu: Any = None,
    host_source: Any = None,
    servers: Any = None,
    **kwargs: Any,
) -> TunedeckApp:
    """Build the dashboard for ``host`` (real collectors), or for injected sources:
    either a :class:`Sources` or the three separately (tests, screenshots)."""
    if sources is None and (gpu is not None or host_source is not None or servers is not None):
        sources = Sources(gpu=gpu, host=host_source, servers=servers)
    return TunedeckApp(host, sources=sources, **kwargs)


def make_fleet_app(members: Any, **kwargs: Any) -> Any:
    """The dashboard over several hosts (:class:`tunedeck.ui.fleet_app.FleetApp`): a row group per host."""
    from tunedeck.ui.fleet_app import make_fleet_app as make

    return make(members, **kwargs)
