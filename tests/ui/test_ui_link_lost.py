"""A lost link is shown by every view that follows a host (docs/liveness.md): the run view's
header, the Bench screen's and the Compare screen's status lines. Each view follows an in-process
host (:class:`tests.ui_fakes.LinkHost`) whose link goes silent (no byte, no heartbeat: a DROP)
and comes back; the message appears within the liveness bound, the health is not "ok" meanwhile,
and the message goes once the host answers again, with the followed file quiet (so only the
resumed follow, not new data, can clear it). A long quiet file over a live link shows nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from textual.widgets import Static

from tests.screenapp import ScreenApp
from tests.ui_fakes import LinkHost
from tests.waits import until_async
from tunedeck.hostops import liveness
from tunedeck.hostops.runstore import RunRecord
from tunedeck.logparse.sglang import SG_READY
from tunedeck.services import jobs
from tunedeck.services.abrun import ABRun
from tunedeck.services.benchrun import HOST, BenchRun
from tunedeck.ui.screens.bench import BenchScreen
from tunedeck.ui.screens.compare import CompareScreen
from tunedeck.ui.screens.run import RunScreen
from tunedeck.widgets.startup_progress import StartupProgressView

pytestmark = pytest.mark.timeout(90)
SIZE = (120, 40)
#: the heartbeat these tests run with: short, yet 3 beats (the bound) must outlast what a loaded
#: 2-core machine stalls a test's event loop, plus the follower's 0.1-s gather after a chunk
#: (at 0.2 s a full suite's load once showed a quiet live link as lost)
BEAT = 0.4
LOG = "/runs/0a1b2c3d/log"


@pytest.fixture(autouse=True)
def _fast_heartbeats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(liveness.ENV, str(BEAT))


def bound() -> float:
    """The liveness rule's bound (3 beats), the follower's idle tick (1 s), the view's tick and a
    loaded machine's slack: the scaled wait for a loss to be shown."""
    return liveness.dead_after(BEAT) + 1.0 + 0.5 + 5.0


# ---------------------------------------------------------------------- run view


def run_screen(host: LinkHost) -> RunScreen:
    rec = RunRecord(
        "0a1b2c3d",
        host.target,
        ["python3", "-m", "sglang.launch_server"],
        engine="sglang",
        run_dir=LOG.rsplit("/", 1)[0],
    )
    return RunScreen(host, rec, tracker_options={"poll_gpu": False})  # type: ignore[arg-type]


async def ready_and_healthy(pilot: Any, scr: RunScreen) -> StartupProgressView:
    view = scr.query_one(StartupProgressView)
    await until_async(lambda: scr.tracker.offset > 0, 10, pilot=pilot, what="the log was not followed")
    scr.tracker.set_health(True)  # the server answers /health: the header says "health ok"
    await until_async(
        lambda: "ready" in view.text and "health ok" in view.text, 10, pilot=pilot, what=lambda: view.text
    )
    return view


async def test_run_view_header_shows_a_lost_link_and_clears_when_the_follow_resumes() -> None:
    host = LinkHost({LOG: f"[2026-01-01 10:00:00] {SG_READY}\n".encode()})
    scr = run_screen(host)
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        view = await ready_and_healthy(pilot, scr)
        assert "link lost" not in view.text
        host.cut()
        await until_async(lambda: "link lost" in view.text, bound(), pilot=pilot, what=lambda: view.text)
        assert "reconnecting" in view.text
        assert "health ok" not in view.text and "health unknown" in view.text  # the last 200 is stale
        streams = host.streams
        host.restore()  # the log stays quiet: only the resumed follow can clear the message
        await until_async(lambda: "link lost" not in view.text, 20, pilot=pilot, what=lambda: view.text)
        assert host.streams > streams and "health ok" in view.text
        host.append(LOG, b"after the drop\n")  # the follow goes on where it stopped
        await until_async(lambda: scr.shown_offset == len(host.files[LOG]), 10, pilot=pilot)


async def test_run_view_quiet_log_over_a_live_link_is_no_lost_link() -> None:
    """Many times the bound without a byte of log: no message; a real loss then still shows
    (the silence above is the rule's, not a view that shows nothing)."""
    host = LinkHost({LOG: f"[2026-01-01 10:00:00] {SG_READY}\n".encode()})
    scr = run_screen(host)
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        view = await ready_and_healthy(pilot, scr)
        loop = asyncio.get_running_loop()
        end = loop.time() + 10 * liveness.dead_after(BEAT)  # 12 s: 30 beats without a byte of log
        seen: list[str] = []
        await until_async(lambda: seen.append(view.text) or loop.time() >= end, 60, pilot=pilot)
        assert not [t for t in seen if "link lost" in t or "health ok" not in t]
        assert scr.reconnects == 0
        host.cut()
        await until_async(lambda: "link lost" in view.text, bound(), pilot=pilot, what=lambda: view.text)


# ---------------------------------------------------------------------- Bench and Compare

EVENTS = "/jobs/j1/events.jsonl"


def job(kind: str) -> jobs.Job:
    return jobs.Job(kind, "j1", "/jobs/j1", "gpu-box-01", pid=4242, starttime="1")


def line(ev: dict[str, Any]) -> bytes:
    return (json.dumps(ev) + "\n").encode()


async def test_bench_screen_status_shows_a_lost_link_and_clears_on_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    host = LinkHost({EVENTS: line({"type": "start", "levels": [{"concurrency": 8}]})})

    async def attach(h: Any, job_id: str) -> BenchRun:
        return BenchRun(h, HOST, job("bench"))

    monkeypatch.setattr(BenchRun, "attach", staticmethod(attach))
    scr = BenchScreen(None, attach=(host, "j1"))
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        status = scr.query_one("#bench-status", Static)

        def text() -> str:
            return str(status.render())

        await until_async(lambda: scr.state == "running", 10, pilot=pilot, what=text)
        assert "link lost" not in text()
        host.cut()
        await until_async(lambda: "link lost" in text(), bound(), pilot=pilot, what=text)
        assert "reconnecting (the job goes on on the host)" in text()
        host.restore()  # no event follows: only the resumed follow can clear the line
        await until_async(lambda: "link lost" not in text(), 20, pilot=pilot, what=text)
        assert scr.state == "running"


async def test_compare_screen_status_shows_a_lost_link_and_clears_on_resume() -> None:
    ev = {"type": "ab", "kind": "info", "message": "A: launching base", "step": 1, "steps": 6}
    host = LinkHost({EVENTS: line(ev)})

    async def start(*_args: Any) -> ABRun:
        return ABRun(host, job("ab"))  # type: ignore[arg-type]

    scr = CompareScreen(start_campaign=start, profiles=["base", "tuned"], a="base", b="tuned", plan="quick")
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        status = scr.query_one("#ab-status", Static)

        def text() -> str:
            return str(status.render())

        await pilot.press("g")
        await until_async(lambda: "A: launching base" in text(), 10, pilot=pilot, what=text)
        host.cut()
        await until_async(lambda: "link lost" in text(), bound(), pilot=pilot, what=text)
        assert "reconnecting (the A/B goes on on the host)" in text() and "A: launching base" in text()
        host.restore()
        await until_async(lambda: "link lost" not in text(), 20, pilot=pilot, what=text)
        assert "A: launching base" in text() and scr.campaign is not None
