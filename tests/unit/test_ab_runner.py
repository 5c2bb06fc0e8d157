"""The orchestrator's sequence, failure and cancel rules, over an in-memory host.

The end-to-end runs over the simulator and the real launcher/bench are in
test_ab_demo.py; these pin the ordering rules cheaply and deterministically.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.abfakes import FakeOps
from tunedeck.ab.journal import Journal
from tunedeck.ab.plans import load_plan
from tunedeck.ab.runner import ABRunner


@pytest.fixture
def plan():
    return load_plan("quick")


async def test_sequence_and_comparison(plan):
    ops = FakeOps()
    events = []
    rep = await ABRunner(ops, "base", "tuned", plan, on_event=events.append).run()
    assert rep.status == "completed", rep.error
    assert ops.log == [
        "launch base",
        "flush base",
        "bench base C=1",
        "bench base C=16",
        "stop base",
        "launch tuned",
        "flush tuned",
        "bench tuned C=1",
        "bench tuned C=16",
        "stop tuned",
    ]
    assert not ops.live
    r = rep.comparison.row("peak_output_tok_s")
    assert r.delta_pct == pytest.approx(18.0) and r.verdict == "B +18%"
    kinds = [e.kind for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done"
    assert "progress" in kinds and "ready" in kinds and "gpu-freed" in kinds and "comparison" in kinds
    steps = [e.step for e in events]
    assert steps == sorted(steps) and events[-1].step == events[-1].steps
    ent = Journal().entries()
    ab = [e for e in ent if e["kind"] == "ab"]
    assert len(ab) == 1 and ab[0]["status"] == "completed"
    assert ab[0]["comparison"]["winner"] == "B"
    assert len([e for e in ent if e["kind"] == "bench"]) == 4
    assert len([e for e in ent if e["kind"] == "launch"]) == 2
    assert ab[0]["a"]["runs"][0]["server_log"] == "/logs/run1.log"


async def test_interleave_repeats_order(plan):
    ops = FakeOps()
    rep = await ABRunner(ops, "base", "tuned", plan, repeats=2, interleave=True).run()
    launches = [x for x in ops.log if x.startswith("launch")]
    assert launches == ["launch base", "launch tuned", "launch base", "launch tuned"]
    assert rep.comparison.repeats == (2, 2)
    assert rep.comparison.row("startup_s").a.n == 2


async def test_repeats_without_interleave_launch_once(plan):
    ops = FakeOps()
    rep = await ABRunner(ops, "base", "tuned", plan, repeats=3).run()
    assert [x for x in ops.log if x.startswith("launch")] == ["launch base", "launch tuned"]
    assert ops.log.count("flush base") == 3
    assert rep.comparison.repeats == (3, 3)
    assert rep.comparison.row("peak_output_tok_s").a.n == 3


async def test_b_fails_to_start_keeps_a_and_stops_everything(plan):
    ops = FakeOps(fail={"tuned": "CUDA out of memory"})
    rep = await ABRunner(ops, "base", "tuned", plan).run()
    assert rep.status == "failed"
    assert rep.error == "B (tuned) failed to start: CUDA out of memory (log: E: boom)"
    assert not ops.live and ops.log[-1] == "stop tuned"
    assert rep.sides["A"].runs and not rep.sides["B"].runs
    assert rep.comparison is None
    ab = Journal().entries("ab")[0]
    assert ab["status"] == "failed" and "CUDA out of memory" in ab["error"]
    assert ab["a"]["runs"][0]["levels"][0]["summary"]["output_throughput"] == 100.0
    launch = [e for e in Journal().entries("launch") if e["status"] == "failed"]
    assert launch and launch[0]["diagnosis"] == "CUDA out of memory"


async def test_cancel_mid_bench_stops_server_keeps_results(plan):
    ops = FakeOps(bench_delay=0.2)
    events = []
    runner = ABRunner(ops, "base", "tuned", plan, on_event=events.append)

    async def cancel_when_b_benches():
        while not any(e.kind == "bench-start" and e.side == "B" for e in events):
            await asyncio.sleep(0.01)
        runner.cancel()

    t = asyncio.create_task(cancel_when_b_benches())
    rep = await runner.run()
    await t
    assert rep.status == "cancelled"
    assert not ops.live and ops.log[-1] == "stop tuned"
    assert len(rep.sides["A"].runs[0].levels) == 2  # A's finished results are kept
    assert Journal().entries("ab")[0]["status"] == "cancelled"


async def test_running_server_needs_confirmation(plan):
    ops = FakeOps(running=["old"])
    rep = await ABRunner(ops, "base", "tuned", plan, confirm_stop=lambda q: False).run()
    assert rep.status == "failed" and "not confirmed" in rep.error
    assert ops.log == [] and ops.running == ["old"]
    asked = []

    async def yes(q):
        asked.append(q)
        return True

    rep = await ABRunner(ops, "base", "tuned", plan, confirm_stop=yes).run()
    assert rep.status == "completed" and asked and "old server old" in asked[0]
    assert ops.log[0] == "stop-existing old"


async def test_unknown_profile_fails_before_anything_runs(plan):
    ops = FakeOps()
    rep = await ABRunner(ops, "base", "missing", plan).run()
    assert rep.status == "failed" and "B (missing): no profile named 'missing'" in rep.error
    assert ops.log == []


async def test_cancel_during_the_launch_still_stops_the_server_it_started():
    """A cancel that lands while the launch script runs must not leave that server behind."""
    import asyncio

    from tests.abfakes import FakeOps
    from tunedeck.ab.plans import load_plan
    from tunedeck.ab.runner import ABRunner

    class SlowLaunch(FakeOps):
        async def launch(self, info):
            await asyncio.sleep(0.3)
            return await super().launch(info)

    ops = SlowLaunch()
    runner = ABRunner(ops, "base", "tuned", load_plan("quick"))
    task = asyncio.create_task(runner.run())
    await asyncio.sleep(0.1)  # inside the launch
    runner.cancel()
    rep = await task
    assert rep.status == "cancelled"
    assert ops.log == ["launch base", "stop base"] and not ops.live


async def test_a_failed_comparison_is_said_and_the_measurements_kept(plan, monkeypatch, caplog):
    """Comparing the sides can fail (bad partial data, a bug): the report keeps every measured
    level and says why it has no comparison, in its warnings, its events and the log."""
    import tunedeck.ab.runner as runner_mod

    def broken(a, b, **kw):
        raise ValueError("levels do not line up")

    monkeypatch.setattr(runner_mod, "compare", broken)
    events = []
    with caplog.at_level("ERROR", logger="tunedeck.ab.runner"):
        rep = await ABRunner(FakeOps(), "base", "tuned", plan, on_event=events.append).run()
    assert rep.status == "completed" and rep.comparison is None
    assert all(rep.sides[s].runs and rep.sides[s].runs[0].levels for s in ("A", "B"))
    assert rep.warnings.count("no comparison: ValueError: levels do not line up") == 1
    assert any(e.kind == "error" and "no comparison" in e.message for e in events)
    assert "comparing the sides failed" in caplog.text and "levels do not line up" in caplog.text


async def test_a_failing_event_callback_is_logged_and_the_run_goes_on(plan, caplog):
    def bad(ev):
        raise RuntimeError("widget gone")

    with caplog.at_level("ERROR", logger="tunedeck.ab.runner"):
        rep = await ABRunner(FakeOps(), "base", "tuned", plan, on_event=bad).run()
    assert rep.status == "completed" and rep.comparison is not None
    assert "the event callback failed" in caplog.text and "widget gone" in caplog.text
