"""BenchScreen: starts a benchmark on its host and shows it live.

The benchmark never runs in the UI's process (its timestamps must not be
skewed by rendering): it runs detached on the host next to the server (with
``--url``, on this machine), through :class:`tunedeck.services.benchrun.BenchRun`,
the same driver as ``tunedeck bench``; a worker follows its events. Leaving the
screen detaches; ``s`` stops the run after a confirmation (finished samples are kept, the
requests it cuts are counted as cancelled). Shown: output tok/s per 1-s
bucket, TTFT/ITL percentiles, completed/failed/in-flight; for sweeps,
throughput vs concurrency and per-user tok/s vs total tok/s. Goodput (the share of completed
requests within every SLO target, and good req/s) live from the ticks, then from each level's
summary; as levels finish, a per-level table (``vllm bench serve``'s end report) with each
level's client-health mark and its reasons. Next to it (alone with ``t``, and
on a narrow terminal only so), the level's timeline: client tok/s, KV cache, queue, SM clock
and power stacked on one time axis, live from the run's ``timeline`` events, then read back
from the stored ``timeline.jsonl``, with the level's validity findings.

Works standalone: ``app.push_screen(BenchScreen(["--url", URL, "--concurrency", "1,8"]))``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from tunedeck.bench.plan import BenchPlan
from tunedeck.hostops.liveness import LinkWatch
from tunedeck.model import GoodputView, SweepLevel, SweepReport
from tunedeck.timeline_model import TimelineFeed, TimelineSnapshot
from tunedeck.timeline_model import figure as timeline_figure
from tunedeck.ui.bindings import back
from tunedeck.ui.screens.modals import ConfirmModal
from tunedeck.widgets.goodput_panel import GoodputPanel
from tunedeck.widgets.sweep_table import SweepTable
from tunedeck.widgets.throughput_chart import ThroughputChart
from tunedeck.widgets.timeline_charts import TimelinePanel

#: from this many columns the timeline charts stand next to the live view; below, ``t`` switches
TIMELINE_SIDE_BY_SIDE = 120

log = logging.getLogger(__name__)


class BenchScreen(Screen[list[dict[str, Any]]]):
    """Live view of one ``tunedeck bench`` run (or sweep)."""

    BINDINGS = [
        Binding(
            "s",
            "stop",
            "Stop run",
            id="bench-stop",
            tooltip="Stop the benchmark (asks first); finished requests are kept (summary marked partial)",
        ),
        back("bench"),
        Binding(
            "t",
            "toggle_timeline",
            "Timeline",
            id="bench-timeline",
            tooltip="The level's timeline charts alone, or back to the live view",
        ),
        Binding(
            "left_square_bracket",
            "timeline_level(-1)",
            "Prev level",
            id="bench-timeline-prev",
            show=False,
            tooltip="The timeline of the previous level",
        ),
        Binding(
            "right_square_bracket",
            "timeline_level(1)",
            "Next level",
            id="bench-timeline-next",
            show=False,
            tooltip="The timeline of the next level",
        ),
    ]

    DEFAULT_CSS = """
    BenchScreen #bench-status { height: auto; max-height: 4; padding: 0 1; }
    BenchScreen #bench-latency { height: 3; padding: 0 1; }
    BenchScreen #tok-chart { height: 1fr; min-height: 8; }
    BenchScreen #sweep-row { height: 1fr; min-height: 8; }
    BenchScreen #sweep-row ThroughputChart { width: 1fr; height: 100%; }
    BenchScreen #bench-goodput { height: auto; max-height: 2; }
    BenchScreen #sweep-table { display: none; height: auto; max-height: 16; }
    BenchScreen { layout: horizontal; }
    BenchScreen > TimelinePanel { width: 1fr; padding: 0 1; border-left: solid $panel; }
    BenchScreen.-narrow > TimelinePanel { display: none; }
    BenchScreen.-timeline-only > Vertical { display: none; }
    BenchScreen.-timeline-only > TimelinePanel { display: block; border-left: none; }
    """

    @dataclass
    class Progress(Message):
        """One JSON progress line from the bench process."""

        data: dict[str, Any]

    @dataclass
    class Finished(Message):
        """The bench process ended. ``summaries``: one per level; ``rc`` its exit status."""

        rc: int | None
        summaries: list[dict[str, Any]]
        error: str

    @dataclass
    class LinkChanged(Message):
        """The link to the host-side job was lost (``error``) or answers again (``error`` None)."""

        error: str | None

    @dataclass
    class TimelineChanged(Message):
        """A level's timeline, as it is now (live rows, or merged with the stored file)."""

        level: int
        """The level (0-based)."""
        snapshot: TimelineSnapshot
        """Its rows and validity findings."""
        stored: bool = False
        """Read back from the result folder: merged over the live rows."""

        def can_replace(self, message: Message) -> bool:
            return (
                isinstance(message, BenchScreen.TimelineChanged)
                and message.level == self.level
                and not message.stored
                and not self.stored
            )

    def __init__(self, plan: BenchPlan | None, *, attach: tuple[Any, str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: the benchmark to start (None: ``attach`` names one already running)
        self.plan = plan
        #: (host, job id) of a host-side benchmark to follow instead of starting one
        self.attach = attach
        #: summaries of finished levels
        self.summaries: list[dict[str, Any]] = []
        #: last tick
        self.last_tick: dict[str, Any] = {}
        self.state = "starting"
        self.rc: int | None = None
        self.error = ""
        self._run: Any = None  # the BenchRun being followed
        #: the link to the host-side job: while lost, the status line says so (the job goes on there)
        self.link = LinkWatch()
        self.job_id: str | None = None
        self._level_offset = 0.0
        self._level_base = 0.0
        self._level_info: dict[int, dict[str, Any]] = {}
        #: what a sweep varies: "concurrency" or "request_rate"
        self.sweep_key = "concurrency"
        #: number of levels the run announced (0 until its start line)
        self._levels = 0
        #: the level running now (its level_start seen), -1 before the first
        self._current_level = -1
        #: the run's goodput targets in ms ({}: none), from its start event; None before it
        self.goodput_targets: dict[str, float] | None = None
        #: one row per finished level, for the end report
        self.sweep_levels: list[SweepLevel] = []
        #: level -> its timeline as last shown; the worker's feed makes them from the run's events
        self.timelines: dict[int, TimelineSnapshot] = {}
        #: the level whose timeline is shown (None: the newest)
        self.timeline_level: int | None = None
        self.timeline_only = False
        self._timeline_feed = TimelineFeed()
        self._timeline_due = False  # a redraw of the shown level is scheduled

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("starting benchmark...", id="bench-status")
            yield Static("", id="bench-latency")
            yield GoodputPanel(id="bench-goodput")
            yield SweepTable(id="sweep-table")
            yield ThroughputChart("output tok/s (1 s buckets)", xlabel="s", ylabel="tok/s", id="tok-chart")
            with Horizontal(id="sweep-row"):
                yield ThroughputChart(
                    "throughput vs concurrency", xlabel="concurrency", ylabel="tok/s", kind="line", id="sweep-chart"
                )
                yield ThroughputChart(
                    "per-user vs total tok/s",
                    xlabel="total tok/s",
                    ylabel="tok/s/user",
                    kind="scatter",
                    id="pareto-chart",
                )
        yield TimelinePanel("the timeline appears when the first level starts", id="bench-timeline")
        yield Footer()

    def on_mount(self) -> None:
        self._timeline_layout()
        self.query_one("#sweep-row").display = False
        self.run_bench()

    # ------------------------------------------------------------ the run
    @work(group="bench", exit_on_error=False)
    async def run_bench(self) -> None:
        from tunedeck.commands._benchjob import exit_code
        from tunedeck.commands.bench import start_plan
        from tunedeck.hostops.hosts import HostError
        from tunedeck.services import jobs, runtime
        from tunedeck.services.benchrun import BenchRun

        try:
            if self.attach is not None:
                self._run = await BenchRun.attach(*self.attach)
            elif self.plan is not None:
                self._run = await start_plan(self.plan)
            else:
                raise ValueError("no benchmark to start or follow")
        except (ValueError, HostError, jobs.JobError, runtime.RuntimeUnavailable) as e:
            self.post_message(self.Finished(None, [], f"cannot start the benchmark: {e}"))
            return
        run = self._run
        self.job_id = run.job_id
        run.on_link_error = lambda e, attempt: self.post_message(self.LinkChanged(str(e)))
        run.on_link_ok = lambda: self.post_message(self.LinkChanged(None))
        try:
            async for msg in run.events():
                self._feed_timeline(msg)
                self.post_message(self.Progress(msg))
        except HostError as e:
            self.post_message(self.Finished(None, run.summaries, f"lost the benchmark: {e}"))
            return
        ex = run.exit or {}
        rc = exit_code(run)  # from what the host's job folder holds, as the bench command says it
        self.post_message(self.Finished(rc, run.summaries, str(ex.get("error") or "") if rc else ""))

    @work(group="bench-stop", exit_on_error=False)
    async def _stop_run(self) -> None:
        from tunedeck.hostops.hosts import HostError
        from tunedeck.services import jobs

        run = self._run
        if run is None:
            return
        try:
            msg = await run.stop()
        except (HostError, jobs.JobError) as e:
            self.notify(f"stop failed: {e}", severity="error", markup=False)
            return
        self.notify(msg, markup=False)

    def action_stop(self) -> None:
        """Ask first (Cancel has the focus); only a yes stops the benchmark."""
        if not self._stoppable():
            return
        t = self.last_tick
        flight = (
            f" and cuts the {t['in_flight']} request(s) in flight (counted as cancelled)" if t.get("in_flight") else ""
        )
        where = f" (job {self.job_id} on the host)" if self.job_id else ""

        def done(ok: bool | None) -> None:
            if ok and self._stoppable():
                self.state = "stopping"
                self._stop_run()
                self._show_status()

        self.app.push_screen(
            ConfirmModal(
                f"Stop the benchmark{where}? It ends now{flight}; finished requests are kept and the "
                "summary is marked partial.",
                title="Stop the benchmark",
                action="Stop it",
                cancel="Keep running",
                danger=True,
            ),
            done,
        )

    def _stoppable(self) -> bool:
        return self._run is not None and self.rc is None and self.state != "stopping"

    def action_close(self) -> None:
        if self.app.screen_stack and len(self.app.screen_stack) > 1:
            self.dismiss(self.summaries)

    async def on_unmount(self) -> None:
        # leaving the screen detaches: a host-side run goes on and is mirrored when followed again
        self.workers.cancel_group(self, "bench")

    # ------------------------------------------------------------ updates
    def on_bench_screen_progress(self, event: "BenchScreen.Progress") -> None:
        m = event.data
        kind = m.get("type")
        if kind == "waiting":
            self.state = f"waiting for {m.get('url')}"
        elif kind == "start":
            self.state = "running"
            levels = m.get("levels") or []
            self._levels = len(levels)
            if len(levels) > 1:
                self.query_one("#sweep-row").display = True
                if len({str(lv.get("request_rate")) for lv in levels}) > 1:
                    self.sweep_key = "request_rate"
                    chart = self.query_one("#sweep-chart", ThroughputChart)
                    chart.title = "throughput vs request rate"
                    chart.xlabel = "req/s"
        elif kind == "level_start":
            self.state = "running"
            self._level_info[m["level"]] = m
            self._current_level = m["level"]
            self.last_tick = {}  # the counts of the previous level are not this level's
            self._level_base = self._level_offset
        elif kind == "tick":
            self.last_tick = m
            chart = self.query_one("#tok-chart", ThroughputChart)
            if m.get("second", -1) >= 0:
                chart.append(
                    self._level_name(m.get("level", -1)) if self._sweep else "tok/s",
                    self._level_base + m["second"] + 1,
                    m["tok_s"],
                )
            self._level_offset = self._level_base + m["t"]
            self._show_latency(m)
        elif kind == "level_done":
            s = m["summary"]
            self.summaries.append(s)
            if self.last_tick:
                self.last_tick = {
                    **self.last_tick,
                    "completed": s["completed"],
                    "failed": s["failed"],
                    "cancelled": s.get("cancelled") or 0,
                    "in_flight": 0,
                }
            if self.sweep_key == "request_rate":
                x = float(s.get("request_rate") or 0.0)
            else:
                x = float(s.get("max_concurrency") or s.get("max_concurrent_requests") or 0)
            if math.isfinite(x):  # an 'inf' rate level has no place on a rate axis
                self.query_one("#sweep-chart", ThroughputChart).append("output tok/s", x, s["output_throughput"])
            self.query_one("#pareto-chart", ThroughputChart).append(
                "levels", s["output_throughput"], s.get("per_user_output_throughput") or 0.0
            )
            self._level_offset = self._level_base + float(s.get("duration") or 0.0)
            self._show_latency(
                {
                    "ttft_p50_ms": s.get("median_ttft_ms"),
                    "ttft_p99_ms": s.get("p99_ttft_ms"),
                    "itl_p50_ms": s.get("median_itl_ms"),
                    "itl_p99_ms": s.get("p99_itl_ms"),
                }
            )
        elif kind == "error":
            self.error = m.get("message", "")
        self._show_goodput_and_levels(m)
        self._show_status()

    def on_bench_screen_link_changed(self, event: "BenchScreen.LinkChanged") -> None:
        # once the run has ended its outcome says the rest; while lost, the line is up already
        if self.rc is None and self.link.tell(event.error):
            self._show_status()

    def on_bench_screen_finished(self, event: "BenchScreen.Finished") -> None:
        from tunedeck.commands._benchjob import outcome_words

        self.rc = event.rc
        self.link.ok()  # the follow is over: what happened is in the state line
        if event.error:
            self.error = event.error
        have = {s.get("run_id") for s in self.summaries}
        self.summaries.extend(s for s in event.summaries if s.get("run_id") not in have)  # read from the job folder
        self.state = outcome_words(event.rc)
        self._show_status()
        self._stored_timelines()

    @property
    def _sweep(self) -> bool:
        return self.query_one("#sweep-row").display

    def _level_name(self, level: int) -> str:
        """The same name for a level in the legend and the status line: its concurrency
        (or request rate in a rate sweep), never a 0-based index."""
        lvl = self._level_info.get(level, {})
        if self.sweep_key == "request_rate" and lvl.get("request_rate") is not None:
            return f"{lvl.get('request_rate')} req/s"
        if lvl.get("concurrency") is not None:
            return f"C={lvl.get('concurrency')}"
        return f"level {level + 1}"

    def _show_status(self) -> None:
        t = self.last_tick
        level = self._current_level if self._current_level >= 0 else (t.get("level", -1) if t else -1)
        lvl = self._level_info.get(level, {})
        status = Text()
        status.append(self.state, style="bold")
        if self.job_id:
            status.append(f"  ·  on the host, job {self.job_id} (leaving this screen detaches)", style="dim")
        if lvl:
            n = len(self._level_info) if not self._levels else self._levels
            status.append(f" · level {lvl['level'] + 1}/{n} ({self._level_name(level)})")
            rate = lvl.get("request_rate")
            if rate not in (None, "inf") and self.sweep_key != "request_rate":
                status.append(f" · {rate} req/s", style="dim")
            status.append(f" · run {lvl.get('run_id')}", style="dim")
        if self.link.is_lost:  # second: the box shows 4 lines, and the counts below are stale now
            status.append("\nlink lost — reconnecting (the job goes on on the host)", style="bold yellow")
        if t:
            status.append(
                f"\ncompleted {t['completed']}/{t['total']} · failed {t['failed']} · "
                + (f"cancelled {t['cancelled']} · " if t.get("cancelled") else "")
                + f"in flight {t['in_flight']} · {t['tok_s']} tok/s · "
                f"client cpu {max(t.get('cpu') or [0]):.2f}"
            )
        if self.error:
            status.append("\n" + self.error, style="bold red")  # untrusted text: never markup
        self.query_one("#bench-status", Static).update(status)

    def _show_latency(self, m: dict[str, Any]) -> None:
        self.query_one("#bench-latency", Static).update(latency_line(m))

    def _show_goodput_and_levels(self, m: dict[str, Any]) -> None:
        """Goodput (live from a tick, final from a level's summary) and the per-level table."""
        kind = m.get("type")
        panel = self.query_one("#bench-goodput", GoodputPanel)
        if kind == "start":
            self.goodput_targets = {str(k): float(v) for k, v in dict(m.get("goodput") or {}).items()}
            panel.show(GoodputView(GoodputView.order(self.goodput_targets)))
        elif kind == "level_start" and self.goodput_targets is not None:
            panel.show(GoodputView(GoodputView.order(self.goodput_targets), self._level_name(m["level"])))
        elif kind == "tick" and self.goodput_targets is not None:
            good = m.get("good")
            panel.show(
                GoodputView(
                    GoodputView.order(self.goodput_targets),
                    self._level_name(m.get("level", -1)),
                    int(m.get("completed") or 0),
                    good if isinstance(good, int) else None,
                    float(m.get("t") or 0.0),
                )
            )
        elif kind == "level_done":
            s = m["summary"]
            name = self._level_name(m.get("level", -1))
            if self.goodput_targets is not None:
                panel.show(GoodputView.from_summary(s, self.goodput_targets, name))
            self.sweep_levels.append(SweepLevel.from_summary(s, name))
            table = self.query_one("#sweep-table", SweepTable)
            table.show(SweepReport(tuple(self.sweep_levels), self._levels or len(self._level_info)))
            table.display = True

    # ------------------------------------------------------------ timeline
    def _feed_timeline(self, msg: dict[str, Any]) -> None:
        """In the run worker: one event into the feed; a level it changed goes out as a snapshot."""
        level = self._timeline_feed.on_event(msg)
        if level is not None:
            self.post_message(self.TimelineChanged(level, self._timeline_feed.snapshot(level)))

    def _stored_timelines(self) -> None:
        """The run ended: no level is live; each level's stored timeline (mirrored into the results
        store) is read back, complete where the live feed may have missed lines."""
        self.timelines = {k: replace(v, live=False) for k, v in self.timelines.items()}
        self._show_timeline()
        ids = {k: v.run_id for k, v in self.timelines.items() if v.run_id}
        if ids:
            self._read_stored_timelines(ids)

    @work(group="bench-timeline", thread=True, exit_on_error=False)
    def _read_stored_timelines(self, ids: dict[int, str]) -> None:
        from tunedeck.bench.store import StoreError
        from tunedeck.services.timelines import stored_timeline

        for level, run_id in sorted(ids.items()):
            try:
                snap = stored_timeline(run_id)
            except (StoreError, OSError) as e:
                log.warning("timeline of %s unreadable: %s", run_id, e)
                continue
            if snap.rows or snap.validity is not None:
                self.post_message(self.TimelineChanged(level, snap, stored=True))

    def on_bench_screen_timeline_changed(self, event: "BenchScreen.TimelineChanged") -> None:
        snap = event.snapshot
        old = self.timelines.get(event.level)
        if event.stored and old is not None:  # the file over the live rows; the live label
            snap = TimelineSnapshot.from_rows(
                old.rows + snap.rows,
                label=old.label,
                run_id=old.run_id,
                validity=snap.validity if snap.validity is not None else old.validity,
            )
        self.timelines[event.level] = snap
        if self._timeline_shown_level() != event.level:
            return
        if event.stored:
            self._show_timeline()
        elif not self._timeline_due:  # live rows: the figure is built at most twice a second, however fast
            self._timeline_due = True  # they come (a follower catching up replays a whole level at once)
            self.set_timer(0.5, self._show_timeline)

    def _timeline_shown_level(self) -> int | None:
        if self.timeline_level in self.timelines:
            return self.timeline_level
        return max(self.timelines) if self.timelines else None

    def _show_timeline(self) -> None:
        self._timeline_due = False
        level = self._timeline_shown_level()
        if level is None:
            return
        snap = self.timelines[level]
        n = max(self._levels, len(self.timelines))
        cap = Text()
        cap.append("timeline ", style="bold")
        cap.append(snap.label or f"level {level + 1}")
        if n > 1:
            cap.append(f" · level {level + 1}/{n}")
        if snap.live:
            cap.append(" · live", style="bold")
        cap.append(" · x: s into the timed phase", style="dim")
        if n > 1:
            cap.append(" · [ ]: level", style="dim")
        self.query_one("#bench-timeline", TimelinePanel).show(timeline_figure(snap), cap)

    def action_toggle_timeline(self) -> None:
        self.timeline_only = not self.timeline_only
        self._timeline_layout()

    def action_timeline_level(self, step: int) -> None:
        levels = sorted(self.timelines)
        cur = self._timeline_shown_level()
        if cur is None:
            return
        i = max(0, min(len(levels) - 1, levels.index(cur) + step))
        self.timeline_level = None if i == len(levels) - 1 else levels[i]  # the newest: follow it again
        self._show_timeline()
        self.query_one("#bench-timeline", TimelinePanel).redraw()

    def on_resize(self, event: events.Resize) -> None:
        self._timeline_layout()

    def _timeline_layout(self) -> None:
        """Side by side from :data:`TIMELINE_SIDE_BY_SIDE` columns; below, the live view or (``t``)
        the timeline alone."""
        narrow = self.app.size.width < TIMELINE_SIDE_BY_SIDE
        self.set_class(self.timeline_only, "-timeline-only")
        self.set_class(narrow and not self.timeline_only, "-narrow")


def _ms(v: Any, digits: int) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "N/A"
    return f"{float(v):.{digits}f} ms"


def latency_line(m: dict[str, Any]) -> str:
    """TTFT/ITL percentiles of a progress tick or level summary; N/A (never 0) when missing."""
    return (
        f"TTFT p50 {_ms(m.get('ttft_p50_ms'), 1)}  p99 {_ms(m.get('ttft_p99_ms'), 1)}    "
        f"ITL p50 {_ms(m.get('itl_p50_ms'), 2)}  p99 {_ms(m.get('itl_p99_ms'), 2)}"
    )
