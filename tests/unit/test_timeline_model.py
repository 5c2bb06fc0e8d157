"""The timeline's snapshots and alignment (tunedeck.timeline_model): rows with gaps, misaligned or
repeated seconds and missing metrics become one row a second on one time axis, bounded; a
metric nobody reported is "no data", never zeros."""

from __future__ import annotations

import json
import math

from tunedeck.hostside.timeline import Timeline
from tunedeck.timeline_model import (
    MAX_SECOND,
    TimelineFeed,
    TimelineRow,
    TimelineSnapshot,
    figure,
    overlay,
    validity_text,
)


def row(
    second=None,
    *,
    t=None,
    tok=100.0,
    gpus=2,
    clock=1980.0,
    power=400.0,
    cap=700.0,
    kv=0.5,
    running=4.0,
    waiting=0.0,
    gpu=True,
    server=True,
) -> dict:
    r: dict = {"client": {"tok_s": tok, "in_flight": 4, "completed": 1, "failed": 0}}
    if second is not None:
        r["second"] = second
    if t is not None:
        r["t"] = t
    r["gpu"] = (
        {"util": [90.0] * gpus, "sm_clock": [clock] * gpus, "power": [power] * gpus, "power_limit": [cap] * gpus}
        if gpu
        else {}
    )
    r["server"] = (
        {"running": running, "waiting": waiting, "kv": kv, "preemptions": 0, "gen_tok_s": tok}
        if server
        else {"running": None, "waiting": None, "kv": None, "preemptions": None, "gen_tok_s": None}
    )
    return r


# ---------------------------------------------------------------------- rows


def test_a_row_takes_the_means_over_the_gpus_and_kv_as_percent():
    r = TimelineRow.from_json(
        {
            "second": 3,
            "client": {"tok_s": 1200},
            "gpu": {"sm_clock": [1980, None, 1500, "[N/A]"], "power": [600, 700], "power_limit": [700, 700]},
            "server": {"running": 16, "waiting": 2, "kv": 0.425},
        }
    )
    assert r == TimelineRow(
        3, tok_s=1200.0, running=16.0, waiting=2.0, kv_pct=42.5, sm_clock=1740.0, power=650.0, power_cap=700.0
    )


def test_a_row_without_a_second_takes_it_from_its_time():
    # a tick at t=4.001 closes second 3; a late one (t=4.37) too: misaligned times land on their second
    assert TimelineRow.from_json({"t": 4.001}).second == 3
    assert TimelineRow.from_json({"t": 4.37}).second == 3
    assert TimelineRow.from_json({"t": 0.7}).second == 0
    assert TimelineRow.from_json({"second": 5.0, "t": 9.9}).second == 5  # the given second wins
    assert TimelineRow.from_json({"client": {"tok_s": 5}}) is None
    assert TimelineRow.from_json({"second": -1}) is None
    assert TimelineRow.from_json({"second": MAX_SECOND + 1}) is None
    assert TimelineRow.from_json("not a row") is None


def test_unknown_values_stay_none_never_zero():
    r = TimelineRow.from_json(
        {
            "second": 0,
            "client": {"tok_s": None},
            "gpu": {"sm_clock": [], "power": [None]},
            "server": {"running": True, "kv": float("nan"), "waiting": "3"},
        }
    )
    assert r == TimelineRow(0)
    assert TimelineRow.from_json(json.loads('{"second": 1, "server": {"kv": NaN}}')).kv_pct is None


def test_a_repeated_second_merges_and_none_never_erases():
    a = TimelineRow(2, tok_s=10.0, kv_pct=40.0)
    b = TimelineRow(2, tok_s=12.0, sm_clock=1900.0)
    assert a.merged(b) == TimelineRow(2, tok_s=12.0, kv_pct=40.0, sm_clock=1900.0)


# ---------------------------------------------------------------------- snapshots


