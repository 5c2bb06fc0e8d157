"""Pilot tests of the Compare screen: mark A and B, one key runs the A/B, the comparison appears."""

from __future__ import annotations

import pytest

from tests.abfakes import FakeOps, fake_campaigns
from tests.screenapp import ScreenApp
from tests.waits import until_async
from tunedeck.ui.screens.compare import CompareScreen
from tunedeck.ui.screens.modals import ConfirmModal
from tunedeck.widgets.compare_chart import CompareChart
from tunedeck.widgets.compare_table import CompareTable

pytestmark = pytest.mark.timeout(60)
SIZE = (120, 40)


async def until(pilot, pred, timeout: float = 10.0) -> None:
    await until_async(pred, timeout, pilot=pilot)


async def test_mark_and_one_key_runs_ab_then_comparison_shows():
    ops = FakeOps(bench_delay=0.05)
    scr = CompareScreen(start_campaign=fake_campaigns(ops), profiles=["base", "tuned"], plan="quick")
    app = ScreenApp(scr)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("1")  # base is highlighted: A
        await pilot.press("down", "2")  # tuned: B
        assert scr.marked == {"A": "base", "B": "tuned"}
        table = scr.query_one(CompareTable)
        assert table.row_count == 0
        await pilot.press("g")
        await until(pilot, lambda: scr.report is not None)
        assert scr.report.status == "completed"
        assert table.row_count >= 6
        assert table.get_cell("peak_output_tok_s", "verdict").plain == "B +18%"
        assert "faster" in str(scr.query_one("#ab-headline").content)
        assert ops.log[0] == "launch base" and not ops.live


async def test_confirm_modal_before_stopping_a_running_server():
    ops = FakeOps(running=["old"])
    scr = CompareScreen(start_campaign=fake_campaigns(ops), profiles=["base", "tuned"], a="base", b="tuned")
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("g")
        await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmModal))
        await pilot.press("n")
        await until(pilot, lambda: scr.report is not None)
        assert scr.report.status == "failed" and ops.running == ["old"] and not ops.log


async def test_cancel_key_asks_first_then_stops_and_keeps_results():
    ops = FakeOps(bench_delay=4.0)  # the cancel lands within a level on a loaded machine
    scr = CompareScreen(start_campaign=fake_campaigns(ops), profiles=["base", "tuned"], a="base", b="tuned")
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("g")
        await until(pilot, lambda: "bench base C=1" in ops.log)
        # `x` asks first; Cancel has the focus: enter keeps the A/B running
        await pilot.press("x")
        await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmModal))
        await pilot.press("enter")
        await until(pilot, lambda: pilot.app.screen is scr)
        assert scr.report is None and ops.live
        await until(pilot, lambda: "bench base C=16" in ops.log)  # it goes on
        await pilot.press("x")
        await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmModal))
        await pilot.press("y")
        await until(pilot, lambda: scr.report is not None)
        assert scr.report.status == "cancelled" and not ops.live


async def test_needs_two_marks():
    scr = CompareScreen(start_campaign=fake_campaigns(FakeOps()), profiles=["base", "tuned"])
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("g")
        await pilot.pause()
        assert scr.campaign is None
        assert "Mark two profiles" in str(scr.query_one("#ab-status").content)


async def test_chart_draws_two_series():
    scr = CompareScreen(start_campaign=fake_campaigns(FakeOps()), profiles=[])
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        chart = scr.query_one(CompareChart)
        chart.set_series("A", [10, 20, 30], "B", [12, 24, 36])
        await pilot.pause()
        out = chart.render().plain
        assert "A" in out and "B" in out and "seconds" in out


async def test_repeats_and_interleave_keys():
    ops = FakeOps()
    scr = CompareScreen(start_campaign=fake_campaigns(ops), profiles=["base", "tuned"], a="base", b="tuned")
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("plus", "i", "g")
        await until(pilot, lambda: scr.report is not None)
        assert scr.repeats == 2 and scr.interleave
        assert [x for x in ops.log if x.startswith("launch")] == ["launch base", "launch tuned"] * 2
        assert scr.report.comparison.repeats == (2, 2)


async def test_last_ab_shows_a_full_progress_bar():
    # j (or opening the screen) shows the last finished A/B: its bar must not keep the
    # 0% / 25% of whatever ran (or was cancelled) before
    ops = FakeOps(bench_delay=0.01)
    scr = CompareScreen(start_campaign=fake_campaigns(ops), profiles=["base", "tuned"], plan="quick")
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("1", "down", "2", "g")
        await until(pilot, lambda: scr.report is not None)
        bar = scr.query_one("#ab-progress")
        bar.update(total=8, progress=2)
        await pilot.press("j")
        await until(pilot, lambda: bar.percentage == 1.0)  # the journal is read in a thread
    scr2 = CompareScreen(start_campaign=fake_campaigns(FakeOps()), profiles=["base", "tuned"])
    async with ScreenApp(scr2).run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "completed" in str(scr2.query_one("#ab-status").content))
        assert scr2.query_one("#ab-progress").percentage == 1.0


