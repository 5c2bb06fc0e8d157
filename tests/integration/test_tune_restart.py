"""The follower restarts a killed tuning campaign over a link that fails at that moment: the
restart is retried like any read of the follow (told as a lost link), and a try whose answer was
lost, though it started the campaign, is not followed by a second start in the same folder (the
second would find the host's campaign lock held, and its exit event would end the follow of the
first). Two followers that notice the same kill start it once: the host's launch starts it for one
and hands the other that process. The campaign is a real host-side job on the demo host; its
candidates are all skipped, so each run of it takes about a second."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any, Sequence

import pytest

from tests.waits import scaled, until_async
from tunedeck.ab.plan import Plan, PlanLevel
from tunedeck.ab.tune import Workload
from tunedeck.hostops.hosts import RunResult
from tunedeck.hostops.localhost import LocalHost
from tunedeck.services import jobs
from tunedeck.services.tunerun import TuneRun
from tunedeck.sim.demo import demo_env, demo_host

pytestmark = pytest.mark.timeout(120)

#: the last line the killed campaign process wrote to its log
LAST_WORDS = "MemoryError: the campaign's last words"


def _spec() -> dict[str, Any]:
    plan = Plan("tune", (PlanLevel(1, 6, 64, 16, 0, "C=1"),))
    return {
        "campaign": "tune-restart-1",
        "base": "b",
        "candidates": [
            {"name": n, "changes": {}, "info": None, "tp": 1, "skip": "pre-flight failed: test"} for n in ("b", "b+x")
        ],
        "slo": ["ttft_p90:200"],
        "workload": Workload(plan, 2, 6).to_dict(),
        "repeats_max": 1,
        "host_label": "demo",
    }


async def _killed_campaign() -> jobs.Job:
    """A campaign job as its process leaves it when killed before its end: its state saved, its
    events up to then, no report, no exit event, the wrapper's rc 137."""
    host = demo_host()
    job = await jobs.start(host, "tune", _spec())
    d = Path(job.dir)
    await until_async(lambda: (d / "rc").exists(), 60, what="the campaign's end")
    lines = (d / "events.jsonl").read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "exit", lines
    (d / "events.jsonl").write_text("".join(ln for ln in lines if json.loads(ln).get("kind") not in ("done", None)))
    (d / "report.json").unlink()
    (d / "rc").write_text("137\n")
    with (d / "log").open("a") as f:
        f.write(f"{LAST_WORDS}\n")
    return await jobs.find(host, "tune", job.job_id)


class _LostLaunch(LocalHost):
    """The demo host, where the answer of the next job launch is lost: ``before`` it ran (nothing
    started) or ``after`` (it started; only its answer is lost)."""

    def __init__(self, when: str) -> None:
        super().__init__("demo", env_overlay=demo_env())
        self.when = when
        self.lost = 0
        self.launches = 0  # job launches run on the host that started a process

    async def _launch(self, script: str, args: Sequence[str], timeout: float | None) -> RunResult:
        r = await super().run_script(script, args, timeout=timeout)
        self.launches += any(ln.startswith("PID ") for ln in r.stdout.splitlines())
        return r

    async def run_script(self, script: str, args: Sequence[str] = (), *, timeout: float | None = 30.0) -> RunResult:
        if "put run.sh" not in script:  # not a launch (tunedeck.hostops.hostscripts.LAUNCH_SCRIPT)
            return await super().run_script(script, args, timeout=timeout)
        if self.lost:
            return await self._launch(script, args, timeout)
        self.lost += 1
        if self.when == "after":
            await self._launch(script, args, timeout)
        return RunResult(None, "", "connection lost: Connection lost", lost=True)


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_restart_whose_launch_answer_is_lost_is_retried_and_starts_one_campaign(when: str) -> None:
    job = await _killed_campaign()
    host = _LostLaunch(when)
    run = TuneRun(host, job)
    told: list[str] = []
    run.on_link_error = lambda e, n: told.append(str(e))
    seen = [ev.message async for ev in run.events()]
    assert host.lost == 1
    assert host.launches == 1  # after a lost answer that had started it: adopted, not started again
    assert run.report is not None and run.report["status"] == "completed", (run.exit, seen)
    assert run.restarts == 1 and run.report["resumes"] == 1
    assert any("restarting it to resume" in m for m in seen) and told, (seen, told)
    evs = [json.loads(ln) for ln in (Path(job.dir) / "events.jsonl").read_text().splitlines()]
    # one campaign started after the kill: resumed once, one exit event (its own, rc 0)
    assert [e["message"] for e in evs if "resumed" in e.get("message", "")] == [
        "campaign tune-restart-1 resumed (restart 1): 0 measurement(s) kept"
    ]
    assert [e for e in evs if e["type"] == "exit"] == [{"type": "exit", "rc": 0, "error": None}]


class _Meeting(LocalHost):
    """The demo host, as one of two followers sees it: its job launch waits (up to a bound) until
    the other follower's has come too, then both run on the host at once (two followers, the Tune
    screen and `tune --attach`, that noticed the same kill)."""

    def __init__(self, room: dict[str, Any]) -> None:
        super().__init__("demo", env_overlay=demo_env())
        self.room = room

    async def run_script(self, script: str, args: Sequence[str] = (), *, timeout: float | None = 30.0) -> RunResult:
        if "put run.sh" in script:
            self.room["came"] += 1
            if self.room["came"] >= 2:
                self.room["both"].set()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.room["both"].wait(), scaled(30))
        return await super().run_script(script, args, timeout=timeout)


async def test_two_followers_that_notice_the_same_kill_restart_it_once() -> None:
    job = await _killed_campaign()
    room: dict[str, Any] = {"came": 0, "both": asyncio.Event()}
    runs = [TuneRun(_Meeting(room), job) for _ in range(2)]

    async def follow(run: TuneRun) -> list[str]:
        return [ev.message async for ev in run.events()]

    seen = await asyncio.gather(*(follow(r) for r in runs))
    assert room["came"] == 2  # both tried to restart it, at the same moment
    evs = [json.loads(ln) for ln in (Path(job.dir) / "events.jsonl").read_text().splitlines()]
    # one campaign started after the kill: resumed once, one exit event (its own, rc 0)
    assert [e["message"] for e in evs if "resumed" in e.get("message", "")] == [
        "campaign tune-restart-1 resumed (restart 1): 0 measurement(s) kept"
    ], evs
    assert [e for e in evs if e["type"] == "exit"] == [{"type": "exit", "rc": 0, "error": None}]
    for run, s in zip(runs, seen):  # each follower followed that one process to its end
        assert run.report is not None and run.report["status"] == "completed", (run.exit, s)
        assert (
            run.report["resumes"] == 1
            and s.count("campaign tune-restart-1 resumed (restart 1): 0 measurement(s) kept") == 1
        )
    assert runs[0].job.pid == runs[1].job.pid and runs[0].job.pid != job.pid
    # the killed process's log is kept beside the new one's: why it ended can still be read
    assert (Path(job.dir) / "log.1").read_text().splitlines()[-1] == LAST_WORDS
    assert LAST_WORDS not in (Path(job.dir) / "log").read_text()
    assert any(LAST_WORDS in m and "restarting it to resume" in m for m in seen[0] + seen[1]), seen
