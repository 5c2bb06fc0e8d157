"""The Tune screen's data: a campaign's events folded into candidate states, the best so far,
the ETA and the frontier (tunedeck.ab.tuneview), and the `tunedeck tune` command it shows and runs."""

from __future__ import annotations

import pytest

from tunedeck.ab.events import ABEvent
from tunedeck.ab.tuneeta import Pace
from tunedeck.ab.tuneview import DONE, DROPPED, FAILED, MEASURING, QUEUED, STARTING, TuneProgress, from_report
from tunedeck.commands.tune import command_argv, parse_command


def ev(kind: str, side: str | None = None, t: float = 0.0, fraction: float | None = None, **data) -> ABEvent:
    return ABEvent(kind, f"{kind} {side or ''}", side, 1, 0, 3, fraction, data, time=t)


def result(cap: int | None, tput: float | None) -> dict:
    return {"capacity": cap, "throughput_at_capacity": tput, "steps": []}


def test_states_follow_the_events_with_the_step_measured():
    p = TuneProgress([("a", 2), ("b", 1), ("c", 1)], estimate_s=300.0)
    s = p.snapshot()
    assert [c.state for c in s.candidates] == [QUEUED] * 3 and s.best is None
    assert s.eta_s == pytest.approx(300.0) and s.eta_basis == "estimated"
    p.feed(ev("launch", "a", t=100.0))
    p.feed(ev("progress", "a", t=110.0, fraction=0.4))
    assert p.snapshot().candidates[0].state == STARTING and p.snapshot().candidates[0].step == "start-up 40%"
    p.feed(ev("ready", "a", t=120.0, startup_s=20.0))
    p.feed(ev("bench-start", "a", t=121.0, concurrency=16))
    got = p.snapshot(now=150.0)
    assert got.candidates[0].state == MEASURING and got.candidates[0].step == "C=16"
    assert got.eta_s == pytest.approx(300.0 - 50.0)  # a's share less its 50 s so far, b's and c's
    p.feed(ev("capacity", "a", t=200.0, capacity=16, result=result(16, 800.0)))
    p.feed(ev("launch", "b", t=201.0))
    p.feed(ev("capacity", "b", t=301.0, capacity=32, result=result(32, 1200.0)))
    p.feed(ev("launch", "c", t=302.0))
    p.feed(ev("failed", "c", t=310.0))
    s = p.snapshot(now=310.0)
    a, b, c = s.candidates
    assert (a.state, b.state, c.state) == (DONE, DONE, FAILED)
    assert s.best == "b" and b.capacity == 32 and b.tok_s_per_gpu == pytest.approx(1200.0)
    assert a.tok_s_per_gpu == pytest.approx(400.0)  # tp 2
    assert a.tok_s_per_user == pytest.approx(50.0) and b.tok_s_per_user == pytest.approx(37.5)
    assert a.pareto and b.pareto and not c.pareto  # a: more per user, b: more per GPU
    assert s.eta_s is None  # nothing left in this round
    p.feed(ev("dropped", "a", t=311.0))
    p.feed(ev("done", None, t=312.0, winner="b"))
    s = p.snapshot()
    assert s.status == "completed" and s.winner == "b" and s.candidates[0].state == DROPPED


def candidate(p: TuneProgress, name: str, t: float, startup: float, levels: list[float], stop: float) -> float:
    """A candidate's events as the runner emits them: launch, ready, its levels (C=1 first), stop,
    capacity; returns the time of its end."""
    p.feed(ev("launch", name, t=t))
    t += startup
    p.feed(ev("ready", name, t=t, startup_s=startup))
    for i, d in enumerate(levels):
        p.feed(ev("bench-start", name, t=t, concurrency=2**i))
        t += d
        p.feed(ev("bench-done", name, t=t, concurrency=2**i, met=True))
    p.feed(ev("stop", name, t=t))
    t += stop
    p.feed(ev("capacity", name, t=t, capacity=2 ** (len(levels) - 1), result=result(8, 100.0)))
    return t


