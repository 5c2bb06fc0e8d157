"""The timeline charts in the dashboard: the widget draws stacked panels that line up, says
"no data" for a metric nobody reported; a run's timeline rows reach the Bench screen's charts
as messages from the run follower (live, then read back from the stored file); the Compare
screen overlays A's and B's timelines; a stored result opens on its timeline."""

from __future__ import annotations

import json

import pytest
from textual.app import App
from textual.widgets import DataTable

from tests.screenapp import ScreenApp
from tests.snapshot_app import REPO, timeline_row, write_ab_timelines
from tests.waits import until_async
from tunedeck.bench.plan import BenchPlan
from tunedeck.bench.store import run_dir
from tunedeck.commands.bench import parse_plan
from tunedeck.timeline_model import TimelineSnapshot, figure, overlay
from tunedeck.ui.screens.bench import TIMELINE_SIDE_BY_SIDE, BenchScreen
from tunedeck.ui.screens.compare import ABTimeline, CompareScreen
from tunedeck.widgets._axes import LABEL_W, nice_ceil, short_number
from tunedeck.widgets.timeline_charts import (
    TimelineCharts,
    TimelinePanel,
    segments,
    validity_lines,
    x_step,
    y_range,
)

pytestmark = pytest.mark.timeout(90)


async def until(pilot, pred, timeout: float = 20.0) -> None:
    await until_async(pred, timeout, pilot=pilot)


def rows(n: int, *, gpu: bool = True, server: bool = True, gap: tuple[int, ...] = ()) -> list[dict]:
    out = []
    for s in range(n):
        if s in gap:
            continue
        r = timeline_row(s, 100.0 * min(1.0, (s + 1) / 3), 16)
        if not gpu:
            r["gpu"] = {}
        if not server:
            r["server"] = {k: None for k in r["server"]}
        out.append(r)
    return out


# ---------------------------------------------------------------------- drawing helpers


def test_segments_break_at_gaps_and_average_long_series():
    assert segments([1.0, 2.0, None, 4.0], 100) == [([1.0, 2.0], [1.0, 2.0]), ([4.0], [4.0])]
    assert segments([None, None], 100) == []
    long = segments([float(i) for i in range(1000)], 100)
    assert len(long) == 1 and len(long[0][0]) == 100
    assert long[0][1][0] == pytest.approx(4.5) and long[0][0][-1] == pytest.approx(995.5)
    holes = segments([1.0] * 10 + [None] * 10 + [2.0] * 10, 6)  # a gap wider than a bucket stays a gap
    assert len(holes) == 2


def test_axis_helpers_give_round_short_labels():
    assert [nice_ceil(x) for x in (16.8, 735, 1420, 0.3, 100)] == pytest.approx([20, 800, 1500, 0.3, 100])
    assert all(len(short_number(v)) <= LABEL_W for v in (0, 0.25, 1.25, 17.6, 1875, 15000, 123456, 9.99e6))
    assert short_number(1500) == "1500" and short_number(15000) == "15k" and short_number(2.5) == "2.5"
    assert x_step(10, 80) == 1 and x_step(300, 80) == 30 and x_step(3600, 60) == 600
    fig = figure(TimelineSnapshot.from_rows(rows(10)))
    _tok, kv, _, clock, power = fig.panels
    assert y_range(kv) == (0.0, 100.0)
    lo, hi = y_range(clock)
    assert 0 < lo < 1755 and hi > 1980  # clocks: their own range, not from 0
    assert y_range(power)[1] >= 700  # the cap is inside the frame


# ---------------------------------------------------------------------- the widget


class ChartApp(App):
    def compose(self):
        yield TimelinePanel("nothing yet")


