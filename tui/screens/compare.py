"""The Compare screen: mark two profiles A and B, press one key, read the verdict.

Left: the server profiles (``1`` marks the highlighted one as A, ``2`` as B),
the plan, repeats per side (``+``/``-``) and interleaving (``i``). ``g`` starts the A/B (:class:`tui.ab.runner.ABRunner` in a
worker; the benchmarks run as ``tunedeck bench`` subprocesses so the UI
never skews their timings), ``x`` cancels it (the server it started is
stopped, finished results are kept). While it runs: the step, a progress
bar and the event log. At the end: the comparison table (deltas, coloured
verdicts), the configuration difference, warnings, and an overlay chart of
A's and B's output tok/s at the peak level. On opening, the screen shows
the last A/B from the tuning journal.

Standalone use (tests, other apps)::

    class Demo(App):
        def on_mount(self):
            self.push_screen(CompareScreen(ops_factory=lambda: HostOps(host, demo=True)))
"""

from __future__ import annotations

from typing import Any, Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Label, Log, OptionList, ProgressBar, Select, Static
from textual.widgets.option_list import Option

from tui.ab.compare import Comparison, side_from_dict, compare
from tui.ab.journal import Journal
from tui.ab.plans import PlanError, list_plans, load_plan
from tui.ab.runner import ABEvent, ABReport, ABRunner
from tui.ab.series import run_series
from tui.screens.modals import ConfirmModal
from widgets.compare_chart import CompareChart
from widgets.compare_table import CompareTable, ConfigDiff


class ABProgress(Message):
    """One runner event, for the status line, the progress bar and the log."""

    def __init__(self, event: ABEvent) -> None:
        super().__init__()
        self.event = event
        """The runner's event."""


class ABFinished(Message):
    """The A/B ended (completed, failed or cancelled)."""

    def __init__(self, report: ABReport) -> None:
        super().__init__()
        self.report = report
        """What the run produced."""


