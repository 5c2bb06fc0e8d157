"""The Compare screen: mark two profiles A and B, press one key, read the verdict.

Left: the server profiles (``1`` marks the highlighted one as A, ``2`` as B),
the plan, repeats per side (``+``/``-``) and interleaving (``i``). ``g`` starts the A/B ON the
host (:class:`tunedeck.services.abrun.ABRun`: the campaign runs detached next to the GPUs, so
neither the UI nor a lost link skews or cuts it; a worker follows its events), ``x`` cancels
it (the server it started is stopped, finished results are kept). Leaving the screen or the
dashboard detaches; on opening, the screen follows a campaign still running on the host. While it runs: the step, a progress
bar and the event log. At the end: the comparison table (deltas, coloured
verdicts), the configuration difference, warnings, an overlay chart of
A's and B's output tok/s at the peak level, and under it A's and B's timelines
overlaid (client tok/s, KV cache, queue, SM clock, power on one time axis) for a
level (the peak first; ``t`` the next one), read from the stored result folders of
each side's first repeat. On opening, the screen shows the last A/B from the tuning journal.

Standalone use (tests, other apps)::

    class Demo(App):
        def on_mount(self):
            self.push_screen(CompareScreen(start_campaign=my_factory))

``start_campaign(a, b, plan, repeats, interleave, confirm)`` returns an object with
``id``, ``report``, ``events()`` (an async iterator of :class:`ABEvent`) and ``cancel()``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Footer, Label, Log, OptionList, ProgressBar, Select, Static

from tunedeck.ab.compare import Comparison, compare
from tunedeck.ab.events import ABEvent
from tunedeck.ab.journal import Journal
from tunedeck.ab.plans import PlanError, list_plans, load_plan
from tunedeck.ab.report import ABReport
from tunedeck.ab.series import run_series
from tunedeck.ab.sides import Side, side_from_dict
from tunedeck.timeline_model import TimelineFigure, TimelineSnapshot, overlay
from tunedeck.ui.bindings import mark_ab, toggle_side
from tunedeck.ui.screens.campaign import CampaignScreen
from tunedeck.widgets.compare_chart import CompareChart
from tunedeck.widgets.compare_table import CompareTable, ConfigDiff
from tunedeck.widgets.timeline_charts import TimelinePanel

if TYPE_CHECKING:
    from tunedeck.services.jobrun import JobRun

log = logging.getLogger(__name__)


class ABTimeline(Message):
    """A's and B's timelines at one level, read from their result folders."""

    def __init__(self, level: int, figure: TimelineFigure, caption: Text) -> None:
        super().__init__()
        self.level = level
        """The concurrency charted."""
        self.figure = figure
        """The overlay."""
        self.caption = caption
        """What the panel says above it."""


class CompareScreen(CampaignScreen):
    """A/B: mark A and B, one key to run, and the comparison view."""

    DEFAULT_CSS = """
    CompareScreen #ab-side { width: 28; border-right: solid $panel; padding: 0 1; }
    CompareScreen #ab-profiles { height: 1fr; min-height: 5; }
    CompareScreen #ab-marks { height: auto; margin: 1 0; }
    CompareScreen #ab-main { padding: 0 1; }
    CompareScreen #ab-status { height: auto; }
    CompareScreen #ab-progress { margin: 0 0 1 0; }
    CompareScreen #ab-headline { height: auto; text-style: bold; margin: 1 0 0 0; }
    CompareScreen #ab-log { height: 8; border-top: solid $panel; }
    CompareScreen #ab-timeline { height: 44; border-top: solid $panel; }
    CompareScreen #ab-timeline.-empty { height: 3; }
    CompareScreen #ab-timeline.-empty TimelineCharts { min-height: 1; }
    """
    NOUN = "A/B"
    REOPEN_KEY = "c"
    CANCEL_QUESTION = (
        "Cancel the running A/B? It stops the benchmark in flight and the server the A/B started; "
        "finished results are kept."
    )
    STATUS_ID = "ab-status"
    BINDINGS = [
        *mark_ab("ab"),
        Binding("g", "start_ab", "Run A/B", tooltip="Launch, benchmark and compare A and B", id="ab-start"),
        Binding(
            "x",
            "cancel_campaign",
            "Cancel A/B",
            tooltip="Stop the A/B (asks first); finished results are kept",
            id="ab-cancel",
        ),
        Binding("j", "load_last", "Last A/B", tooltip="Show the last A/B from the journal", id="ab-last"),
        toggle_side("ab", "the plan", "a comparison"),
        Binding(
            "plus,equals_sign",
            "repeats(1)",
            "Repeats+",
            tooltip="One more repeat per side",
            id="ab-repeats-up",
            show=False,
        ),
        Binding(
            "minus", "repeats(-1)", "Repeats-", tooltip="One repeat fewer per side", id="ab-repeats-down", show=False
        ),
        Binding(
            "i",
            "toggle_interleave",
            "Interleave",
            tooltip="Relaunch per repeat, A B A B",
            id="ab-interleave",
            show=False,
        ),
        Binding(
            "t",
            "timeline_level",
            "Timeline level",
            id="ab-timeline-level",
            tooltip="Overlay A's and B's timelines at the next concurrency level",
        ),
    ]

    def __init__(
        self,
        *,
        start_campaign: Callable[..., Awaitable[Any]] | None = None,
        profiles: list[str] | None = None,
        plan: str = "quick",
        repeats: int = 1,
        interleave: bool = False,
        a: str | None = None,
        b: str | None = None,
        comparison: Comparison | None = None,
        series: tuple[list[float], list[float]] | None = None,
        sides: tuple[Any, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            start_campaign=start_campaign, profiles=profiles, status="Mark A and B, then press g.", **kwargs
        )
        self.plan_name = plan
        """The plan the next A/B runs."""
        self.repeats = repeats
        self.interleave = interleave
        self.marked: dict[str, str | None] = {"A": a, "B": b}
        """Profile names marked A and B."""
        self.report: ABReport | None = None
        """The last finished A/B of this screen."""
        self._initial = comparison
        self._initial_series = series
        self.timeline_sides: tuple[Any, Any] | None = sides
        """The A and B (:class:`tunedeck.ab.sides.Side`) whose timelines are overlaid."""
        self.timeline_level: int | None = None
        """The concurrency whose timelines are shown (None: the peak)."""
        self._view_gen = 0
        """Goes up when an A/B starts or ends here: a journal read begun before is not shown."""

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        with Horizontal():
            with Vertical(id="ab-side", classes="campaign-side"):
                yield Label("Profiles  [dim]1[/]=A  [dim]2[/]=B  [dim]g[/]=run")
                yield OptionList(id="ab-profiles")
                yield Static(id="ab-marks")
                yield Label("Plan")
                opts = self._plan_options()
                if opts:
                    value = self.plan_name if any(v == self.plan_name for _, v in opts) else opts[0][1]
                    self.plan_name = value
                    yield Select(opts, value=value, allow_blank=False, id="ab-plan")
                else:
                    yield Static("no plans found")
            with VerticalScroll(id="ab-main"):
                yield Static("Mark A and B, then press g.", id="ab-status")
                yield ProgressBar(id="ab-progress", show_eta=False)
                yield Static(id="ab-headline")
                yield CompareTable(id="ab-table")
                yield ConfigDiff(id="ab-diff")
                yield CompareChart(id="ab-chart")
                yield TimelinePanel(
                    "A's and B's timelines appear here after an A/B", id="ab-timeline", classes="-empty"
                )
                yield Log(id="ab-log", max_lines=2000)
        yield Footer()

    def _plan_options(self) -> list[tuple[str, str]]:
        try:
            return [(n, n) for n, _ in list_plans()]
        except OSError:
            return []

    def _narrow_changed(self, narrow: bool) -> None:
        table = self.query_one(CompareTable)
        if table.comparison is not None:
            table.show(table.comparison, compact=narrow)

    def on_mount(self) -> None:
        self._set_narrow(self.app.size.width < self.NARROW)
        self._fill_profiles("ab-profiles", self._profile_names())
        self._show_marks()
        bar = self.query_one("#ab-progress", ProgressBar)
        bar.update(total=1, progress=0)
        bar.display = False  # shown only while an A/B runs: a finished one is not a 0% bar
        if self._initial is not None:
            self.show_comparison(self._initial, self._initial_series)
        else:
            self.action_load_last(quiet=True)
        if self._initial is not None and self.timeline_sides is not None:
            self.show_timelines(*self.timeline_sides)
        if self.start_campaign is None:
            self._reattach()

    # ------------------------------------------------------------------ actions
    def _show_marks(self) -> None:
        t = Text()
        t.append("A: ", style="bold")
        t.append(self.marked["A"] or "(press 1)")
        t.append("\nB: ", style="bold")
        t.append(self.marked["B"] or "(press 2)")
        t.append(f"\nrepeats {self.repeats} (+/-){', interleaved' if self.interleave else ''} (i)", style="dim")
        self.query_one("#ab-marks", Static).update(t)

    def action_mark(self, side: str) -> None:
        if self._side_hidden():  # the profiles were hidden: shown now, the next key marks
            return
        ol = self.query_one("#ab-profiles", OptionList)
        if ol.highlighted is None:
            return
        opt = ol.get_option_at_index(ol.highlighted)
        self.marked[side] = opt.id
        self._show_marks()

    def action_repeats(self, step: int) -> None:
        self.repeats = max(1, min(20, self.repeats + step))
        self._show_marks()

    def action_toggle_interleave(self) -> None:
        self.interleave = not self.interleave
        self._show_marks()

    @on(Select.Changed, "#ab-plan")
    def _plan_changed(self, ev: Select.Changed) -> None:
        if isinstance(ev.value, str):
            self.plan_name = ev.value

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("start_ab", "mark", "repeats", "toggle_interleave"):
            return None if self.campaign is not None else True
        if action == "timeline_level":
            return True if self.timeline_sides is not None else None
        return super().check_action(action, parameters)

    def action_start_ab(self) -> None:
        if self.campaign is not None:
            return
        a, b = self.marked["A"], self.marked["B"]
        if not a or not b:
            self._status(Text("Mark two profiles first: 1 marks A, 2 marks B.", style="bold"))
            return
        try:
            plan = load_plan(self.plan_name)
        except PlanError as e:
            self._status(Text(f"plan: {e}", style="bold"))
            return
        self.query_one("#ab-log", Log).clear()
        self._clear_results()
        self._status(Text(f"A/B {a} vs {b}, plan {plan.name}: starting…"))
        self.campaign = True  # starting: the keys that need an idle screen are off
        bar = self.query_one("#ab-progress", ProgressBar)
        bar.update(total=1, progress=0)
        bar.display = True
        self.refresh_bindings()
        self._start_worker(a, b, plan)

    async def _default_start(
        self, a: str, b: str, plan: Any, repeats: int, interleave: bool, confirm: Callable[[str], Awaitable[bool]]
    ) -> Any:
        from tunedeck.services.abrun import ABRun, ABSettings

        host = self._app_host()
        target = getattr(self.app, "target", "") or host.target
        return await ABRun.start(
            host,
            a,
            b,
            plan,
            ABSettings(repeats, interleave),
            demo=target == "demo",
            sim=bool(getattr(self.app, "sim", False)),
            confirm_stop=confirm,
            host_label=target,
        )

    @work(group="ab", exit_on_error=False)
    async def _start_worker(self, a: str, b: str, plan: Any) -> None:
        start = self.start_campaign or self._default_start
        campaign = await self._started(start(a, b, plan, self.repeats, self.interleave, self._confirm))
        if campaign is not None:
            self.campaign = campaign
            await self._follow(campaign)

    # ------------------------------------------------------------------ follow
    def _run_class(self) -> type[JobRun]:
        from tunedeck.services.abrun import ABRun

        return ABRun

    async def _reattached(self, run: JobRun) -> None:
        self._status(Text(f"following A/B job {run.id}, still running on the host"))

    def _no_report(self, campaign: Any) -> str:
        from tunedeck.commands._benchjob import outcome_words
        from tunedeck.commands.ab import EXIT_LOST

        if getattr(campaign, "lost", False):
            return f"A/B {campaign.id}: {outcome_words(EXIT_LOST)}"
        ex = getattr(campaign, "exit", None) or {}
        return f"A/B ended without a report: {ex.get('error') or 'unknown'}"

    def action_load_last(self, quiet: bool = False) -> None:
        """Show the last finished A/B of the journal, read in a thread (the journal only grows, and
        the chart re-reads the peak level's samples)."""
        self._load_last_worker(quiet, self._view_gen)

    @work(thread=True, exclusive=True, group="ab-last", exit_on_error=False)
    def _load_last_worker(self, quiet: bool, gen: int) -> None:
        from textual.worker import get_current_worker

        last: LastAB | str | None
        try:
            last = last_ab()
        except Exception:
            log.exception("reading the last A/B from the journal failed")
            last = "the last A/B could not be read (the log has the traceback)"
        if not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._show_last, last, quiet, gen)

    def _show_last(self, last: LastAB | str | None, quiet: bool, gen: int) -> None:
        if not self.is_attached:  # closed while the journal was read
            return
        if gen != self._view_gen:
            return  # an A/B started or ended here meanwhile: it is what the screen shows
        if quiet and (self.campaign is not None or self.report is not None):
            return  # an A/B is followed here (reattached): it is what the screen shows
        if last is None:
            if not quiet:
                self._status("The journal has no finished A/B yet.")
            return
        if isinstance(last, str):
            self._status(last)
            return
        self._status(last.status)
        if self.campaign is None:  # a finished A/B: not the bar of whatever ran last
            self.query_one("#ab-progress", ProgressBar).update(total=1, progress=1)
        self.show_comparison(last.comparison, last.series)
        self.show_timelines(last.a, last.b)

    # ------------------------------------------------------------------ progress
    def _show_event(self, ev: ABEvent) -> None:
        self.query_one("#ab-log", Log).write_line(f"[{ev.step}/{ev.steps}] {ev.line()}")
        bar = self.query_one("#ab-progress", ProgressBar)
        total = max(1, ev.steps)
        done: float = ev.step
        if ev.kind in ("progress", "bench-progress") and ev.fraction is not None:
            done = min(total, ev.step + ev.fraction)
        bar.update(total=total, progress=done)
        if ev.kind not in ("done",):
            self._status(ev.line())

    def _finished(self, rep: ABReport) -> None:
        self.report = rep
        self._view_gen += 1
        bar = self.query_one("#ab-progress", ProgressBar)
        if rep.status == "completed":
            bar.update(progress=bar.total or 1)
        bar.display = False
        from tunedeck.commands._benchjob import outcome_words
        from tunedeck.commands.ab import EXIT_PARTIAL

        state = outcome_words(EXIT_PARTIAL) if rep.status == "partial" else rep.status
        status = Text(f"A/B {rep.id} {state}", style="bold")
        if rep.error:
            status.append(f": {rep.error}")
        if rep.left_running:
            status.append("\nstill running: " + "; ".join(rep.left_running), style="bold")
        self._status(status)
        if rep.comparison is not None:
            a, b = rep.sides.get("A"), rep.sides.get("B")
            self.show_comparison(rep.comparison)
            if a and b:
                self._chart_worker(rep.comparison, a, b)
                self.show_timelines(a, b)
        else:  # cancelled or failed before any result: nothing of an older A/B stays on screen
            self._clear_results()
            self.query_one("#ab-headline", Static).update(
                Text(f"A/B {rep.id} {rep.status}: no results to compare.", style="bold")
            )

    # ------------------------------------------------------------------ view
    @work(thread=True, exclusive=True, group="ab-chart", exit_on_error=False)
    def _chart_worker(self, cmp: Comparison, a: Any, b: Any) -> None:
        """The chart's series from the peak level's samples, read in a thread."""
        from textual.worker import get_current_worker

        series = peak_series(a, b)
        if series is not None and not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._set_chart, cmp, series)

    def _set_chart(self, cmp: Comparison, series: tuple[list[float], list[float]]) -> None:
        if self.is_attached and self.query_one(CompareTable).comparison is cmp:  # not under a later one
            self._show_chart(cmp, series)

    def _clear_results(self) -> None:
        """Drop the table, diff, chart and headline of the previous A/B."""
        self._view_gen += 1
        self.query_one("#ab-headline", Static).update("")
        self.query_one(CompareTable).reset()
        self.query_one(ConfigDiff).reset()
        self.query_one(CompareChart).reset()
        self.timeline_sides = None
        self.refresh_bindings()
        panel = self.query_one("#ab-timeline", TimelinePanel)
        panel.show(None)
        panel.add_class("-empty")

    def show_comparison(self, cmp: Comparison, series: tuple[list[float], list[float]] | None = None) -> None:
        """Show a comparison (table, config diff, warnings, chart)."""
        self.query_one("#ab-headline", Static).update(cmp.headline)
        self._result_shown()
        self.query_one(CompareTable).show(cmp, compact=self.has_class("-narrow"))
        self.query_one(ConfigDiff).show(cmp)
        self._show_chart(cmp, series)

    def _show_chart(self, cmp: Comparison, series: tuple[list[float], list[float]] | None) -> None:
        peak = next((r.concurrency for r in cmp.rows if r.key == "peak_output_tok_s"), None)
        title = f"output tok/s over time{f' at C={peak}' if peak else ''}"
        chart = self.query_one(CompareChart)
        if series is not None:
            chart.set_series(cmp.a, series[0], cmp.b, series[1], title=title)
        else:
            chart.reset(title)

    # ------------------------------------------------------------------ timelines
    def show_timelines(self, a: Any, b: Any, level: int | None = None) -> None:
        """Overlay A's and B's timelines at ``level`` (a concurrency; default: the peak, the highest)."""
        self.timeline_sides = (a, b)
        self.refresh_bindings()
        levels = sorted(set(a.concurrencies()) | set(b.concurrencies()))
        if not levels:
            panel = self.query_one("#ab-timeline", TimelinePanel)
            panel.show(None, Text("no levels to chart a timeline of"))
            panel.add_class("-empty")
            return
        self.timeline_level = level if level in levels else levels[-1]
        self._load_timelines(a, b, self.timeline_level, levels)

    def action_timeline_level(self) -> None:
        if self.timeline_sides is None:
            return
        a, b = self.timeline_sides
        levels = sorted(set(a.concurrencies()) | set(b.concurrencies()))
        if not levels:
            return
        cur = self.timeline_level if self.timeline_level in levels else levels[-1]
        self.show_timelines(a, b, levels[(levels.index(cur) + 1) % len(levels)])

    @work(group="ab-timeline", thread=True, exclusive=True, exit_on_error=False)
    def _load_timelines(self, a: Any, b: Any, level: int, levels: list[int]) -> None:
        """Read both sides' stored timelines at ``level`` (the first repeat that ran it)."""
        from tunedeck.bench.store import StoreError
        from tunedeck.services.timelines import stored_timeline

        snaps, runs = [], []
        for side in (a, b):
            lv = next((r.level(level) for r in side.runs if r.level(level) is not None), None)
            runs.append(len(side.runs))
            snap = TimelineSnapshot(label=side.name)
            if lv is not None and lv.run_id:
                try:
                    snap = stored_timeline(lv.run_id, label=side.name)
                except (StoreError, OSError) as e:
                    log.info("timeline of %s unreadable: %s", lv.run_id, e)
            if snap.validity is None and lv is not None and isinstance(lv.summary.get("validity"), list):
                snap = TimelineSnapshot.from_rows(
                    snap.rows, label=snap.label, run_id=snap.run_id, validity=lv.summary["validity"]
                )
            snaps.append(snap)
        cap = Text()
        cap.append("timelines ", style="bold")
        cap.append(f"at C={level}" + (" (peak)" if level == levels[-1] else ""))
        if max(runs) > 1:
            cap.append(" · repeat 1 of each side")
        cap.append(" · x: s into the timed phase", style="dim")
        if len(levels) > 1:
            cap.append(" · t: next level", style="dim")
        fig = overlay(snaps[0], snaps[1], a.name, b.name, f"C={level}")
        self.post_message(ABTimeline(level, fig, cap))

    @on(ABTimeline)
    def _timeline_loaded(self, msg: ABTimeline) -> None:
        if msg.level != self.timeline_level or self.timeline_sides is None:
            return  # a level the user moved past, or an A/B cleared meanwhile
        panel = self.query_one("#ab-timeline", TimelinePanel)
        panel.remove_class("-empty")
        panel.show(msg.figure, msg.caption)
        panel.redraw()