def test_snapshot_sorts_merges_and_keeps_gaps():
    rows = [row(4, tok=40.0), row(0, tok=0.0), row(1, tok=10.0), row(t=3.2, tok=20.0), row(1, tok=11.0, gpu=False)]
    s = TimelineSnapshot.from_rows(rows, label="C=4")
    assert [r.second for r in s.rows] == [0, 1, 2, 4]
    assert s.seconds == 5
    assert s.values("tok_s") == (0.0, 11.0, 20.0, None, 40.0)  # second 3 is a gap, not a 0
    assert s.values("sm_clock")[1] == 1980.0  # the later partial row kept the earlier GPU figures
    assert s.values("tok_s", 7) == (0.0, 11.0, 20.0, None, 40.0, None, None)


def test_snapshot_is_bounded_to_the_last_seconds():
    s = TimelineSnapshot.from_rows([row(i) for i in range(50)], max_rows=10)
    assert len(s.rows) == 10 and s.rows[0].second == 40 and s.seconds == 50


def test_snapshot_validity_is_not_checked_empty_or_findings():
    assert TimelineSnapshot.from_rows([], validity=None).validity is None
    assert TimelineSnapshot.from_rows([], validity=[]).validity == ()
    v = TimelineSnapshot.from_rows([], validity=[{"rule": "power_at_cap", "evidence": "12 of 30 s"}]).validity
    assert v == (("power_at_cap", "12 of 30 s"),)
    assert validity_text(None) == "not checked" and validity_text(()) == "valid"
    assert validity_text(v) == "power_at_cap"


def test_snapshots_are_immutable():
    s = TimelineSnapshot.from_rows([row(0)])
    try:
        s.rows = ()  # type: ignore[misc]
    except AttributeError:
        return
    raise AssertionError("a snapshot could be changed")


# ---------------------------------------------------------------------- the live feed


def level_start(level, c=16, run_id=None):
    return {
        "type": "level_start",
        "level": level,
        "concurrency": c,
        "request_rate": "inf",
        "run_id": run_id or f"run-{level}",
    }


def tick(level, second, tok):
    return {"type": "tick", "level": level, "second": second, "t": second + 1.0, "tok_s": tok, "completed": 0}


def test_feed_makes_one_snapshot_a_level_from_ticks_and_timeline_rows():
    f = TimelineFeed()
    assert f.on_event({"type": "start", "levels": []}) is None
    assert f.on_event(level_start(0, 1)) == 0
    assert f.on_event(tick(0, -1, 0.0)) is None  # before the first second
    assert f.on_event(tick(0, 0, 50.0)) == 0
    assert f.on_event({"type": "timeline", "level": 0, "run_id": "run-0", "row": row(0, tok=51.0)}) == 0
    assert f.on_event({"type": "sample", "level": 0}) is None
    s0 = f.snapshot(0)
    assert s0.label == "C=1" and s0.run_id == "run-0" and s0.live and s0.validity is None
    assert s0.rows == (TimelineRow.from_json(row(0, tok=51.0)),)
    assert f.on_event({"type": "level_done", "level": 0, "summary": {"validity": []}}) == 0
    assert f.snapshot(0).validity == () and not f.snapshot(0).live
    f.on_event(level_start(1, 16))
    f.on_event(tick(1, 0, 900.0))  # a run without a host-side timeline still charts its client tok/s
    s1 = f.snapshot(1)
    assert s1.values("tok_s") == (900.0,) and not s1.has("sm_clock") and not s1.has("kv_pct")
    assert f.levels == (0, 1) and f.run_ids() == {0: "run-0", 1: "run-1"}
    assert s0 is not f.snapshot(0) and s0.rows == f.snapshot(0).rows[:1]  # an old snapshot never changes


def test_feed_orders_late_seconds_and_is_bounded():
    f = TimelineFeed(max_rows=5, max_levels=2)
    f.on_event(level_start(0))
    for s in (0, 1, 3, 2, 5, 4, 6, 7):
        f.on_event(tick(0, s, float(s)))
    snap = f.snapshot(0)
    assert [r.second for r in snap.rows] == [3, 4, 5, 6, 7]
    for lv in (1, 2):
        f.on_event(level_start(lv))
    assert f.levels == (1, 2) and f.snapshot(0) == TimelineSnapshot()


