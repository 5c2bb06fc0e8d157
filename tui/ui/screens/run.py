"""RunScreen: attach to a launched server: startup progress, live log, stop/restart.

Works standalone (push it from any App): ``app.push_screen(RunScreen(host, record))``.
The log is followed from byte 0 with :func:`follow_forever` (reconnects resume at
the consumed offset: no lost or repeated lines). The startup tracker cuts the bytes into
the lines shown and parses those same lines (each byte split, decoded, redacted and made
safe once); the progress widget renders its snapshot twice a second.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from tunedeck.fmt import eta
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.launcher import LaunchRefused, demo_argv, launch
from tunedeck.hostops.liveness import LinkWatch
from tunedeck.hostops.logfollow import LineSplitter, follow_forever, read_log
from tunedeck.hostops.runstop import StopResult, stop_run
from tunedeck.hostops.runstore import RunRecord, RunStore
from tunedeck.hostops.tracker import StartupTracker
from tunedeck.model import StartupProgress
from tunedeck.services import runtime
from tunedeck.services.journal import journal_launch
from tunedeck.ui.bindings import back
from tunedeck.ui.screens.modals import confirm_stop
from tunedeck.util.safety import UnsafeInput
from tunedeck.widgets.server_log import ServerLog
from tunedeck.widgets.startup_progress import StartupProgressView

log = logging.getLogger(__name__)

#: seconds between two saves of the shown offset while lines come (each rewrites and syncs the run
#: record; at 1,000 lines a second, twice a second was 8 % of the view's CPU); a quiet log, the
#: follow's end and the screen's close save at once
OFFSET_SAVE_S = 2.0
#: a resumed view reads the log before its offset this much at a time, and parses it a slice at a
#: time between turns of the event loop (a live follow hands the tracker pieces of this size too)
CATCHUP_READ = 4 << 20
CATCHUP_SLICE = 64 << 10


@dataclass(frozen=True)
class LaunchSpec:
    """What to launch when the screen opens (e.g. from LaunchScreen.LaunchRequested)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    engine: str = "other"
    port: int | None = None
    profile: str | None = None
    python: str | None = None
    """The profile's python: it runs the host-side runtime's simulator for a ``--sim`` command."""


