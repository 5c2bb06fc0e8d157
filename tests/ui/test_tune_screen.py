"""Pilot tests of the Tune screen: every field takes what is typed right after opening, the
command shown is the one started, the cancel asks first (Cancel the default), and the
candidates' states follow a fake campaign's event stream, the frontier and the report too."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from textual.widgets import DataTable, Input

from tests.screenapp import ScreenApp
from tests.waits import until_async
from tunedeck.ab.events import ABEvent
from tunedeck.ui.screens.modals import ConfirmModal
from tunedeck.ui.screens.tune import FIELDS, TuneScreen
from tunedeck.widgets.frontier_chart import FrontierChart

pytestmark = pytest.mark.timeout(60)
SIZE = (140, 44)
BASE = "sglang-base"  # a shipped profile: the real parser and plan check the command
VARY = "flags.attention-backend=triton,flashinfer"


class TuneApp(ScreenApp):
    target = "demo"


class FakeCampaign:
    """Events from a queue (None ends them); ``cancel`` records that it was called."""

    def __init__(self) -> None:
        self.id = "tune-job-1"
        self.queue: asyncio.Queue[ABEvent | None] = asyncio.Queue()
        self.report: dict[str, Any] | None = None
        self.cancelled = 0
        self.on_link_error: Any = None
        self.on_link_ok: Any = None

    async def events(self):
        while (ev := await self.queue.get()) is not None:
            yield ev

    async def cancel(self) -> str:
        self.cancelled += 1
        return "cancelled"


def starter(campaign: FakeCampaign, seen: list):
    async def start(args, plan, confirm, on_skip) -> FakeCampaign:
        seen.append((args, plan))
        return campaign

    return start


def ev(kind: str, side: str | None = None, **data: Any) -> ABEvent:
    return ABEvent(kind, f"{side}: {kind}", side, 1, 0, 3, None, data)


async def test_every_field_takes_keys_typed_right_after_opening():
    scr = TuneScreen(start_campaign=starter(FakeCampaign(), []), profiles=[BASE, "sglang-tuned"])
    async with TuneApp(scr).run_test(size=SIZE) as pilot:
        typed = {fid: f"x{i}y=1,2" for i, (fid, _, _) in enumerate(FIELDS)}
        for fid, text in typed.items():
            scr.query_one(f"#{fid}", Input).focus()  # no pause: the keys follow at once
            await pilot.press(*text)
        await pilot.pause()
        got = {fid: scr.query_one(f"#{fid}", Input).value for fid in typed}
        assert got == typed
        shown = str(scr.query_one("#tune-command").content)
        assert "--vary x0y=1,2" in shown and "--budget x5y=1,2" in shown and "--demo" in shown


async def test_start_shows_the_command_asks_and_starts_it_then_states_follow_the_events():
    camp, seen = FakeCampaign(), []
    scr = TuneScreen(start_campaign=starter(camp, seen), profiles=[BASE])
    async with TuneApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        for fid, value in (("tune-vary", VARY), ("tune-ttft", "500"), ("tune-tpot", "50")):
            scr.query_one(f"#{fid}", Input).value = value
        await pilot.pause()
        await pilot.press("ctrl+l")
        await until_async(lambda: isinstance(pilot.app.screen, ConfirmModal), 10, pilot=pilot)
        question = pilot.app.screen.question
        assert f"tunedeck tune {BASE} --vary {VARY} --slo ttft_p90:500 tpot_p90:50 --demo" in question
        await pilot.press("enter")  # Cancel has the focus: nothing starts
        await until_async(lambda: pilot.app.screen is scr, 10, pilot=pilot)
        assert seen == [] and scr.campaign is None
        await pilot.press("ctrl+l")
        await until_async(lambda: isinstance(pilot.app.screen, ConfirmModal), 10, pilot=pilot)
        await pilot.press("y")
        await until_async(lambda: scr.campaign is camp, 10, pilot=pilot)
        args, plan = seen[0]
        assert args.vary == [VARY] and args.slo == ["ttft_p90:500", "tpot_p90:50"] and args.demo
        names = [c.name for c in plan[1]]
        assert names == [BASE, f"{BASE}+attention-backend=flashinfer"] or len(names) == 3
        table = scr.query_one("#tune-table", DataTable)
        await until_async(lambda: table.row_count == len(names), 10, pilot=pilot)

        def state(name: str) -> str:
            return str(table.get_cell(name, "state"))

        assert {state(n) for n in names} == {"queued"}
        a, b = names[0], names[-1]
        await camp.queue.put(ev("launch", a))
        await until_async(lambda: state(a) == "starting", 10, pilot=pilot)
        await camp.queue.put(ev("ready", a, startup_s=3.0))
        await camp.queue.put(ev("bench-start", a, concurrency=16))
        await until_async(lambda: state(a) == "measuring" and str(table.get_cell(a, "step")) == "C=16", 10, pilot=pilot)
        await camp.queue.put(ev("capacity", a, capacity=16, result={"capacity": 16, "throughput_at_capacity": 800.0}))
        await camp.queue.put(ev("launch", b))
        await camp.queue.put(ev("failed", b))
        await until_async(lambda: state(a) == "done" and state(b) == "failed", 10, pilot=pilot)
        assert str(table.get_cell(a, "capacity")) == "16"
        assert "best so far: " in str(scr.query_one("#tune-status").content)
        assert scr.query_one(FrontierChart).points == (("1", 50.0, 100.0, True),)  # 800 tok/s over C=16, 8 GPUs
        # the link: lost, said on the status line, and cleared when the host answers again
        camp.on_link_error(OSError("connection reset"), 1)
        await until_async(lambda: "link lost" in str(scr.query_one("#tune-status").content), 10, pilot=pilot)
        camp.on_link_ok()
        await until_async(lambda: "link lost" not in str(scr.query_one("#tune-status").content), 10, pilot=pilot)
        # the report is final
        camp.report = {
            "campaign": "tune-1",
            "status": "completed",
            "winner": a,
            "candidates": [
                {"name": a, "state": "measured", "capacity": 16, "tok_s_per_user": 50.0, "tok_s_per_gpu": 100.0},
                {"name": b, "state": "failed"},
            ],
        }
        await camp.queue.put(None)
        await until_async(lambda: scr.campaign is None, 10, pilot=pilot)
        assert f"winner: {a}" in str(scr.query_one("#tune-status").content)


async def test_tok_s_per_gpu_of_a_deployment_divides_by_the_gpus_it_places(tmp_path, monkeypatch):
    """A vLLM-on-Ray base over two 8-GPU nodes runs on tp × pp = 16 GPUs (its ``tp`` is 8), and a
    ``deploy.pp = 1`` candidate on 8: the live view's tok/s per GPU divides each by its own count."""
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "vr.toml").write_text(
        'schema_version = 1\nengine = "vllm"\nmodel = "m"\ntp = 8\nport = 30000\nnodes = ["gpu-a", "gpu-b"]\n'
        '\n[deploy]\nhead_address = "10.0.0.1"\n'
    )
    monkeypatch.setenv("TUNEDECK_PROFILES", str(user))
    camp, seen = FakeCampaign(), []
    scr = TuneScreen(start_campaign=starter(camp, seen), profiles=["vr"])
    app = TuneApp(scr)
    app.target = "local"  # a multi-node base names its nodes: the campaign runs on this machine
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        scr.query_one("#tune-vary", Input).value = "deploy.pp=1"
        scr.query_one("#tune-ttft", Input).value = "500"
        await pilot.press("ctrl+l")
        await until_async(lambda: isinstance(pilot.app.screen, ConfirmModal), 10, pilot=pilot)
        await pilot.press("y")
        await until_async(lambda: scr.campaign is camp, 10, pilot=pilot)
        assert [c.name for c in seen[0][1][1]] == ["vr", "vr+deploy.pp=1"]
        for name in ("vr", "vr+deploy.pp=1"):
            await camp.queue.put(ev("capacity", name, capacity=16, result={"throughput_at_capacity": 800.0}))
        chart = scr.query_one(FrontierChart)
        await until_async(lambda: len(chart.points) == 2, 10, pilot=pilot)
        # 800 tok/s over 16 GPUs and over 8
        assert sorted(p[2] for p in chart.points) == [50.0, 100.0], chart.points
        table = scr.query_one("#tune-table", DataTable)
        assert (
            str(table.get_cell("vr", "per_gpu")) == "50.0"
            and str(table.get_cell("vr+deploy.pp=1", "per_gpu")) == "100.0"
        )
        await camp.queue.put(None)


