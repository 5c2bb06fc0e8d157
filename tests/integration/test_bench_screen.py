"""BenchScreen in a minimal App: the live chart updates while `tunedeck bench` runs."""

import asyncio

import pytest
from textual.app import App

from tests.clifix import bench_load
from tests.fakesrv import FakeServer
from tests.screenapp import ScreenApp
from tunedeck.bench import store
from tunedeck.commands.bench import parse_plan
from tunedeck.ui.screens.bench import BenchScreen
from tunedeck.ui.screens.modals import ConfirmModal
from tunedeck.widgets.throughput_chart import ThroughputChart


def bench_app(args: list[str]) -> ScreenApp:
    """The benchmark screen running ``tunedeck bench ARGS``."""
    return ScreenApp(BenchScreen(parse_plan(args)))


async def test_chart_widget_bounded_and_throttled():
    class A(App):
        def compose(self):
            yield ThroughputChart("t", max_points=5, refresh_interval=0.1, id="c")

    app = A()
    async with app.run_test(size=(100, 30)) as pilot:
        c = app.query_one(ThroughputChart)
        await pilot.pause(0.2)
        f0 = c.frames
        for i in range(50):
            c.append("a", i, i)
        assert c.point_count == 5 and next(iter(c.series["a"])) == (45.0, 45.0)
        await pilot.pause(0.35)
        assert c.frames - f0 >= 1
        assert c.frames - f0 <= 4  # 50 appends did not cause 50 frames
        with pytest.raises(ValueError):
            ThroughputChart(kind="pie")


@pytest.mark.timeout(90)
async def test_live_chart_updates_during_a_run():
    with FakeServer("--ttft-ms", "20", "--itl-ms", "25") as srv:
        app = bench_app(["--url", srv.url, *bench_load("2,8", 16, 100, json_out=False)])
        async with app.run_test(size=(120, 48), message_hook=app.messages.append) as pilot:
            screen = app.screen
            assert isinstance(screen, BenchScreen)
            chart = screen.query_one("#tok-chart", ThroughputChart)
            seen_points = []
            seen_frames = []
            for _ in range(300):
                await pilot.pause(0.1)
                seen_points.append(chart.point_count)
                seen_frames.append(chart.frames)
                if screen.rc is not None:
                    break
            assert screen.rc == 0, screen.error
            # the chart grew while the run was going, frame by frame
            growth = sorted(set(seen_points))
            assert len(growth) >= 3 and growth[-1] >= 4
            assert seen_frames[-1] > seen_frames[0] + 2
            assert len(screen.summaries) == 2
            assert [s["max_concurrency"] for s in screen.summaries] == [2, 8]
            assert screen.query_one("#sweep-row").display
            sweep = screen.query_one("#sweep-chart", ThroughputChart)
            assert [p[0] for p in sweep.series["output tok/s"]] == [2.0, 8.0]
            pareto = screen.query_one("#pareto-chart", ThroughputChart)
            assert pareto.point_count == 2
            ticks = [m for m in app.messages if isinstance(m, BenchScreen.Progress) and m.data["type"] == "tick"]
            assert ticks and max(t.data["tok_s"] for t in ticks) > 0
            assert "finished" in str(screen.query_one("#bench-status").content)
            assert "TTFT p50" in str(screen.query_one("#bench-latency").content)
            # it ran as a host-side job (here: this machine), not in the dashboard's process
            assert screen.job_id and f"job {screen.job_id}" in str(screen.query_one("#bench-status").content)
    runs = store.list_runs()  # mirrored into the local store
    assert len(runs) == 2 and all(r.meta["client"]["where"] == "host" for r in runs)


@pytest.mark.timeout(90)
async def test_stop_key_interrupts_and_keeps_partial_results():
    with FakeServer("--ttft-ms", "20", "--itl-ms", "20") as srv:
        app = bench_app(["--url", srv.url, *bench_load(4, 400, 50, json_out=False)])
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.screen
            for _ in range(100):
                await pilot.pause(0.1)
                if screen.last_tick.get("completed", 0) >= 4:
                    break
            # `s` asks first; Cancel has the focus: enter (or n, escape) keeps the benchmark running
            for no in ("enter", "n", "escape"):
                await pilot.press("s")
                await pilot.pause(0.2)
                assert isinstance(app.screen, ConfirmModal), no
                seen = screen.last_tick.get("completed", 0)
                await pilot.press(no)
                await pilot.pause(0.2)
                assert app.screen is screen and screen.state == "running" and screen.rc is None
            for _ in range(100):  # still running: more requests finish
                await pilot.pause(0.1)
                if screen.last_tick.get("completed", 0) > seen:
                    break
            assert screen.last_tick.get("completed", 0) > seen
            await pilot.press("s")
            await pilot.pause(0.2)
            await pilot.press("y")
            for _ in range(100):
                await pilot.pause(0.1)
                if screen.rc is not None:
                    break
            assert screen.rc == 130
            assert "interrupted" in screen.state
    [run] = store.list_runs()
    assert run.summary is not None and run.summary["partial"] is True
    assert 4 <= run.summary["completed"] < 400
    # the requests the stop cut short are cancelled, not failed
    assert run.summary["failed"] == 0 and run.summary["cancelled"] >= 1, run.summary
    await asyncio.sleep(0)