async def test_panels_line_up_and_missing_metrics_say_no_data():
    app = ChartApp()
    async with app.run_test(size=(90, 40)) as pilot:
        panel = app.query_one(TimelinePanel)
        charts = app.query_one(TimelineCharts)
        assert "nothing yet" in charts.render().plain
        snap = TimelineSnapshot.from_rows(rows(12, gpu=False, gap=(5,)), label="C=16", validity=[])
        panel.show(figure(snap), "caption")
        panel.redraw()
        await pilot.pause()
        text = charts.render().plain.split("\n")
        assert charts.layout_rows["sm_clock"] == 0 and charts.layout_rows["power"] == 0
        assert min(charts.layout_rows[k] for k in ("tok_s", "kv_pct", "queue")) >= 3
        assert any(ln.startswith("SM clock (MHz)  no data") for ln in text)
        assert any(ln.startswith("power (W, mean per GPU)  no data") for ln in text)
        plot = [ln for ln in text if len(ln) > LABEL_W and ln[LABEL_W] in "┤│└"]
        # every plot row of every panel has its axis in the same column and the same width: a column is a moment
        assert len(plot) == sum(charts.layout_rows.values()) + 1
        assert {len(ln) for ln in plot} == {charts.size.width}
        assert sum(ln[LABEL_W] == "└" for ln in text) == 1  # one x axis, under the bottom chart
        assert any(ln.rstrip().endswith("12 s") for ln in text)  # the x axis: 12 s, the unit on its last tick
        assert "valid" in str(panel.query_one(".tl-validity").render())


async def test_a_figure_without_any_data_and_a_tiny_widget_say_so():
    app = ChartApp()
    async with app.run_test(size=(60, 12)) as pilot:
        panel = app.query_one(TimelinePanel)
        charts = app.query_one(TimelineCharts)
        panel.show(figure(TimelineSnapshot(label="C=1")))
        panel.redraw()
        await pilot.pause()
        assert "no timeline recorded for this run" in charts.render().plain
        panel.show(figure(TimelineSnapshot.from_rows(rows(5))))
        panel.redraw()
        await pilot.pause()
        assert "need at least" in charts.render().plain  # 5 charts in a few rows: said, not garbled


def test_validity_lines_say_not_checked_valid_or_the_findings():
    snap = TimelineSnapshot.from_rows(rows(3), label="C=16")
    assert "checked when the level ends" in validity_lines(figure(TimelineSnapshot(label="x", live=True))).plain
    assert "not checked" in validity_lines(figure(snap)).plain
    bad = TimelineSnapshot.from_rows(
        rows(3),
        label="C=16",
        validity=[{"rule": "power_at_cap", "evidence": "power at its 700 W limit in 9 of 12 s [bold]x[/]"}],
    )
    text = validity_lines(overlay(bad, snap, "A (base)", "B (tuned)")).plain
    assert "A (base): 1 validity finding" in text and "power_at_cap: power at its 700 W limit" in text
    assert "[bold]x[/]" in text  # evidence is shown as text, never as markup
    assert "B (tuned): validity not checked" in text


# ---------------------------------------------------------------------- the Bench screen


class FakeRun:
    """A followed benchmark whose events are scripted (what BenchRun.events yields)."""

    def __init__(self, events: list[dict]) -> None:
        self._events = events
        self.job_id = "job-1"
        self.summaries: list[dict] = []
        self.exit = {"type": "exit", "rc": 0, "error": None}
        self.outcome = "complete"  # BenchRun.outcome: what the host's job folder holds

    async def events(self):
        import asyncio

        for ev in self._events:
            if ev["type"] == "level_done":
                self.summaries.append(ev["summary"])
            yield ev
            await asyncio.sleep(0)


def script(levels=((0, 1, 4), (1, 16, 6)), *, missing: tuple[tuple[int, int], ...] = ()) -> list[dict]:
    evs: list[dict] = [{"type": "start", "levels": [{"concurrency": c, "request_rate": "inf"} for _, c, _ in levels]}]
    for lv, c, secs in levels:
        rid = f"20250308-1240{lv}0-c{c}"
        evs.append({"type": "level_start", "level": lv, "concurrency": c, "request_rate": "inf", "run_id": rid})
        for s in range(secs):
            tok = 50.0 * c * min(1.0, (s + 1) / 2)
            evs.append(
                {
                    "type": "tick",
                    "level": lv,
                    "second": s,
                    "t": s + 1.0,
                    "tok_s": tok,
                    "completed": s,
                    "total": secs,
                    "failed": 0,
                    "in_flight": c,
                }
            )
            if (lv, s) not in missing:
                evs.append({"type": "timeline", "level": lv, "run_id": rid, "row": timeline_row(s, tok, c)})
        evs.append(
            {
                "type": "level_done",
                "level": lv,
                "run_id": rid,
                "summary": {
                    "run_id": rid,
                    "completed": secs,
                    "failed": 0,
                    "duration": float(secs),
                    "output_throughput": 10.0 * c,
                    "max_concurrency": c,
                    "validity": []
                    if lv == 0
                    else [{"rule": "sm_clock_low", "evidence": "SM clock below 90% of 1980 MHz in 2 of 6 s at work"}],
                },
            }
        )
    return evs


