"""BenchScreen: starts a benchmark on its host and shows it live.

The benchmark never runs in the UI's process (its timestamps must not be
skewed by rendering): it runs detached on the host next to the server (with
``--url``, on this machine), through :class:`tui.services.benchrun.BenchRun`,
the same driver as ``tunedeck bench``; a worker follows its events. Leaving the
screen detaches; ``s`` stops the run (finished samples are kept). Shown: output tok/s per 1-s
bucket, TTFT/ITL percentiles, completed/failed/in-flight; for sweeps,
throughput vs concurrency and per-user tok/s vs total tok/s. Goodput (the share of completed
requests within every SLO target, and good req/s) live from the ticks, then from each level's
summary; as levels finish, a per-level table (``vllm bench serve``'s end report) with each
level's client-health mark and its reasons.

Works standalone: ``app.push_screen(BenchScreen(["--url", URL, "--concurrency", "1,8"]))``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from tui.model import GoodputView, SweepLevel, SweepReport
from widgets.goodput_panel import GoodputPanel
from widgets.sweep_table import SweepTable
from widgets.throughput_chart import ThroughputChart


class BenchScreen(Screen[list[dict[str, Any]]]):
    """Live view of one ``tunedeck bench`` run (or sweep)."""

    BINDINGS = [
        Binding("s", "stop", "Stop run", id="bench-stop",
                tooltip="Interrupt the benchmark; finished requests are kept (summary marked partial)"),
        Binding("escape", "close", "Back", id="bench-back"),
    ]

    DEFAULT_CSS = """
    BenchScreen #bench-status { height: auto; max-height: 4; padding: 0 1; }
    BenchScreen #bench-latency { height: 3; padding: 0 1; }
    BenchScreen #tok-chart { height: 1fr; min-height: 8; }
    BenchScreen #sweep-row { height: 1fr; min-height: 8; }
    BenchScreen #sweep-row ThroughputChart { width: 1fr; height: 100%; }
    BenchScreen #bench-goodput { height: auto; max-height: 2; }
    BenchScreen #sweep-table { display: none; height: auto; max-height: 16; }
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

    def __init__(self, bench_args: Sequence[str], *, attach: tuple[Any, str] | None = None,
                 name: str | None = None, id: str | None = None) -> None:  # noqa: A002
        super().__init__(name=name, id=id)
        self.bench_args = list(bench_args)
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

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("starting benchmark...", id="bench-status")
            yield Static("", id="bench-latency")
            yield GoodputPanel(id="bench-goodput")
            yield SweepTable(id="sweep-table")
            yield ThroughputChart("output tok/s (1 s buckets)", xlabel="s", ylabel="tok/s", id="tok-chart")
            with Horizontal(id="sweep-row"):
                yield ThroughputChart("throughput vs concurrency", xlabel="concurrency", ylabel="tok/s",
                                      kind="line", id="sweep-chart")
                yield ThroughputChart("per-user vs total tok/s", xlabel="total tok/s", ylabel="tok/s/user",
                                      kind="scatter", id="pareto-chart")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#sweep-row").display = False
        self.run_bench()

    # ------------------------------------------------------------ the run
    @work(group="bench", exit_on_error=False)
    async def run_bench(self) -> None:
        from tui.commands.bench import start_run
        from tui.services import jobs, runtime
        from tui.hostops.hosts import HostError

        from tui.services.benchrun import BenchRun

        try:
            if self.attach is not None:
                self._run = await BenchRun.attach(*self.attach)
            else:
                self._run = await start_run(self.bench_args)
        except (ValueError, HostError, jobs.JobError, runtime.RuntimeUnavailable) as e:
            self.post_message(self.Finished(None, [], f"cannot start the benchmark: {e}"))
            return
        run = self._run
        self.job_id = run.job_id
        try:
            async for msg in run.events():
                self.post_message(self.Progress(msg))
        except HostError as e:
            self.post_message(self.Finished(None, run.summaries, f"lost the benchmark: {e}"))
            return
        ex = run.exit or {}
        rc = ex.get("rc") if isinstance(ex.get("rc"), int) else None
        self.post_message(self.Finished(rc, run.summaries, str(ex.get("error") or "") if rc else ""))

    @work(group="bench-stop", exit_on_error=False)
    async def _stop_run(self) -> None:
        from tui.services import jobs
        from tui.hostops.hosts import HostError

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
        if self._run is not None and self.rc is None and self.state != "stopping":
            self.state = "stopping"
            self._stop_run()
            self._show_status()

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
                chart.append(self._level_name(m.get("level", -1)) if self._sweep else "tok/s",
                             self._level_base + m["second"] + 1, m["tok_s"])
            self._level_offset = self._level_base + m["t"]
            self._show_latency(m)
        elif kind == "level_done":
            s = m["summary"]
            self.summaries.append(s)
            if self.last_tick:
                self.last_tick = {**self.last_tick, "completed": s["completed"], "failed": s["failed"],
                                  "in_flight": 0}
            if self.sweep_key == "request_rate":
                x = float(s.get("request_rate") or 0.0)
            else:
                x = float(s.get("max_concurrency") or s.get("max_concurrent_requests") or 0)
            if math.isfinite(x):  # an 'inf' rate level has no place on a rate axis
                self.query_one("#sweep-chart", ThroughputChart).append("output tok/s", x, s["output_throughput"])
            self.query_one("#pareto-chart", ThroughputChart).append(
                "levels", s["output_throughput"], s.get("per_user_output_throughput") or 0.0)
            self._level_offset = self._level_base + float(s.get("duration") or 0.0)
            self._show_latency({
                "ttft_p50_ms": s.get("median_ttft_ms"), "ttft_p99_ms": s.get("p99_ttft_ms"),
                "itl_p50_ms": s.get("median_itl_ms"), "itl_p99_ms": s.get("p99_itl_ms"),
            })
        elif kind == "error":
            self.error = m.get("message", "")
        self._show_goodput_and_levels(m)
        self._show_status()

    def on_bench_screen_finished(self, event: "BenchScreen.Finished") -> None:
        self.rc = event.rc
        if event.error:
            self.error = event.error
        self.state = "finished" if event.rc == 0 else (
            "interrupted (partial results saved)" if event.rc == 130 else f"failed (exit {event.rc})")
        self._show_status()

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
        if t:
            status.append(f"\ncompleted {t['completed']}/{t['total']} · failed {t['failed']} · "
                          f"in flight {t['in_flight']} · {t['tok_s']} tok/s · "
                          f"client cpu {max(t.get('cpu') or [0]):.2f}")
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
            panel.show(GoodputView(GoodputView.order(self.goodput_targets), self._level_name(m.get("level", -1)),
                                   int(m.get("completed") or 0), good if isinstance(good, int) else None,
                                   float(m.get("t") or 0.0)))
        elif kind == "level_done":
            s = m["summary"]
            name = self._level_name(m.get("level", -1))
            if self.goodput_targets is not None:
                panel.show(GoodputView.from_summary(s, self.goodput_targets, name))
            self.sweep_levels.append(SweepLevel.from_summary(s, name))
            table = self.query_one("#sweep-table", SweepTable)
            table.show(SweepReport(tuple(self.sweep_levels), self._levels or len(self._level_info)))
            table.display = True


def _ms(v: Any, digits: int) -> str:
    if v is None or isinstance(v, float) and not math.isfinite(v):
        return "N/A"
    return f"{float(v):.{digits}f} ms"


def latency_line(m: dict[str, Any]) -> str:
    """TTFT/ITL percentiles of a progress tick or level summary; N/A (never 0) when missing."""
    return (f"TTFT p50 {_ms(m.get('ttft_p50_ms'), 1)}  p99 {_ms(m.get('ttft_p99_ms'), 1)}    "
            f"ITL p50 {_ms(m.get('itl_p50_ms'), 2)}  p99 {_ms(m.get('itl_p99_ms'), 2)}")