class RunScreen(Screen[None]):
    """One run: progress on top, log below."""

    DEFAULT_CSS = """
    RunScreen #run-title { height: 1; background: $boost; padding: 0 1; }
    RunScreen StartupProgressView { border-bottom: solid $primary-darken-2; }
    """

    BINDINGS = [
        back("run"),
        Binding(
            "s",
            "stop",
            "Stop server",
            tooltip="Stop the server (asks first): TERM, then KILL after the grace",
            id="run-stop",
        ),
    ]

    class Progress(Message):
        """A new startup snapshot (coalesced: only the latest matters)."""

        def __init__(self, snapshot: StartupProgress) -> None:
            super().__init__()
            #: the snapshot
            self.snapshot = snapshot

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, RunScreen.Progress)

    def __init__(
        self,
        host: Host,
        record: RunRecord | None = None,
        *,
        launch_spec: LaunchSpec | None = None,
        store: RunStore | None = None,
        stall_after: float = 300.0,
        max_lines: int = 10_000,
        grace: float = 30.0,
        tracker_options: dict[str, object] | None = None,
        resume: bool = False,
    ) -> None:
        super().__init__()
        if record is None and launch_spec is None:
            raise ValueError("RunScreen needs a run record or a launch spec")
        self.host = host
        self.launch_spec = launch_spec
        self.store = store or RunStore()
        self.grace = grace
        self.max_lines = max_lines
        self.stall_after = stall_after
        self.tracker_options = dict(tracker_options or {})
        self.record = record or RunRecord(
            run_id="(launching)",
            target=getattr(host, "target", "local"),
            argv=list(launch_spec.argv) if launch_spec else [],
        )
        self.tracker = self._make_tracker(self.record)
        self.launch_error: str | None = None
        self.resume = resume
        self.shown_offset = 0
        self._saved_offset = -1
        self._saved_at = 0.0
        self._stop = asyncio.Event()
        self.reconnects = 0
        #: the log's link: lost (the header says so, the health is unknown) until the host answers again
        self.link = LinkWatch()
        self.stop_result: StopResult | None = None
        #: True from the confirmed stop until its result
        self.stopping = False
        #: the header's text as last shown by the progress messages
        self._shown_title = ""

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="run-title")
        yield StartupProgressView(id="run-progress")
        yield ServerLog(max_lines=self.max_lines, id="run-log")
        yield Footer()

    def _make_tracker(self, rec: RunRecord) -> StartupTracker:
        return StartupTracker(
            self.host,
            rec,
            store=self.store,
            stall_after=self.stall_after,
            lines=True,
            **self.tracker_options,  # type: ignore[arg-type]
        )

    @classmethod
    def for_launch(
        cls,
        host: Host,
        argv: list[str],
        env: dict[str, str] | None = None,
        *,
        engine: str = "other",
        port: int | None = None,
        profile: str | None = None,
        demo: bool = False,
        python: str | None = None,
        **kw: object,
    ) -> "RunScreen":
        """A screen that launches first (refusals are shown, nothing runs), then attaches."""
        spec = LaunchSpec(demo_argv(argv) if demo else list(argv), dict(env or {}), engine, port, profile, python)
        return cls(host, None, launch_spec=spec, **kw)  # type: ignore[arg-type]

    def on_mount(self) -> None:
        self.query_one(ServerLog).focus()
        if self.launch_spec is not None:
            self.launch_then_attach()
        else:
            self._start_following()

    def _start_following(self) -> None:
        self.follow_log()  # starts the liveness probe once the earlier log is parsed (a resume)
        self.set_interval(0.5, self._tick)
        self._tick()

    @work(group="run-launch", exclusive=True, exit_on_error=False)
    async def launch_then_attach(self) -> None:
        spec = self.launch_spec
        assert spec is not None
        try:
            # a --sim command (`tunedeck-host sim ENGINE …`) runs from the host-side runtime
            argv = await runtime.sim_argv(self.host, spec.argv, python=spec.python)
            rec = await launch(
                self.host,
                argv,
                spec.env,
                engine=spec.engine,
                port=spec.port,
                profile=spec.profile,
                store=self.store,
            )
        except (LaunchRefused, HostError, UnsafeInput, runtime.RuntimeUnavailable) as e:
            self.launch_error = str(e)
            self.query_one(StartupProgressView).update(
                StartupProgress("", spec.engine, "failed", diagnosis=f"not launched: {e}")
            )
            self.notify(f"not launched: {e}", severity="error", timeout=10, markup=False)
            return
        self.record = rec
        self.tracker = self._make_tracker(rec)
        self._show_title(self._title())
        self._start_following()

    @work(group="run-journal", thread=True, exit_on_error=False)
    def _journal(self, final: StartupProgress) -> None:
        rec = self.store.load(self.record.run_id) or self.record
        warning = journal_launch(rec, final, profile=self.launch_spec.profile if self.launch_spec else None)
        if warning:
            self.app.call_from_thread(self.notify, warning, severity="warning", markup=False)

    def _title(self, state: str | None = None) -> Text:
        r = self.record
        shown = {"stopped": "stopped (by you)"}.get(state or "", state)
        text = (
            f"run {r.run_id} · {r.engine} · {r.profile or ' '.join(r.argv)[:60]} · {r.target}"
            + (f" · port {r.port}" if r.port else "")
            + (f" · {shown}" if shown else "")
        )
        return Text(text)

    # ------------------------------------------------------------------ workers
    @work(group="run-follow", exit_on_error=False)
    async def follow_log(self) -> None:
        view = self.query_one(ServerLog)
        rec = self.record
        path = f"{rec.run_dir}/log"
        start = 0
        if self.resume and rec.log_offset > 0:
            # the tracker needs the earlier startup lines (their lines are not shown); the view
            # starts where it left off
            start = rec.log_offset
            await self._catch_up(path, start)
            view.append_lines([f"── resumed at byte {start} (earlier output: tunedeck logs {rec.run_id}) ──"])
        # only now: a process found dead while the earlier bytes were still being parsed would
        # have ended the parse there (a provisional error taken as final, the verdict saved)
        self.probe()
        self.shown_offset = start
        self.tracker.offset = start

        def on_chunk(chunk: bytes) -> None:
            tracker = self.tracker
            view.append_lines(tracker.feed_lines(chunk))
            if tracker.catchup and len(chunk) < 65536:
                tracker.catchup = False
            splitter = self._splitter()
            # the unterminated line is shown below the log (a progress bar being drawn); a line a
            # read merely cut ends in the next read, and showing it meanwhile toggled the partial
            # row: a layout and a whole repaint each time (a quiet second shows it if it stays)
            view.set_partial("" if splitter.cut_short(chunk) else splitter.partial())
            # bytes of complete lines handed to the view: where a resume must start
            self.shown_offset = tracker.offset - splitter.pending_bytes()
            self._save_offset()

        def on_idle() -> None:
            self.tracker.flush()
            view.set_partial(self._splitter().partial())
            self._save_offset(force=True)

        def on_error(e: Exception, attempt: int) -> None:
            self.reconnects += 1
            if self.link.lost(e):
                log.warning("run %s: log link lost (%s); reconnecting", rec.run_id, e)
            else:
                log.info("run %s: log link still lost (%s; attempt %d)", rec.run_id, e, attempt)

        def on_resume() -> None:
            lasted = self.link.ok()
            if lasted is not None:
                log.warning("run %s: log link back after %.0f s; following again", rec.run_id, lasted)

        await follow_forever(
            self.host, path, start, on_chunk, self._stop, on_idle=on_idle, on_error=on_error, on_resume=on_resume
        )
        self._save_offset(force=True)

    async def _catch_up(self, path: str, end: int) -> None:
        """Feed the tracker the log's first ``end`` bytes, read a bounded piece at a time and parsed
        a slice at a time between turns of the event loop: a server up for days can have written
        gigabytes after its startup, and the screen stays responsive while they are read."""
        offset = 0
        while offset < end:
            want = min(CATCHUP_READ, end - offset)
            try:
                data = await read_log(self.host, path, offset, limit=want)
            except HostError as e:
                log.warning(
                    "run %s: earlier log not read past byte %d (%s); the startup before it is not known",
                    self.record.run_id,
                    offset,
                    e,
                )
                break
            if not data:
                break
            for k in range(0, len(data), CATCHUP_SLICE):
                self.tracker.feed(data[k : k + CATCHUP_SLICE])
                await asyncio.sleep(0)
            offset += len(data)
        self.tracker.flush()

    def _splitter(self) -> LineSplitter:
        """The tracker's line splitter: the lines this view shows, parsed by the tracker."""
        sp = self.tracker.splitter
        assert sp is not None  # made with lines=True (_make_tracker)
        return sp

    def _save_offset(self, force: bool = False) -> None:
        if self.record.pid is None or self.shown_offset == self._saved_offset:
            return
        now = time.monotonic()
        if not force and now - self._saved_at < OFFSET_SAVE_S:
            return
        self.store.update(self.record.run_id, log_offset=self.shown_offset)
        self._saved_offset, self._saved_at = self.shown_offset, now

    @work(group="run-probe", exit_on_error=False)
    async def probe(self) -> None:
        await self.tracker.probe_loop(self._stop)

    def _tick(self) -> None:
        snap = self.tracker.snapshot()
        prev = self.tracker.final
        changed = (prev is None and snap.state != "starting") or (prev is not None and prev.state != snap.state)
        if changed and not (prev is not None and prev.state != "stalled" and snap.state == "starting"):
            # the run record follows every change, so `tunedeck runs` and the status screen agree
            self.tracker.finish(snap)
            rid = self.record.run_id
            if self.launch_spec is not None and prev is None and snap.state != "starting":
                self._journal(snap)  # launched here: its startup goes into the journal, as from the CLI
            if snap.state == "ready":
                self.notify(f"run {rid} is ready")
            elif snap.state == "stopped" or self.stopping or self.stop_result is not None:
                if snap.state == "stopped":
                    self.notify(f"run {rid} stopped (by you)")
            elif snap.state == "stalled":
                self.notify(f"run {rid} {snap.diagnosis}", severity="warning", timeout=10, markup=False)
            elif snap.state != "starting":
                from tunedeck.logparse import advice_for

                tip = advice_for(snap.diagnosis, snap.proof)
                text = f"run {rid}: {snap.diagnosis}" + (f"\nadvice: {tip}" if tip else "")
                self.notify(text, severity="error", timeout=15, markup=False)
        final = self.tracker.final
        if final is not None and snap.state == "starting":
            snap = final
        elif final is not None and final.state == "ready" and snap.state == "ready":
            snap = replace(snap, elapsed=final.elapsed)  # the startup took this long; the clock stops
        view = self.query_one(StartupProgressView)
        view.catching_up = bool(self.tracker.catchup) and self.launch_spec is None
        view.link_lost = (
            f"link lost {eta(self.link.lost_for())} ago — reconnecting… (the values shown are the last heard)"
            if self.link.is_lost and not self._stop.is_set()
            else None
        )
        self.post_message(self.Progress(snap))

    @on(Progress)
    def _show_progress(self, message: Progress) -> None:
        self.query_one(StartupProgressView).update(message.snapshot)
        self._show_title(self._title(message.snapshot.state))

    def _show_title(self, title: Text) -> None:
        """The header shows ``title`` (updated twice a second: no layout pass for the same text)."""
        if title.plain != self._shown_title:
            self._shown_title = title.plain
            self.query_one("#run-title", Static).update(title)

    # ------------------------------------------------------------------ actions
    def action_close(self) -> None:
        self._stop.set()
        self.app.pop_screen()

    def action_stop(self) -> None:
        r = self.record
        if r.pid is None:
            self.notify("nothing to stop (the server was not launched)", severity="warning")
            return
        confirm_stop(
            self,
            f"Stop run {r.run_id} on {r.target} (pid {r.pid})?",
            title="Stop the server",
            grace=self.grace,
            then=self.stop_server,
        )

    @work(group="run-stop", exclusive=True, exit_on_error=False)
    async def stop_server(self) -> None:
        self.notify(f"stopping run {self.record.run_id} …")
        self.tracker.mark_stopping()
        self.stopping = True
        view = self.query_one(StartupProgressView)
        view.set_ended(f"stopping run {self.record.run_id} (TERM, then KILL after {self.grace:g} s) …")
        try:
            res = await stop_run(self.host, self.record, grace=self.grace, store=self.store)
        except HostError as e:
            self.tracker.stop_requested = False
            self.stopping = False
            view.set_ended(None)
            self.notify(f"stop failed: {e}", severity="error", markup=False)
            return
        if res.state in ("stopped", "exited"):
            self.tracker.alive = False  # the next tick shows "stopped (by you)"
        else:
            self.tracker.stop_requested = False
        self.stop_result = res
        self.stopping = False
        self._stop.set()  # nothing more to follow or probe: the header must not say "health ok"
        freed = f"; {res.gpu_freed_mib / 1024:.1f} GiB GPU memory freed" if res.gpu_freed_mib else ""
        view.set_ended(f"{res.state} (by you): {res.message}{freed}")
        self._show_title(self._title(res.state if res.state in ("stopped", "exited") else None))
        self.notify(res.message + freed, severity="information" if res.state == "stopped" else "warning", markup=False)

    def on_unmount(self) -> None:
        self._stop.set()
        self._save_offset(force=True)


__all__ = ["LaunchSpec", "RunScreen"]