async def test_run_timeline_rows_reach_the_charts_as_messages(monkeypatch):
    run = FakeRun(script(missing=((1, 2),)))

    async def fake_start(plan):
        return run

    monkeypatch.setattr("tunedeck.commands.bench.start_plan", fake_start)
    # the level's stored file (mirrored from the host) has the second the live feed missed
    d = run_dir("20250308-124010-c16")
    d.mkdir(parents=True)
    (d / "timeline.jsonl").write_text("".join(json.dumps(timeline_row(s, 800.0, 16)) + "\n" for s in range(6)))
    (d / "summary.json").write_text(
        json.dumps(
            {
                "max_concurrency": 16,
                "validity": [
                    {"rule": "sm_clock_low", "evidence": "SM clock below 90% of 1980 MHz in 2 of 6 s at work"}
                ],
            }
        )
    )
    scr = BenchScreen(BenchPlan(url="http://127.0.0.1:9"))
    app = ScreenApp(scr)
    async with app.run_test(size=(160, 48), message_hook=app.messages.append) as pilot:
        await until(
            pilot,
            lambda: scr.rc == 0 and any(isinstance(m, BenchScreen.TimelineChanged) and m.stored for m in app.messages),
        )
        await pilot.pause(0.1)
        changed = [m for m in app.messages if isinstance(m, BenchScreen.TimelineChanged)]
        finished = next(i for i, m in enumerate(app.messages) if isinstance(m, BenchScreen.Finished))
        live = [m for m in changed if not m.stored]
        # live: every tick and timeline row went out as a snapshot, before the run ended
        assert all(app.messages.index(m) < finished for m in live)
        assert any(m.snapshot.live and m.snapshot.has("sm_clock") and m.snapshot.has("kv_pct") for m in live)
        assert {m.level for m in live} == {0, 1}
        sizes = [len(m.snapshot.rows) for m in live if m.level == 1]
        assert sizes == sorted(sizes) and sizes[-1] == 6
        missed = next(m.snapshot for m in reversed(live) if m.level == 1)
        assert missed.values("kv_pct")[2] is None and missed.values("tok_s")[2] is not None  # the tick still came
        # then read back from the stored file: the missed second is there, nothing is live any more
        shown = scr.timelines[1]
        assert not shown.live and shown.values("kv_pct")[2] is not None
        assert shown.validity == (("sm_clock_low", "SM clock below 90% of 1980 MHz in 2 of 6 s at work"),)
        panel = scr.query_one("#bench-timeline", TimelinePanel)
        assert panel.display and panel.figure is not None and panel.figure.title == "C=16"
        assert [p.has_data for p in panel.figure.panels] == [True] * 5
        assert "sm_clock_low" in str(panel.query_one(".tl-validity").render())
        # [ and ] step through the levels; the newest is followed again at the end
        await pilot.press("left_square_bracket")
        assert panel.figure.title == "C=1" and scr.timeline_level == 0
        assert "valid" in str(panel.query_one(".tl-validity").render())
        await pilot.press("right_square_bracket")
        assert panel.figure.title == "C=16" and scr.timeline_level is None