async def test_cancel_asks_first_with_cancel_the_default():
    camp = FakeCampaign()
    scr = TuneScreen(start_campaign=starter(camp, []), profiles=[BASE])
    async with TuneApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        scr.query_one("#tune-vary", Input).value = VARY
        scr.query_one("#tune-ttft", Input).value = "500"
        await pilot.press("ctrl+l")
        await until_async(lambda: isinstance(pilot.app.screen, ConfirmModal), 10, pilot=pilot)
        await pilot.press("y")
        await until_async(lambda: scr.campaign is camp, 10, pilot=pilot)
        await pilot.press("ctrl+x")
        await until_async(lambda: isinstance(pilot.app.screen, ConfirmModal), 10, pilot=pilot)
        assert "Cancel the running campaign?" in pilot.app.screen.question
        await pilot.press("enter")  # Cancel (keep running) has the focus
        await until_async(lambda: pilot.app.screen is scr, 10, pilot=pilot)
        await pilot.pause(0.2)
        assert camp.cancelled == 0 and scr.campaign is camp
        await pilot.press("ctrl+x")
        await until_async(lambda: isinstance(pilot.app.screen, ConfirmModal), 10, pilot=pilot)
        await pilot.press("y")
        await until_async(lambda: camp.cancelled == 1, 10, pilot=pilot)
        await camp.queue.put(None)