class CompareScreen(Screen):
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
    """
    BINDINGS = [
        Binding("1", "mark('A')", "Mark A", tooltip="Mark the highlighted profile as A (baseline)", id="ab-mark-a"),
        Binding("2", "mark('B')", "Mark B", tooltip="Mark the highlighted profile as B (candidate)", id="ab-mark-b"),
        Binding("g", "start_ab", "Run A/B", tooltip="Launch, benchmark and compare A and B", id="ab-start"),
        Binding("x", "cancel_ab", "Cancel A/B", tooltip="Stop the A/B; finished results are kept", id="ab-cancel"),
        Binding("j", "load_last", "Last A/B", tooltip="Show the last A/B from the journal", id="ab-last"),
        Binding("plus,equals_sign", "repeats(1)", "Repeats+", tooltip="One more repeat per side", id="ab-repeats-up",
                show=False),
        Binding("minus", "repeats(-1)", "Repeats-", tooltip="One repeat fewer per side", id="ab-repeats-down",
                show=False),
        Binding("i", "toggle_interleave", "Interleave", tooltip="Relaunch per repeat, A B A B", id="ab-interleave",
                show=False),
    ]

    def __init__(
        self,
        *,
        ops_factory: Callable[[], Any] | None = None,
        profiles: list[str] | None = None,
        plan: str = "quick",
        repeats: int = 1,
        interleave: bool = False,
        a: str | None = None,
        b: str | None = None,
        comparison: Comparison | None = None,
        series: tuple[list[float], list[float]] | None = None,
        name: str | None = None,
        id: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id)
        self.ops_factory = ops_factory
        """Builds the ServerOps for a run (default: HostOps over the app's host)."""
        self._profiles = profiles
        self.plan_name = plan
        """The plan the next A/B runs."""
        self.repeats = repeats
        self.interleave = interleave
        self.marked: dict[str, str | None] = {"A": a, "B": b}
        """Profile names marked A and B."""
        self.runner: ABRunner | None = None
        """The A/B in progress (None when idle)."""
        self.report: ABReport | None = None
        """The last finished A/B of this screen."""
        self._initial = comparison
        self._initial_series = series

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        with Horizontal():
            with Vertical(id="ab-side"):
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
                yield Log(id="ab-log", max_lines=2000)
        yield Footer()

    def _plan_options(self) -> list[tuple[str, str]]:
        try:
            return [(n, n) for n, _ in list_plans()]
        except OSError:
            return []

    def on_mount(self) -> None:
        names = self._profiles if self._profiles is not None else self._load_profiles()
        ol = self.query_one("#ab-profiles", OptionList)
        for n in names:
            ol.add_option(Option(n, id=n))
        if names:
            ol.highlighted = 0
        self._show_marks()
        bar = self.query_one("#ab-progress", ProgressBar)
        bar.update(total=1, progress=0)
        bar.display = False  # shown only while an A/B runs: a finished one is not a 0% bar
        if self._initial is not None:
            self.show_comparison(self._initial, self._initial_series)
        else:
            self.action_load_last(quiet=True)

    def _load_profiles(self) -> list[str]:
        try:
            from tui.profiles.store import ProfileStore

            return list(ProfileStore().names())
        except Exception as e:  # noqa: BLE001 - show why instead of crashing
            self.call_after_refresh(self._status, f"profiles unavailable: {e}")
            return []

    # ------------------------------------------------------------------ actions
    def _status(self, text: str | Text) -> None:
        # runner lines and errors quote profile names, paths and messages: never markup
        self.query_one("#ab-status", Static).update(Text(text) if isinstance(text, str) else text)

    def _show_marks(self) -> None:
        t = Text()
        t.append("A: ", style="bold")
        t.append(self.marked["A"] or "(press 1)")
        t.append("\nB: ", style="bold")
        t.append(self.marked["B"] or "(press 2)")
        t.append(f"\nrepeats {self.repeats} (+/-){', interleaved' if self.interleave else ''} (i)", style="dim")
        self.query_one("#ab-marks", Static).update(t)

    def action_mark(self, side: str) -> None:
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
        running = self.runner is not None
        if action == "cancel_ab":
            return True if running else None
        if action in ("start_ab", "mark", "repeats", "toggle_interleave"):
            return None if running else True
        return True

    def action_start_ab(self) -> None:
        if self.runner is not None:
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
        try:
            ops = self._make_ops()
        except Exception as e:  # noqa: BLE001
            self._status(Text(f"cannot start the A/B: {e}", style="bold"))
            return
        self.query_one("#ab-log", Log).clear()
        self._clear_results()
        self.runner = ABRunner(
            ops, a, b, plan, repeats=self.repeats, interleave=self.interleave,
            confirm_stop=self._confirm, on_event=lambda ev: self.post_message(ABProgress(ev)),
        )
        self._status(f"A/B {a} vs {b}, plan {plan.name}: starting…")
        bar = self.query_one("#ab-progress", ProgressBar)
        bar.update(total=1, progress=0)
        bar.display = True
        self.refresh_bindings()
        self._run_worker(self.runner)

    def _make_ops(self) -> Any:
        if self.ops_factory is not None:
            return self.ops_factory()
        host = getattr(self.app, "host", None)
        if host is None:
            raise RuntimeError("the dashboard has no host to run on")
        from tui.ab.ops import HostOps

        return HostOps(host, demo=getattr(self.app, "target", "") == "demo")

    @work(group="ab", exit_on_error=False)
    async def _run_worker(self, runner: ABRunner) -> None:
        rep = await runner.run()
        self.post_message(ABFinished(rep))

    async def _confirm(self, question: str) -> bool:
        return bool(await self.app.push_screen_wait(ConfirmModal(question, title="Stop a running server?", action="Stop it", cancel="Keep it", danger=True)))

    def action_cancel_ab(self) -> None:
        if self.runner is not None:
            self._status("cancelling: stopping the server the A/B started…")
            self.runner.cancel()

    def action_load_last(self, quiet: bool = False) -> None:
        try:
            ents = [e for e in Journal().entries("ab") if e.get("comparison")]
        except OSError:
            ents = []
        if not ents:
            if not quiet:
                self._status("The journal has no finished A/B yet.")
            return
        e = ents[-1]
        try:
            a, b = side_from_dict(e["a"]), side_from_dict(e["b"])
            cmp = compare(a, b)
        except Exception as ex:  # noqa: BLE001
            self._status(f"journal entry {e.get('id')}: {ex}")
            return
        self._status(f"A/B {e.get('id')} ({e.get('status')}, {e.get('started', '')[:19]})")
        if self.runner is None:  # a finished A/B: not the bar of whatever ran last
            self.query_one("#ab-progress", ProgressBar).update(total=1, progress=1)
        self.show_comparison(cmp, self._series_of(a, b))

    # ------------------------------------------------------------------ progress
    @on(ABProgress)
    def _progress(self, msg: ABProgress) -> None:
        ev = msg.event
        self.query_one("#ab-log", Log).write_line(f"[{ev.step}/{ev.steps}] {ev.line()}")
        bar = self.query_one("#ab-progress", ProgressBar)
        total = max(1, ev.steps)
        done = ev.step
        if ev.kind in ("progress", "bench-progress") and ev.fraction is not None:
            done = min(total, ev.step + ev.fraction)
        bar.update(total=total, progress=done)
        if ev.kind not in ("done",):
            self._status(ev.line())

    @on(ABFinished)
    def _finished(self, msg: ABFinished) -> None:
        rep = msg.report
        self.report = rep
        self.runner = None
        self.refresh_bindings()
        bar = self.query_one("#ab-progress", ProgressBar)
        if rep.status == "completed":
            bar.update(progress=bar.total or 1)
        bar.display = False
        status = Text(f"A/B {rep.id} {rep.status}", style="bold")
        if rep.error:
            status.append(f": {rep.error}")
        if rep.left_running:
            status.append("\nstill running: " + "; ".join(rep.left_running), style="bold")
        self._status(status)
        if rep.comparison is not None:
            a, b = rep.sides.get("A"), rep.sides.get("B")
            self.show_comparison(rep.comparison, self._series_of(a, b) if a and b else None)
        else:  # cancelled or failed before any result: nothing of an older A/B stays on screen
            self._clear_results()
            self.query_one("#ab-headline", Static).update(
                Text(f"A/B {rep.id} {rep.status}: no results to compare.", style="bold"))

    # ------------------------------------------------------------------ view
    def _series_of(self, a, b) -> tuple[list[float], list[float]] | None:
        def peak_run(side) -> str | None:
            if not side.runs:
                return None
            cs = side.concurrencies()
            if not cs:
                return None
            lv = side.runs[0].level(cs[-1])
            return lv.run_id if lv else None

        try:
            return run_series(peak_run(a)), run_series(peak_run(b))
        except Exception:  # noqa: BLE001 - a chart is never worth an error
            return None

    def _clear_results(self) -> None:
        """Drop the table, diff, chart and headline of the previous A/B."""
        self.query_one("#ab-headline", Static).update("")
        self.query_one(CompareTable).reset()
        self.query_one(ConfigDiff).reset()
        self.query_one(CompareChart).reset()

    def show_comparison(self, cmp: Comparison, series: tuple[list[float], list[float]] | None = None) -> None:
        """Show a comparison (table, config diff, warnings, chart)."""
        self.query_one("#ab-headline", Static).update(cmp.headline)
        self.query_one(CompareTable).show(cmp)
        self.query_one(ConfigDiff).show(cmp)
        peak = next((r.concurrency for r in cmp.rows if r.key == "peak_output_tok_s"), None)
        title = f"output tok/s over time{f' at C={peak}' if peak else ''}"
        chart = self.query_one(CompareChart)
        if series is not None:
            chart.set_series(cmp.a, series[0], cmp.b, series[1], title=title)
        else:
            chart.reset(title)


__all__ = ["ABFinished", "ABProgress", "CompareScreen"]