@dataclass(frozen=True)
class LastAB:
    """The journal's last finished A/B, ready to show."""

    status: str
    a: Side
    b: Side
    comparison: Comparison
    series: tuple[list[float], list[float]] | None


def last_ab() -> LastAB | str | None:
    """The journal's last finished A/B (None: there is none; a str: why it cannot be shown). Reads
    the journal and the peak level's samples: call it off the event loop."""
    try:
        ents = [e for e in Journal().entries("ab") if e.get("comparison")]
    except OSError as err:
        log.warning("the A/B journal is unreadable: %s", err)
        return f"the A/B journal is unreadable: {err}"
    if not ents:
        return None
    e = ents[-1]
    try:
        a, b = side_from_dict(e["a"]), side_from_dict(e["b"])
        cmp = compare(a, b)
    except Exception as ex:  # noqa: BLE001 - one entry written by another version: said, not raised
        return f"journal entry {e.get('id')}: {ex}"
    status = f"A/B {e.get('id')} ({e.get('status')}, {str(e.get('started') or '')[:19]})"
    return LastAB(status, a, b, cmp, peak_series(a, b))


def peak_series(a: Side, b: Side) -> tuple[list[float], list[float]] | None:
    """A's and B's output tok/s over time at their peak level, from the stored samples (files read)."""

    def peak_run(side: Side) -> str | None:
        if not side.runs:
            return None
        cs = side.concurrencies()
        if not cs:
            return None
        lv = side.runs[0].level(cs[-1])
        return lv.run_id if lv else None

    try:
        return run_series(peak_run(a)), run_series(peak_run(b))
    except Exception:  # a chart is never worth an error: logged, the chart stays empty
        log.warning("no tok/s chart for %s vs %s", a.profile, b.profile, exc_info=True)
        return None


__all__ = ["ABTimeline", "CompareScreen", "LastAB", "last_ab", "peak_series"]