def test_feed_a_level_that_starts_again_starts_empty_and_events_without_level_are_ignored():
    f = TimelineFeed()
    f.on_event(level_start(0))
    f.on_event(tick(0, 0, 1.0))
    f.on_event(level_start(0, run_id="again"))
    assert f.snapshot(0).rows == () and f.snapshot(0).run_id == "again"
    assert f.on_event({"type": "tick", "second": 1, "tok_s": 3}) is None
    assert f.on_event({"type": "timeline", "level": 0, "row": {"t": None}}) is None
    # a tick of a level whose start was missed (a follower that began late) opens it
    assert f.on_event(tick(3, 0, 7.0)) == 3 and f.snapshot(3).label == "level 4"


def test_feed_merges_the_stored_file_over_the_live_rows():
    f = TimelineFeed()
    f.on_event(level_start(0))
    f.on_event(tick(0, 0, 10.0))
    f.on_event(tick(0, 2, 30.0))  # second 1's events never arrived
    assert f.merge_rows(
        0,
        [row(0, tok=10.0), row(1, tok=20.0), row(2, tok=30.0)],
        validity=[{"rule": "kv_cache_full", "evidence": "KV cache at 97%"}],
    )
    s = f.snapshot(0)
    assert s.values("tok_s") == (10.0, 20.0, 30.0) and s.has("sm_clock")
    assert s.validity == (("kv_cache_full", "KV cache at 97%"),)
    assert not f.merge_rows(7, [row(0)])
    f.finish()
    assert not f.snapshot(0).live


# ---------------------------------------------------------------------- figures


def test_figure_stacks_five_panels_on_one_axis():
    s = TimelineSnapshot.from_rows([row(0), row(1, clock=1700.0), row(3)], label="C=16")
    fig = figure(s)
    assert [p.key for p in fig.panels] == ["tok_s", "kv_pct", "queue", "sm_clock", "power"]
    assert fig.seconds == 4
    assert all(len(ln.values) == 4 for p in fig.panels for ln in p.lines)  # one axis for every line
    assert all(ln.values[2] is None for p in fig.panels for ln in p.lines)  # the gap is a gap everywhere
    power = fig.panels[-1]
    assert [ln.label for ln in power.lines] == ["power", "cap"] and power.lines[1].tone == "limit"
    assert [ln.label for ln in fig.panels[2].lines] == ["running", "waiting"]
    assert fig.notes[0].side == "C=16" and fig.notes[0].findings is None


def test_missing_metrics_are_no_data_and_zeros_are_data():
    # a server without metrics, no GPU figures: only the client's tok/s is data
    s = TimelineSnapshot.from_rows([row(i, gpu=False, server=False) for i in range(3)])
    fig = figure(s)
    assert [p.has_data for p in fig.panels] == [True, False, False, False, False]
    assert [ln.label for ln in fig.panels[-1].lines] == ["power"]  # no cap line without a cap
    # a cap alone is no power data
    capped = TimelineSnapshot.from_rows([{"second": 0, "gpu": {"power_limit": [700]}}])
    assert not figure(capped).panels[-1].has_data
    # an idle server reports 0 running, 0 KV: zeros are data
    idle = TimelineSnapshot.from_rows([row(0, kv=0.0, running=0.0, tok=0.0)])
    assert all(figure(idle).panels[i].has_data for i in range(3))
    assert figure(TimelineSnapshot()).empty


def test_overlay_aligns_a_and_b_on_one_axis():
    a = TimelineSnapshot.from_rows([row(t=s + 1.004, tok=100.0 + s) for s in range(6)], label="A", validity=[])
    b = TimelineSnapshot.from_rows([row(t=s + 1.31, tok=200.0 + s, gpu=False) for s in range(4)], label="B")
    fig = overlay(a, b, "A (base)", "B (tuned)", "C=16")
    assert fig.seconds == 6 and fig.title == "C=16"
    assert [p.key for p in fig.panels] == ["tok_s", "kv_pct", "running", "waiting", "sm_clock", "power"]
    tok = fig.panels[0]
    assert [ln.label for ln in tok.lines] == ["A (base)", "B (tuned)"]
    assert [ln.short for ln in tok.lines] == ["A", "B"]
    assert tok.lines[0].values == (100.0, 101.0, 102.0, 103.0, 104.0, 105.0)
    assert tok.lines[1].values == (200.0, 201.0, 202.0, 203.0, None, None)  # B ended earlier: no zeros
    clock = fig.panels[4]
    assert clock.has_data and clock.missing == ("B",) and not clock.lines[1].has_data
    assert tok.missing == ()
    assert [(n.side, n.findings) for n in fig.notes] == [("A (base)", ()), ("B (tuned)", None)]
    # neither side has a metric: that panel says no data, with no side named
    bare = overlay(TimelineSnapshot.from_rows([row(0, gpu=False)]), TimelineSnapshot.from_rows([row(0, gpu=False)]))
    assert not bare.panels[4].has_data and bare.panels[4].missing == ()