async def test_timeline_layout_side_by_side_or_switched_with_t(monkeypatch):
    async def fake_start(plan):
        return FakeRun(script(levels=((0, 4, 3),)))

    monkeypatch.setattr("tunedeck.commands.bench.start_plan", fake_start)
    for width in (TIMELINE_SIDE_BY_SIDE, 80):
        scr = BenchScreen(BenchPlan(url="http://127.0.0.1:9"))
        app = ScreenApp(scr)
        async with app.run_test(size=(width, 40)) as pilot:
            await until(pilot, lambda scr=scr: scr.rc == 0)
            panel = scr.query_one("#bench-timeline", TimelinePanel)
            live = scr.query_one("#tok-chart").parent
            wide = width >= TIMELINE_SIDE_BY_SIDE
            assert panel.display == wide and live is not None and live.display
            await pilot.press("t")
            await pilot.pause()
            assert panel.display and not live.display  # the timeline alone
            await pilot.press("t")
            await pilot.pause()
            assert panel.display == wide and live.display
            await pilot.resize_terminal(200 if not wide else 80, 40)  # the layout follows the terminal
            await pilot.pause()
            assert panel.display == (not wide) and live.display


async def test_a_replayed_level_builds_few_figures(monkeypatch):
    """A follower that catches up replays a whole level at once: every row arrives, and the charts'
    figure is rebuilt a few times, not once per row."""
    import tunedeck.ui.screens.bench as bench_screen

    builds = []

    def counting_figure(snap, *a, **kw):
        builds.append(len(snap.rows))
        return figure(snap, *a, **kw)

    monkeypatch.setattr(bench_screen, "timeline_figure", counting_figure)

    async def fake_start(plan):
        return FakeRun(script(levels=((0, 16, 600),)))

    monkeypatch.setattr("tunedeck.commands.bench.start_plan", fake_start)
    scr = BenchScreen(BenchPlan(url="http://127.0.0.1:9"))
    async with ScreenApp(scr).run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: scr.rc == 0 and scr.timelines and len(scr.timelines[0].rows) == 600, timeout=60)
        await pilot.pause(0.6)
        panel = scr.query_one("#bench-timeline", TimelinePanel)
        assert panel.figure is not None and panel.figure.seconds == 600
        assert builds[-1] == 600 and len(builds) < 120  # 1200 events, a few figures (62 on a loaded machine)


@pytest.mark.timeout(180)
async def test_a_host_side_run_draws_its_gpu_and_server_timeline_live():
    """End to end: a benchmark job on the demo host (simulated GPUs, simulated vLLM with /metrics);
    its timeline events reach the charts while it runs."""
    from tests.clifix import bench_load
    from tests.simfix import free_port, vllm_sim

    port = free_port()
    with vllm_sim(port, itl_ms=20):
        scr = BenchScreen(parse_plan(["--demo", "--port", str(port), *bench_load(4, 12, 120, json_out=False)]))

        app = ScreenApp(scr)
        async with app.run_test(size=(160, 48), message_hook=app.messages.append) as pilot:
            await until(pilot, lambda: scr.rc is not None, timeout=150)
            assert scr.rc == 0, scr.error
            await until(
                pilot, lambda: any(isinstance(m, BenchScreen.TimelineChanged) and m.stored for m in app.messages)
            )
            await pilot.pause(0.1)
    finished = next(i for i, m in enumerate(app.messages) if isinstance(m, BenchScreen.Finished))
    live = [m for i, m in enumerate(app.messages[:finished]) if isinstance(m, BenchScreen.TimelineChanged)]
    assert any(m.snapshot.live and m.snapshot.has("sm_clock") and m.snapshot.has("running") for m in live)
    snap = scr.timelines[0]
    assert len(snap.rows) >= 4 and snap.validity is not None and not snap.live
    assert figure(snap).panels[0].has_data and figure(snap).panels[3].has_data


# ---------------------------------------------------------------------- stored results


