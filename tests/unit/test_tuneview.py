"""The Tune screen's data: a campaign's events folded into candidate states, the best so far,
the ETA and the frontier (tui.ab.tuneview), and the `tunedeck tune` command it shows and runs."""

from __future__ import annotations

import pytest

from tui.ab.events import ABEvent
from tui.ab.tuneview import DONE, DROPPED, FAILED, MEASURING, QUEUED, STARTING, TuneProgress, from_report
from tui.commands.tune import command_argv, parse_command


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


def test_the_eta_comes_from_the_measured_candidates_once_one_finished():
    p = TuneProgress([("a", 1), ("b", 1), ("c", 1)], estimate_s=30.0)
    p.feed(ev("launch", "a", t=0.0))
    p.feed(ev("capacity", "a", t=100.0, capacity=8, result=result(8, 100.0)))
    p.feed(ev("launch", "b", t=100.0))
    s = p.snapshot(now=130.0)
    assert s.eta_basis == "measured" and s.eta_s == pytest.approx(70.0 + 100.0)


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