# ---------------------------------------------------------------------- the host side


def test_the_host_timeline_returns_the_line_each_tick_writes(tmp_path):
    tl = Timeline("http://127.0.0.1:9")
    tl.gpu = {"util": [90.0], "sm_clock": [1980.0], "power": [500.0], "power_limit": [700.0]}
    tl.server = {"running": 3.0, "waiting": 1.0, "kv": 0.5, "engine": "sglang"}
    assert tl.on_event({"type": "level_start", "level": 0, "run_dir": str(tmp_path), "run_id": "r0"}) is None
    assert tl.run_id == "r0"
    line = tl.on_event({"type": "tick", "level": 0, "second": 0, "t": 1.0, "tok_s": 12.0})
    assert line is not None and line["server"]["running"] == 3.0
    assert tl.on_event({"type": "level_done", "level": 0, "summary": {"completed": 1}}) is None
    assert tl.run_id is None
    stored = [json.loads(x) for x in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    assert stored == [line]
    r = TimelineRow.from_json(line)
    assert r is not None and r.tok_s == 12.0 and math.isclose(r.kv_pct or 0, 50.0)


# ---------------------------------------------------------------------- stored results


def test_stored_timeline_reads_the_result_folder():
    import pytest

    from tunedeck.bench.store import StoreError, run_dir
    from tunedeck.services.timelines import stored_timeline

    d = run_dir("20250308-124010-c16")
    d.mkdir(parents=True)
    lines = [json.dumps(row(s, tok=10.0 * s)) for s in (1, 0, 3)]
    (d / "timeline.jsonl").write_text("\n".join(lines) + '\n{"second": 4, "cli')  # a torn last line
    (d / "summary.json").write_text(
        json.dumps(
            {
                "max_concurrency": 16,
                "validity": [{"rule": "queue_growing", "evidence": "waiting requests rose from 1.0 to 9.0"}],
                "workload": {"name": "shared_prefix", "params": {}, "sha256": "ab"},
                "prefix_cache_hit_rate": 0.889,
                "spec_decode_acceptance_length": None,
                "dispatch_lag_p99_ms": 0.42,
            }
        )
    )
    s = stored_timeline("20250308-124010-c16")
    assert s.label == "C=16" and s.run_id == "20250308-124010-c16" and not s.live
    assert s.values("tok_s") == (0.0, 10.0, None, 30.0)
    assert s.validity == (("queue_growing", "waiting requests rose from 1.0 to 9.0"),)
    # the level's workload and its server-side figures (a figure the server did not give is left out)
    assert s.measures == "workload shared_prefix · prefix cache hit 88.9% · dispatch lag p99 0.4 ms"
    # a result without a timeline (measured through a tunnel, or before timelines): no rows, not checked
    bare = run_dir("20250308-124011-tunnel")
    bare.mkdir()
    s = stored_timeline("20250308-124011-tunnel", label="A")
    assert s.rows == () and s.validity is None and s.label == "A" and s.measures == ""
    with pytest.raises(StoreError):
        stored_timeline("../etc")


def test_workload_measures_of_old_new_and_hostile_summaries():
    from tunedeck.timeline_model import workload_measures

    assert workload_measures({}) == "workload random"  # before workloads were recorded
    spec = {
        "workload": {"name": "text"},
        "spec_decode_acceptance_length": 2.414,
        "spec_decode_acceptance_rate": 0.4713,
    }
    assert workload_measures(spec) == "workload text · spec accept length 2.41 (rate 47.1%)"
    evil = workload_measures({"workload": {"name": "\x1b]0;pwned\x07x"}, "prefix_cache_hit_rate": "nan"})
    assert "\x1b" not in evil and evil.startswith("workload \\x1b") and "hit" not in evil
