"""Bench charts worth looking at: throughput from 0, no empty axes, legend = header names."""

from __future__ import annotations

import pytest

from tests.screenapp import ScreenApp
from tunedeck.bench.plan import BenchPlan
from tunedeck.ui.screens.bench import BenchScreen
from tunedeck.widgets.throughput_chart import ThroughputChart

pytestmark = pytest.mark.timeout(60)
SIZE = (120, 40)


class ScriptedBench(BenchScreen):
    """The real BenchScreen, fed scripted progress lines instead of a bench process."""

    def run_bench(self) -> None:  # type: ignore[override]
        pass


def feed(scr: BenchScreen, *msgs: dict) -> None:
    for m in msgs:
        scr.post_message(BenchScreen.Progress(m))


def sweep_lines() -> list[dict]:
    lv = [{"level": i, "concurrency": c, "request_rate": "inf", "run_id": f"r{i}"} for i, c in enumerate((1, 16))]
    out: list[dict] = [{"type": "start", "levels": lv}]
    for i, c in enumerate((1, 16)):
        out.append({"type": "level_start", **lv[i]})
        for sec in range(4):
            out.append(
                {
                    "type": "tick",
                    "level": i,
                    "second": sec,
                    "t": sec + 1.0,
                    "tok_s": 61.0 + sec + 100 * i,
                    "completed": sec,
                    "total": 8,
                    "failed": 0,
                    "in_flight": c,
                    "cpu": [0.1],
                }
            )
        out.append(
            {
                "type": "level_done",
                "level": i,
                "summary": {
                    "completed": 8,
                    "failed": 0,
                    "max_concurrency": c,
                    "output_throughput": 63.0 + 100 * i,
                    "per_user_output_throughput": 63.0 / c,
                    "duration": 4.0,
                },
            }
        )
    return out


async def test_throughput_starts_at_zero_and_empty_charts_have_no_axes():
    scr = ScriptedBench(BenchPlan(url="http://x"))
    app = ScreenApp(scr)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        chart = scr.query_one("#tok-chart", ThroughputChart)
        chart.refresh()
        await pilot.pause()
        empty = chart.render().plain
        assert "waiting for data" in empty and "-1" not in empty and "─" not in empty
        feed(
            scr,
            {"type": "start", "levels": [{"level": 0, "concurrency": 4}]},
            {"type": "level_start", "level": 0, "concurrency": 4, "request_rate": "inf", "run_id": "r0"},
            *[
                {
                    "type": "tick",
                    "level": 0,
                    "second": s,
                    "t": s + 1.0,
                    "tok_s": v,
                    "completed": s,
                    "total": 9,
                    "failed": 0,
                    "in_flight": 4,
                    "cpu": [0.1],
                }
                for s, v in enumerate((61.0, 65.0, 62.0, 64.0))
            ],
        )
        await pilot.pause()
        chart.render()
        assert chart.y_range is not None and chart.y_range[0] == 0.0 and chart.y_range[1] >= 65.0


async def test_sweep_legend_names_levels_like_the_header():
    scr = ScriptedBench(BenchPlan(url="http://x"))
    app = ScreenApp(scr)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        lines = sweep_lines()
        feed(scr, *lines[:8])  # start, level 1 (4 ticks, done), level 2 start
        await pilot.pause()
        chart = scr.query_one("#tok-chart", ThroughputChart)
        status = str(scr.query_one("#bench-status").content)
        assert "level 2/2 (C=16)" in status, status
        assert set(chart.series) == {"C=1"} or set(chart.series) <= {"C=1", "C=16"}
        feed(scr, *lines[8:])
        await pilot.pause()
        assert set(chart.series) == {"C=1", "C=16"}
        assert not any(k.startswith("level 0") for k in chart.series)
        text = chart.render().plain
        assert "C=1" in text and "C=16" in text
        # the C=1 sweep point is drawn inside the frame, with room left for the legend above it
        sweep = scr.query_one("#sweep-chart", ThroughputChart)
        sweep.render()
        lo, hi = sweep.y_range
        assert lo == 0.0 and hi > 163.0


async def test_bench_error_text_is_never_markup():
    scr = ScriptedBench(BenchPlan(url="http://x"))
    app = ScreenApp(scr)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        feed(scr, {"type": "error", "message": "bad [red]thing[/] [link=x]"})
        await pilot.pause()
        assert "bad [red]thing[/] [link=x]" in str(scr.query_one("#bench-status").render())