# ---------------------------------------------------------------- goodput targets in the bench form
async def test_form_slo_fields_become_goodput_and_a_bad_value_names_its_field():
    from textual.widgets import Input

    from tunedeck.ui.screens.bench_setup import BenchSetupScreen

    app = App()
    async with app.run_test(size=(120, 48)) as pilot:
        setup = BenchSetupScreen()
        app.push_screen(setup)
        await pilot.pause()
        setup.query_one("#bs-url", Input).value = "http://127.0.0.1:9"
        setup.query_one("#bs-slo-ttft", Input).focus()
        await pilot.press(*"20O")  # a typo: letter O for zero
        await pilot.pause()
        error = str(setup.query_one("#bs-error").content)
        assert error == "TTFT SLO: '20O' is not a number of milliseconds"
        assert str(setup.query_one("#bs-command").content) == ""
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert app.screen is setup and setup.last_plan is None  # nothing started
        await pilot.press("backspace", "0")
        setup.query_one("#bs-slo-tpot", Input).value = "-5"
        await pilot.pause()
        assert str(setup.query_one("#bs-error").content) == "TPOT SLO: must be a finite number >= 0"
        setup.query_one("#bs-slo-tpot", Input).value = ""
        setup.query_one("#bs-slo-itl", Input).value = "80"
        setup.query_one("#bs-slo-e2el", Input).value = "2500.5"
        await pilot.pause()
        assert str(setup.query_one("#bs-error").content) == ""
        command = str(setup.query_one("#bs-command").content)
        assert command.endswith("--goodput ttft:200 itl:80 e2el:2500.5"), command
        assert setup.current_plan().to_argv()[-4:] == ["--goodput", "ttft:200", "itl:80", "e2el:2500.5"]
        assert setup.current_plan().goodput == (("ttft", 200.0), ("itl", 80.0), ("e2el", 2500.5))


# ---------------------------------------------------------------- live goodput and the per-level table
def _rendered(widget) -> str:
    """What a Static-based widget shows, as plain text (wide enough not to wrap)."""
    from rich.console import Console

    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(widget.render_report(widget.report) if hasattr(widget, "render_report") else widget.content)
    console.file.close()
    return console.export_text()


@pytest.mark.timeout(120)
async def test_live_goodput_then_the_per_level_table_after_a_sweep():
    """Every second request's first token comes late (--pattern ok,slowfirst): half meet ttft:200."""
    from tunedeck.widgets.goodput_panel import GoodputPanel
    from tunedeck.widgets.sweep_table import SweepTable, health_cell

    with FakeServer("--ttft-ms", "20", "--itl-ms", "20", "--pattern", "ok,slowfirst", "--slowfirst-s", "0.4") as srv:
        app = bench_app(["--url", srv.url, *bench_load("2,4", 8, 30, json_out=False), "--goodput", "ttft:200"])
        async with app.run_test(size=(120, 48)) as pilot:
            screen = app.screen
            panel = screen.query_one("#bench-goodput", GoodputPanel)
            live = []
            for _ in range(600):
                await pilot.pause(0.1)
                v = panel.view
                if v is not None and not v.final and v.completed and (not live or live[-1] != v):
                    live.append(v)
                if screen.rc is not None:
                    break
            assert screen.rc == 0, screen.error
            assert screen.goodput_targets == {"ttft": 200.0}
            # updated while the levels ran: counts from the ticks, never more good than completed
            assert len({(v.level, v.completed) for v in live}) >= 2, live
            assert all(v.good is not None and 0 <= v.good <= v.completed <= 8 for v in live)
            assert all(v.targets == (("ttft", 200.0),) for v in live)
            # the last level's summary: 4 of 8 within the target
            final = panel.view
            assert final.final and final.level == "C=4" and (final.good, final.completed) == (4, 8)
            assert final.share == 0.5
            text = str(panel.content)
            assert "Goodput C=4 (final): 4/8 within every target (50.0 %) \u00b7 " in text
            assert "targets TTFT \u2264 200 ms" in text
            # the end report: one row per level, with goodput and a client-health mark
            table = screen.query_one("#sweep-table", SweepTable)
            assert table.display
            report = table.report
            assert report.done and [lv.label for lv in report.levels] == ["C=2", "C=4"]
            for lv, s in zip(report.levels, screen.summaries):
                assert (lv.completed, lv.failed) == (8, 0)
                assert lv.goodput == pytest.approx(4 / s["duration"])
                assert lv.output_throughput == s["output_throughput"] and lv.p99_itl_ms == s["p99_itl_ms"]
            out = _rendered(table)
            for lv in report.levels:  # the machine may be busy here (2 cores, other tests): whatever it was
                row = next(ln for ln in out.splitlines() if ln.lstrip().startswith(lv.label))
                assert row.rstrip().endswith(health_cell(lv.health))
            assert "Sweep: 2 levels" in out and "Good" in out and "C=2" in out and "C=4" in out
            assert ("Client health: ok at every level" in out) == all(lv.health.ok for lv in report.levels)