async def test_at_80x24_a_comparison_takes_the_width_and_p_brings_the_profiles_back():
    """80×24 is a first-class size: A, B, Δ and the verdict of every row are on screen (the
    sides' names are in the headline); the profile list comes back with p, or with 1/2."""
    ops = FakeOps(bench_delay=0.05)
    scr = CompareScreen(start_campaign=fake_campaigns(ops), profiles=["base", "tuned"], a="base", b="tuned")
    async with ScreenApp(scr).run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        side = scr.query_one("#ab-side")
        assert side.display  # nothing compared yet: the profiles are what there is to use
        await pilot.press("g")
        await until(pilot, lambda: scr.report is not None and scr.query_one(CompareTable).row_count >= 6)
        await pilot.pause()
        table = scr.query_one(CompareTable)
        assert not side.display
        assert [str(c.label) for c in table.columns.values()][:3] == ["Metric", "A", "B"]
        # every column ends inside the table's own width: nothing cut at the right edge
        assert sum(c.get_render_width(table) for c in table.columns.values()) <= table.size.width
        await pilot.press("p")
        await pilot.pause()
        assert side.display
        await pilot.press("p")
        await pilot.pause()
        assert not side.display
        await pilot.press("1")  # marking needs the list: the first key shows it, marks nothing
        await pilot.pause()
        assert side.display and scr.marked == {"A": "base", "B": "tuned"}


@pytest.mark.parametrize(
    ("key", "concurrency", "label", "short"),
    [
        ("single_output_tok_s", 1, "Single-stream output", "1-stream output tok/s C=1"),
        ("single_decode_tok_s", None, "Single-stream decode", "1-stream decode tok/s"),
        ("peak_output_tok_s", 64, "Peak output", "Peak output tok/s C=64"),
        ("output_tok_s_c16", 16, "Output throughput at 16", "Output tok/s C=16"),
        ("ttft_p50_c8", 8, "TTFT p50 at 8", "TTFT p50 ms C=8"),
        ("ttft_p99_c8", 8, "TTFT p99 at 8", "TTFT p99 ms C=8"),
        ("tpot_median_c4", 4, "TPOT median at 4", "TPOT median ms C=4"),
        ("itl_p99_c4", 4, "ITL p99 at 4", "ITL p99 ms C=4"),
        ("spec_acceptance_pct", 8, "Speculative acceptance", "Spec acceptance % C=8"),
        ("spec_accept_length", None, "Speculative accept length", "Spec accept length"),
        ("prefix_cache_hit_pct", 32, "Prefix cache hits", "Prefix cache hit % C=32"),
        ("startup_s", 8, "Startup time", "Startup s"),
        ("failed_requests", 8, "Failed requests overall", "Failed requests"),
        ("goodput_c8", 8, "Goodput at 8", "Goodput at 8"),
    ],
)
def test_the_table_names_each_metric_compactly(key, concurrency, label, short):
    from tunedeck.ab.compare import Row

    row = Row(key, label, "", "higher", None, None, None, 0.0, "na", "", concurrency)
    assert CompareTable.short_label(row) == short


async def test_the_last_ab_and_its_chart_are_read_off_the_event_loop(monkeypatch):
    """The journal only grows and the chart re-reads the peak level's samples: both are read in a
    thread, and what was read is shown when it lands."""
    import json
    import threading

    from tests.conftest import REPO
    from tunedeck.ab.journal import Journal
    from tunedeck.ui.screens import compare as compare_screen

    e = json.loads((REPO / "screenshots" / "compare-ab.json").read_text())
    Journal().append({k: v for k, v in e.items() if k not in ("v", "time", "series")})
    readers: list[bool] = []

    def series(run_id: str | None) -> list[float]:
        readers.append(threading.current_thread() is threading.main_thread())
        return [1.0, 2.0, 3.0]

    monkeypatch.setattr(compare_screen, "run_series", series)
    scr = CompareScreen(start_campaign=fake_campaigns(FakeOps()), profiles=["base", "tuned"])
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        chart = scr.query_one(CompareChart)
        await until(pilot, lambda: chart.series)
        assert f"A/B {e['id']}" in str(scr.query_one("#ab-status").content)
        assert scr.query_one(CompareTable).row_count > 0
    assert readers == [False, False]  # A's and B's peak level, neither on the event loop


async def test_a_journal_read_that_lands_after_an_ab_started_is_not_shown(monkeypatch):
    """j, then g before the journal was read: the A/B that started is what the screen shows, not
    the last one of the journal landing over it."""
    import json
    import threading

    from tests.conftest import REPO
    from tunedeck.ab.journal import Journal
    from tunedeck.ui.screens import compare as compare_screen

    e = json.loads((REPO / "screenshots" / "compare-ab.json").read_text())
    Journal().append({k: v for k, v in e.items() if k not in ("v", "time", "series")})
    release = threading.Event()
    real = compare_screen.last_ab

    def slow_last_ab() -> object:
        release.wait(10)
        return real()

    monkeypatch.setattr(compare_screen, "last_ab", slow_last_ab)
    ops = FakeOps(bench_delay=5.0)  # the A/B is still running when the read lands
    scr = CompareScreen(start_campaign=fake_campaigns(ops), profiles=["base", "tuned"], a="base", b="tuned")
    landed: list[int] = []
    show_last = scr._show_last

    def counted(*args: object) -> None:
        landed.append(1)
        show_last(*args)  # type: ignore[arg-type]

    scr._show_last = counted  # type: ignore[method-assign]
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("j")
        await pilot.press("g")
        await until(pilot, lambda: "bench base C=1" in ops.log)
        release.set()
        await until(pilot, lambda: landed)
        await pilot.pause()
        assert scr.query_one(CompareTable).row_count == 0
        assert f"A/B {e['id']}" not in str(scr.query_one("#ab-status").content)
        assert "faster" not in str(scr.query_one("#ab-headline").content)