def test_the_eta_takes_each_measured_part_in_place_of_the_estimate():
    # the estimate: start-up 100 s, C=1 50 s, 7 more levels of 40 s, stop 15 s: 445 s a candidate
    est = Pace(startup_s=100.0, single_s=50.0, level_s=40.0, levels=7.0, stop_s=15.0)
    p = TuneProgress([("a", 1), ("b", 1), ("c", 1)])
    p.feed(ABEvent("start", "campaign", data={"pace": est.to_json()}, time=0.0))
    s = p.snapshot(now=0.0)
    assert (s.eta_s, s.eta_basis) == (pytest.approx(3 * 445.0), "estimated")
    p.feed(ev("launch", "a", t=0.0))
    p.feed(ev("ready", "a", t=10.0))  # a start-up of 10 s, measured: b's and c's too
    s = p.snapshot(now=12.0)
    assert (s.eta_s, s.eta_basis) == (pytest.approx((445.0 - 100.0) + 2 * (445.0 - 90.0)), "estimated")
    p.feed(ev("bench-start", "a", t=10.0, concurrency=1))
    p.feed(ev("bench-done", "a", t=15.0, concurrency=1))
    p.feed(ev("bench-start", "a", t=15.0, concurrency=2))
    s = p.snapshot(now=16.0)  # C=1 took 5 s: a is 1 s into its second level, 6 more to come
    assert s.eta_s == pytest.approx(39.0 + 6 * 40.0 + 15.0 + 2 * (10.0 + 5.0 + 7 * 40.0 + 15.0))
    # a ends: 3 levels after C=1 of 4 s, a stop of 2 s; the candidates to come take a's figures
    p = TuneProgress([("a", 1), ("b", 1), ("c", 1)], pace=est)
    end = candidate(p, "a", 0.0, 10.0, [5.0, 4.0, 4.0, 4.0], 2.0)
    assert end == 29.0
    s = p.snapshot(now=end)
    assert (s.eta_s, s.eta_basis) == (pytest.approx(2 * 29.0), "measured")
    p.feed(ev("launch", "b", t=29.0))
    p.feed(ev("ready", "b", t=39.0))
    p.feed(ev("bench-start", "b", t=39.0, concurrency=1))
    p.feed(ev("bench-done", "b", t=44.0, concurrency=1))
    p.feed(ev("bench-start", "b", t=44.0, concurrency=2))
    s = p.snapshot(now=46.0)  # b: 2 s of its level left, 2 more levels, its stop; then c
    assert s.eta_s == pytest.approx(2.0 + 2 * 4.0 + 2.0 + 29.0)
    p.feed(ev("bench-done", "b", t=48.0, concurrency=2))
    p.feed(ev("stop", "b", t=48.0))  # the search ended early: b is stopping
    assert p.snapshot(now=49.0).eta_s == pytest.approx(1.0 + 29.0)
    assert p.snapshot(now=80.0).eta_s == pytest.approx(29.0)  # b overran: never below c's share


def test_without_the_estimates_parts_a_candidate_gets_its_share_of_the_estimate():
    p = TuneProgress([("a", 1), ("b", 1), ("c", 1)], estimate_s=300.0)
    assert p.snapshot(now=0.0).eta_s == pytest.approx(300.0)
    end = candidate(p, "a", 0.0, 10.0, [5.0, 4.0], 2.0)  # then a's own figures
    assert p.snapshot(now=end).eta_s == pytest.approx(2 * 21.0)
    assert TuneProgress([("a", 1)]).snapshot(now=0.0).eta_s is None  # no estimate at all: unknown


def test_a_report_is_final():
    rep = {
        "campaign": "tune-1",
        "status": "completed",
        "winner": "b",
        "candidates": [
            {"name": "a", "state": "dropped", "capacity": 16, "tok_s_per_user": 50.0, "tok_s_per_gpu": 800.0},
            {"name": "b", "state": "measured", "capacity": 32, "tok_s_per_user": 37.5, "tok_s_per_gpu": 600.0},
            {"name": "c", "state": "skipped", "findings": ["skipped: pre-flight failed: port"], "tp": 16},
        ],
        "pareto": ["a", "b"],
    }
    for c in rep["candidates"]:
        c["pareto"] = c["name"] in rep["pareto"]
    s = from_report(rep)
    assert [c.state for c in s.candidates] == ["dropped", "done", "skipped"]
    assert s.best == "b" and s.candidates[2].note.startswith("skipped: pre-flight") and len(s.frontier) == 2


def test_the_command_shown_is_the_command_run():
    argv = command_argv(
        "sglang-base",
        vary=["flags.attention-backend=fa3,triton", "flags.max-running-requests=32,128"],
        slo=["ttft_p90:500", "tpot_p90:50"],
        budget="2h",
        dataset="sharegpt",
        dataset_path="/data/sg.json",
        input_len=256,
        host="gpu-a",
        sim=True,
    )
    assert argv[:3] == ["tunedeck", "tune", "sglang-base"]
    args = parse_command(argv)
    assert args.base == "sglang-base" and args.vary == argv[4:7:2] and args.slo == ["ttft_p90:500", "tpot_p90:50"]
    assert (args.budget, args.dataset_name, args.dataset_path, args.input_len, args.output_len) == (
        "2h",
        "sharegpt",
        "/data/sg.json",
        256,
        None,
    )
    assert args.host == "gpu-a" and args.sim and not args.demo
    assert parse_command(command_argv("b", slo=["ttft_p90:1"], demo=True)).demo
    with pytest.raises(ValueError, match="--input-len"):
        parse_command(["tunedeck", "tune", "b", "--input-len", "x"])
