"""BenchScreen in a minimal App: the live chart updates while `tunedeck bench` runs."""

import asyncio

import pytest
from textual.app import App

from tests.fakesrv import FakeServer
from tui.bench import store
from tui.ui.screens.bench import BenchScreen
from widgets.throughput_chart import ThroughputChart


class BenchApp(App):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.messages = []

    def on_mount(self) -> None:
        self.push_screen(BenchScreen(self.args))


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
        assert c.point_count == 5 and list(c.series["a"])[0] == (45.0, 45.0)
        await pilot.pause(0.35)
        assert c.frames - f0 >= 1
        assert c.frames - f0 <= 4  # 50 appends did not cause 50 frames
        with pytest.raises(ValueError):
            ThroughputChart(kind="pie")


@pytest.mark.timeout(90)
async def test_live_chart_updates_during_a_run():
    with FakeServer("--ttft-ms", "20", "--itl-ms", "25") as srv:
        app = BenchApp(["--url", srv.url, "--concurrency", "2,8", "--num-prompts", "16", "--input-len", "8",
                        "--output-len", "100", "--warmup", "0"])
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


@pytest.mark.timeout(60)
async def test_stop_key_interrupts_and_keeps_partial_results():
    with FakeServer("--ttft-ms", "20", "--itl-ms", "20") as srv:
        app = BenchApp(["--url", srv.url, "--concurrency", "4", "--num-prompts", "400", "--input-len", "8",
                        "--output-len", "50", "--warmup", "0"])
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.screen
            for _ in range(100):
                await pilot.pause(0.1)
                if screen.last_tick.get("completed", 0) >= 4:
                    break
            await pilot.press("s")
            for _ in range(100):
                await pilot.pause(0.1)
                if screen.rc is not None:
                    break
            assert screen.rc == 130
            assert "interrupted" in screen.state
    [run] = store.list_runs()
    assert run.summary is not None and run.summary["partial"] is True
    assert 4 <= run.summary["completed"] < 400
    await asyncio.sleep(0)


# ---------------------------------------------------------------- goodput targets in the bench form
async def test_form_slo_fields_become_goodput_and_a_bad_value_names_its_field():
    from textual.widgets import Input

    from tui.ui.screens.bench_setup import BenchSetupScreen

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
        assert app.screen is setup and setup.last_args is None  # nothing started
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
        assert setup.current_args()[-4:] == ["--goodput", "ttft:200", "itl:80", "e2el:2500.5"]