async def test_a_stored_result_opens_on_its_timeline():
    from tunedeck.ui.screens.bench_setup import BenchSetupScreen
    from tunedeck.ui.screens.timeline import TimelineScreen

    rid = "20260101-000001-bbbbbb"
    d = run_dir(rid)
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"run_id": rid, "max_concurrency": 16, "profile": "p"}))
    (d / "summary.json").write_text(
        json.dumps(
            {
                "completed": 5,
                "failed": 0,
                "output_throughput": 64.2,
                "median_ttft_ms": 6.9,
                "max_concurrency": 16,
                "validity": [],
            }
        )
    )
    (d / "timeline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(8, gpu=False)))
    app = App()
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(BenchSetupScreen())
        await until(pilot, lambda: getattr(app.screen, "results_read", 0))
        app.screen.query_one("#bs-results", DataTable).focus()
        await pilot.press("t")
        await until(pilot, lambda: isinstance(app.screen, TimelineScreen) and app.screen.snapshot is not None)
        scr = app.screen
        assert isinstance(scr, TimelineScreen)
        fig = scr.query_one(TimelinePanel).figure
        assert fig is not None and fig.title == "C=16"
        assert [p.has_data for p in fig.panels] == [True, True, True, False, False]  # no GPU figures stored
        assert "valid" in str(scr.query_one(".tl-validity").render())
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, TimelineScreen)


# ---------------------------------------------------------------------- the Compare screen


async def _no_campaign(*_a):
    raise RuntimeError("no A/B here")


async def test_compare_overlays_a_and_b_timelines_at_the_peak_then_other_levels():
    from tunedeck.ab.compare import compare
    from tunedeck.ab.sides import side_from_dict

    e = json.loads((REPO / "screenshots" / "compare-ab.json").read_text())
    write_ab_timelines(e)
    a, b = side_from_dict(e["a"]), side_from_dict(e["b"])
    scr = CompareScreen(
        start_campaign=_no_campaign, profiles=[a.profile, b.profile], comparison=compare(a, b), sides=(a, b)
    )
    app = ScreenApp(scr)
    async with app.run_test(size=(120, 40), message_hook=app.messages.append) as pilot:
        panel = scr.query_one("#ab-timeline", TimelinePanel)
        await until(pilot, lambda: panel.figure is not None)
        fig = panel.figure
        assert scr.timeline_level == 16 and fig.title == "C=16"
        assert [ln.label for ln in fig.panels[0].lines] == [a.name, b.name]
        assert all(p.has_data for p in fig.panels)
        assert fig.seconds == 7  # A ran 7 s, B 6 s: one axis for both
        assert fig.panels[0].lines[1].values[-1] is None
        notes = {n.side: n.findings for n in fig.notes}
        assert notes[a.name] and notes[a.name][0][0] == "sm_clock_low" and notes[b.name] == ()
        assert "(peak)" in str(panel.query_one(".tl-caption").render())
        await pilot.press("t")  # C=1: no timeline was recorded there
        await until(pilot, lambda: panel.figure is not None and panel.figure.title == "C=1")
        assert panel.figure.empty
        assert "no timeline recorded" in panel.charts.render().plain
        await pilot.press("t")
        await until(pilot, lambda: panel.figure is not None and panel.figure.title == "C=16")
        got = {id(m): m for m in app.messages if isinstance(m, ABTimeline)}  # the hook sees a bubbled one twice
        assert [m.level for m in got.values()] == [16, 1, 16]
        scr._clear_results()  # a new A/B starts: nothing of the old one stays
        await pilot.pause()
        assert panel.figure is None and panel.has_class("-empty") and scr.timeline_sides is None
        assert scr.check_action("timeline_level", ()) is None  # its key is dimmed: nothing to step through


async def test_compare_after_an_ab_shows_its_sides_timelines():
    from tests.abfakes import FakeOps, fake_campaigns

    ops = FakeOps(bench_delay=0.05)
    scr = CompareScreen(start_campaign=fake_campaigns(ops), profiles=["base", "tuned"], a="base", b="tuned")
    async with ScreenApp(scr).run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("g")
        await until(pilot, lambda: scr.report is not None)
        panel = scr.query_one("#ab-timeline", TimelinePanel)
        await until(pilot, lambda: panel.figure is not None)
        assert [n.side for n in panel.figure.notes] == ["A (base)", "B (tuned)"]
        assert panel.figure.empty  # the fake A/B recorded no timeline: said, not drawn as zeros