async def test_launch_list_u_opens_tune_with_the_highlighted_base_and_the_marked_candidates():
    from tests import ui_fakes
    from tunedeck.ui.app import make_app

    app = make_app(
        gpu=ui_fakes.FakeGpu(),
        host_source=ui_fakes.FakeHost(),
        servers=ui_fakes.FakeServers(),
        target="demo",
        interval=0.2,
        initial_mode="launch",
    )
    async with app.run_test(size=SIZE) as pilot:
        # the launch list is filled after the first frames: `u` before that opens Tune with no base
        await until_async(lambda: getattr(app.screen, "highlighted", None) is not None, 10, pilot=pilot)
        launch: Any = app.screen
        names = list(launch.query_one("#profiles", DataTable).rows)
        launch.marked["B"] = "sglang-tuned"
        await pilot.press("u")
        await until_async(lambda: isinstance(app.screen, TuneScreen), 10, pilot=pilot)
        scr = app.screen
        assert scr.base == launch.highlighted and scr.marked == (["sglang-tuned"] if scr.base != "sglang-tuned" else [])
        shown = str(scr.query_one("#tune-command").content)
        assert f"tunedeck tune {scr.base} " in shown and ("--candidates" in shown) == bool(scr.marked), (names, shown)
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        rows = app.screen.rows  # the ? overlay lists the Tune screen's keys
        assert {"Base", "Mark", "Pre-flight", "Start", "Cancel"} <= {r[1] for r in rows}


def test_a_long_name_wraps_between_its_changes_and_inside_one_only_when_it_is_longer_than_a_line():
    from tunedeck.widgets.tune_table import wrap_name

    name = "*+attention-backend=flashinfer,max-running-requests=32"
    assert wrap_name(name, 80) == [name]
    assert wrap_name(name, 31) == ["*+attention-backend=flashinfer,", "max-running-requests=32"]
    assert wrap_name(name, 20) == ["*+", "attention-backend=fl", "ashinfer,", "max-running-requests", "=32"]
    for width in range(1, 60):
        lines = wrap_name(name, width)
        assert "".join(lines) == name and max(map(len, lines)) <= width