class ScriptedBench(BenchScreen):
    """Replays progress lines instead of running a benchmark."""

    def __init__(self, script):
        super().__init__([])
        self.script = script

    def run_bench(self) -> None:  # type: ignore[override]
        for m in self.script:
            self.post_message(self.Progress(m))


def _summary(c, *, bound="", busy="", completed=20, goodput=None):
    return {
        "completed": completed,
        "failed": 0 if completed else 3,
        "duration": 4.0,
        "max_concurrency": c,
        "request_throughput": completed / 4.0,
        "output_throughput": 100.0 * c,
        "mean_ttft_ms": 40.0 if completed else 0.0,
        "p99_ttft_ms": 60.0,
        "mean_tpot_ms": 11.0,
        "p99_itl_ms": 15.0,
        "request_goodput": goodput,
        "client_bound": bool(bound),
        "machine_busy": bool(busy),
        "client": {"client_bound_reason": bound, "machine_busy_reason": busy},
    }


async def test_no_goodput_targets_is_said_not_shown_as_zero_and_client_health_is_marked_per_level():
    from tunedeck.widgets.goodput_panel import NO_TARGETS, GoodputPanel
    from tunedeck.widgets.sweep_table import SweepTable

    levels = [{"concurrency": c, "request_rate": "inf"} for c in (1, 64, 256)]
    script = [{"type": "start", "levels": levels, "goodput": {}}]
    for i, c in enumerate((1, 64, 256)):
        script.append({"type": "level_start", "level": i, "concurrency": c, "request_rate": "inf", "run_id": f"r{i}"})
        script.append(
            {
                "type": "tick",
                "level": i,
                "second": 0,
                "t": 1.0,
                "tok_s": 10,
                "completed": 3,
                "total": 20,
                "failed": 0,
                "in_flight": c,
                "cpu": [0.5],
                "good": None,
            }
        )
    app = App()
    async with app.run_test(size=(120, 48)) as pilot:
        screen = ScriptedBench(script[:4])  # start, C=1 running
        app.push_screen(screen)
        await pilot.pause(0.3)
        panel = screen.query_one("#bench-goodput", GoodputPanel)
        assert str(panel.content) == NO_TARGETS and "0" not in str(panel.content)
        assert not screen.query_one("#sweep-table", SweepTable).display
        for m in (
            {"type": "level_done", "level": 0, "summary": _summary(1)},
            *script[4:6],
            {"type": "level_done", "level": 1, "summary": _summary(64, busy="steal 12 %")},
            *script[6:8],
            {
                "type": "level_done",
                "level": 2,
                "summary": _summary(
                    256, bound="a client process used 0.97 of a core", busy="load 9.0 on 8 cores", completed=0
                ),
            },
        ):
            screen.post_message(screen.Progress(m))
        await pilot.pause(0.3)
        assert str(panel.content) == NO_TARGETS
        table = screen.query_one("#sweep-table", SweepTable)
        assert [lv.health.mark for lv in table.report.levels] == ["ok", "machine busy", "client-bound, machine busy"]
        assert not table.report.has_goodput
        out = _rendered(table)
        assert "Good" not in out  # no targets: no goodput column
        assert "C=64 machine busy: steal 12 %" in out
        assert "C=256 client-bound: a client process used 0.97 of a core" in out
        assert "C=256 machine busy: load 9.0 on 8 cores" in out
        row = next(ln for ln in out.splitlines() if ln.lstrip().startswith("C=256"))
        assert "N/A" in row and "0/3" in row  # nothing completed: latencies N/A, not 0