async def test_at_80x24_a_campaign_takes_the_width_and_every_candidate_keeps_its_name_state_and_capacity():
    """80×24, as the Compare screen: the campaign hides the profiles and the form (p, or B/m, bring
    them back); each candidate's number, whole name (wrapped between its changes), state and
    capacity end inside the table's width; the highlighted one's tok/s are on the line under it."""
    from tunedeck.ab.tuneview import TuneProgress
    from tunedeck.widgets.tune_table import TuneTable

    changes = (
        "",
        "+attention-backend=flashinfer",
        "+attention-backend=fa3,max-running-requests=32,chunked-prefill=4096",
    )
    names = [BASE + c for c in changes]
    prog = TuneProgress(((n, 8) for n in names), campaign="tune-1", estimate_s=600.0)
    for i, n in enumerate(names[:2], 1):
        for e in (ev("launch", n), ev("ready", n, startup_s=3.0), ev("bench-start", n, concurrency=16 * i)):
            prog.feed(e)
        prog.feed(ev("capacity", n, capacity=16 * i, result={"capacity": 16 * i, "throughput_at_capacity": 800.0 * i}))
    prog.feed(ev("launch", names[2]))
    scr = TuneScreen(start_campaign=starter(FakeCampaign(), []), profiles=[BASE], snapshot=prog.snapshot())
    async with TuneApp(scr).run_test(size=(80, 24)) as pilot:
        side, table = scr.query_one("#tune-side"), scr.query_one(TuneTable)
        await until_async(lambda: table.row_count == 3 and table.size.width > 0, 10, pilot=pilot)
        await pilot.pause()
        assert not side.display
        assert [str(c.label) for c in table.columns.values()] == ["#", "candidate", "state", "capacity"]
        assert sum(c.get_render_width(table) for c in table.columns.values()) <= table.size.width
        for n, c in zip(names, changes):
            assert str(table.get_cell(n, "name")).replace("\n", "")[1:] == (c or BASE)
        assert str(table.get_cell(names[2], "name")).count("\n") >= 1  # longer than the room: wrapped
        assert [str(table.get_cell(n, "state")) for n in names] == ["done", "done", "starting"]
        assert [str(table.get_cell(n, "capacity")) for n in names] == ["16", "32", "-"]
        detail = scr.query_one("#tune-detail")
        table.move_cursor(row=1)
        await until_async(lambda: names[1] in str(detail.render()), 10, pilot=pilot)
        assert "tok/s/user 50.0" in str(detail.render()) and "tok/s/GPU 200.0" in str(detail.render())
        await pilot.press("p")
        await until_async(lambda: side.display, 10, pilot=pilot)
        await pilot.press("p")
        await until_async(lambda: not side.display, 10, pilot=pilot)
        await pilot.press("B")  # choosing a base needs the list: the first key shows it, changes nothing
        await until_async(lambda: side.display, 10, pilot=pilot)
        assert scr.base == BASE


async def test_a_partial_report_says_so_and_marks_the_candidates_not_measured():
    from tunedeck.ui.screens.campaign import CampaignEnded
    from tunedeck.widgets.tune_table import TuneTable

    scr = TuneScreen(start_campaign=starter(FakeCampaign(), []), profiles=[BASE])
    async with TuneApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        a, b = BASE, f"{BASE}+attention-backend=flashinfer"
        scr.post_message(
            CampaignEnded(
                {
                    "campaign": "tune-1",
                    "status": "partial",
                    "error": "the campaign's process ended without its report 4 times; not measured: " + b,
                    "winner": a,
                    "not_measured": [b],
                    "candidates": [
                        {
                            "name": a,
                            "state": "measured",
                            "capacity": 16,
                            "tok_s_per_user": 50.0,
                            "tok_s_per_gpu": 100.0,
                        },
                        {"name": b, "state": "pending", "findings": ["not measured: its measurement was cut short"]},
                    ],
                }
            )
        )
        table = scr.query_one("#tune-table", DataTable)
        await until_async(lambda: table.row_count == 2, 10, pilot=pilot)
        status = str(scr.query_one("#tune-status").content)
        assert "· partial" in status and f"best of the measured: {a}" in status and "winner" not in status, status
        assert "ended without its report 4 times" in status
        assert str(table.get_cell(b, "state")) == "not measured" and str(table.get_cell(a, "state")) == "done"
        detail = str(scr.query_one(TuneTable).detail())  # the narrow layout's line under the table
        assert "(best of the measured)" in detail and "winner" not in detail, detail
