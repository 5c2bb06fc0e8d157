"""Honest screens: what is shown is what is true now (Pilot tests of the real screens)."""

from __future__ import annotations

import pytest

from tests.abfakes import FakeOps, fake_campaigns
from tests.screenapp import ScreenApp
from tests.waits import until_async
from tunedeck.ab.compare import compare
from tunedeck.ab.confdiff import config_diff
from tunedeck.ab.render import to_text
from tunedeck.ab.sides import LevelResult, Side, SideRun
from tunedeck.ui.screens.compare import CompareScreen
from tunedeck.widgets.compare_chart import CompareChart
from tunedeck.widgets.compare_table import CompareTable, ConfigDiff

pytestmark = pytest.mark.timeout(60)
SIZE = (120, 40)


async def until(pilot, pred, timeout: float = 10.0) -> None:
    await until_async(pred, timeout, pilot=pilot)


def summ(c, tput, tpot=10.0, ttft=50.0):
    return {
        "max_concurrency": c,
        "completed": 10,
        "failed": 0,
        "output_throughput": tput,
        "median_tpot_ms": tpot,
        "median_ttft_ms": ttft,
        "p99_ttft_ms": ttft * 2,
        "p99_itl_ms": tpot * 1.5,
    }


def side(label, profile, single, peak, ttft16=50.0, argv=("sglang", "--tp", "8")):
    runs = (SideRun((LevelResult(1, summ(1, single)), LevelResult(16, summ(16, peak, ttft=ttft16))), startup_s=30.0),)
    return Side(label, profile, "sglang", "m", tuple(argv), {}, {"ignore_eos": True}, runs)


# ---------------------------------------------------------------- A/B view
async def test_new_or_cancelled_ab_clears_the_old_table_and_chart():
    from tunedeck.ui.screens.modals import ConfirmModal

    ops = FakeOps(bench_delay=5.0)  # the A/B cannot finish while the question is answered, however slow the machine
    old = compare(side("A", "base", 100, 1000), side("B", "tuned", 118, 1200))
    scr = CompareScreen(
        start_campaign=fake_campaigns(ops),
        profiles=["base", "tuned"],
        a="base",
        b="tuned",
        comparison=old,
        series=([1.0, 2.0, 3.0], [2.0, 3.0, 4.0]),
    )
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        table, chart = scr.query_one(CompareTable), scr.query_one(CompareChart)
        assert table.row_count > 0 and chart.series
        await pilot.press("g")
        await until(pilot, lambda: "bench base C=1" in ops.log)
        assert table.row_count == 0 and not chart.series  # not the previous A/B under the new one
        assert "faster" not in str(scr.query_one("#ab-headline").content)
        await pilot.press("x")  # asks first (Cancel has the focus): y cancels
        await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmModal))
        await pilot.press("y")
        await until(pilot, lambda: scr.report is not None)
        assert scr.report.status == "cancelled"
        if scr.report.comparison is None:
            assert table.row_count == 0 and not chart.series
            assert "no results" in str(scr.query_one("#ab-headline").content)


async def test_headline_says_the_regressions_too():
    cmp = compare(side("A", "sglang-base", 100, 1000, ttft16=50.0), side("B", "sglang-tuned", 118, 1200, ttft16=71.5))
    scr = CompareScreen(
        start_campaign=fake_campaigns(FakeOps()), profiles=["sglang-base", "sglang-tuned"], comparison=cmp
    )
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        head = str(scr.query_one("#ab-headline").content)
        assert "is faster" not in head
        assert "higher throughput" in head and "worse" in head and "TTFT p50 at C=16 +43%" in head, head


def test_unrecorded_argv_is_unknown_not_a_false_diff():
    a = side("A", "base", 100, 1000)
    b = side("B", "base", 100, 1000, argv=())
    cmp = compare(a, b)
    assert [c.kind for c in cmp.config_diff] == ["unknown"]
    text = to_text(cmp)
    assert "unknown (not recorded for B)" in text and "{" not in text.split("Configuration")[1]
    assert config_diff(["sglang", "--tp", "8"], {}, ["sglang", "--tp", "8"], {}) == []


async def test_unknown_config_shows_as_unknown_in_the_view():
    cmp = compare(side("A", "base", 100, 1000), side("B", "base", 100, 1000, argv=()))
    scr = CompareScreen(start_campaign=fake_campaigns(FakeOps()), profiles=["base"], comparison=cmp)
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        await pilot.pause()
        diff = str(scr.query_one(ConfigDiff).content)
        assert "unknown (not recorded for B)" in diff and "(only" not in diff


# ---------------------------------------------------------------- run view
class _Tracker:
    """Stands in for the startup tracker: scripted snapshots, a clock we move."""

    def __init__(self) -> None:
        from tunedeck.model import StartupProgress

        self.SP = StartupProgress
        self.now = 0.0
        self.state = "starting"
        self.final = None
        self.catchup = True
        self.offset = 0
        self.stop_requested = False
        self.alive = True

    def mark_stopping(self, how=None) -> None:
        self.stop_requested = True

    def snapshot(self):
        if self.state == "exited" and self.stop_requested:
            return self.SP(
                "r1", "sglang", "stopped", "ready", fraction=1.0, elapsed=self.now, diagnosis="stopped (by you)"
            )
        if self.state == "ready":
            return self.SP("r1", "sglang", "ready", "ready", fraction=1.0, elapsed=self.now, health="ok")
        if self.state == "exited":
            return self.SP("r1", "sglang", "exited", "ready", fraction=1.0, elapsed=self.now, diagnosis="exited rc 0")
        return self.SP("r1", "sglang", "starting", None, fraction=0.0, elapsed=self.now)

    def finish(self, snap) -> None:
        self.final = snap

    async def probe_loop(self, stop) -> None:
        await stop.wait()

    def feed(self, data) -> None:
        pass

    def flush(self) -> None:
        pass


async def test_run_view_ready_once_clock_stops_and_a_stop_is_not_a_failure(monkeypatch):
    import tunedeck.ui.screens.run as run_mod
    from tunedeck.hostops.runstop import StopResult
    from tunedeck.hostops.runstore import RunRecord
    from tunedeck.ui.screens.modals import ConfirmModal
    from tunedeck.widgets.startup_progress import StartupProgressView

    class Host:
        target = "local"

    async def fake_follow(*a, **k):
        return None

    async def fake_stop(host, rec, grace=30.0, store=None):
        tracker.state = "exited"
        return StopResult("stopped", f"run {rec.run_id} stopped (TERM)", gpu_freed_mib=71.0 * 1024)

    monkeypatch.setattr(run_mod, "follow_forever", fake_follow)
    monkeypatch.setattr(run_mod, "stop_run", fake_stop)
    tracker = _Tracker()
    scr = run_mod.RunScreen(Host(), RunRecord("r1", "local", ["x"], pid=123))  # type: ignore[arg-type]
    monkeypatch.setattr(scr, "_make_tracker", lambda rec: tracker)
    scr.tracker = tracker
    async with ScreenApp(scr).run_test(size=SIZE) as pilot:
        view = scr.query_one(StartupProgressView)
        await pilot.pause(0.1)
        # reopening a run: no 0% bar while the log is read from the start
        assert "0%" not in view.text and "reading the run's log" in view.text
        tracker.catchup = False
        tracker.state, tracker.now = "ready", 42.0
        # the view's next tick shows it (a fixed 0.7-s pause missed the tick once, beside a CPU hog)
        await until(pilot, lambda: "ready in 42s" in view.text)
        assert view.text.count("ready") == 2 and "✓ ready" in view.text and "ready in 42s" in view.text
        assert "ready ✓ ready" not in view.text and "elapsed" not in view.text
        tracker.now = 99.0
        await pilot.pause(0.7)
        assert "ready in 42s" in view.text  # the clock stopped at ready
        await pilot.press("s")
        await until(pilot, lambda: isinstance(scr.app.screen, ConfirmModal))
        await pilot.press("y")
        await until(pilot, lambda: scr.stop_result is not None)
        await until(pilot, lambda: "stopped (by you)" in view.text)
        text = view.text
        assert "stopped (by you)" in text and "71.0 GiB" in text
        assert "health ok" not in text and "exited rc 0" not in text and "✓ ready" not in text
        assert "stopped" in str(scr.query_one("#run-title").content)


# ---------------------------------------------------------------- profiles list and form
async def test_broken_user_profile_is_listed_not_dropped(tmp_path, monkeypatch):
    from tests.ui_fakes import FakeGpu, FakeHost, FakeServers, gpu_status
    from tunedeck.ui.app import make_app
    from tunedeck.ui.screens.profiles import ProfilesScreen

    user = tmp_path / "user"
    (user / "servers").mkdir(parents=True)
    (user / "servers" / "mine.toml").write_text('schema_version = 1\nname = "mine"\nengine = "sglang"\ntp = "eight"\n')
    monkeypatch.setenv("TUNEDECK_PROFILES", str(user))
    app = make_app(gpu=FakeGpu([gpu_status(2)]), host_source=FakeHost(), servers=FakeServers(), target="t")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, ProfilesScreen))
        lst = app.screen
        assert any(k.startswith("broken:") for k in lst.broken)
        table = lst.table
        assert table.row_count == len(lst.profiles) + 1
        table.move_cursor(row=table.row_count - 1)
        await pilot.pause()
        assert lst.highlighted is None and lst.highlighted_broken is not None
        preview = str(lst.query_one("#profile-preview").content)
        assert "cannot be read" in preview and "mine.toml" in preview
        await pilot.press("e")  # editing a broken row says why, no traceback
        await pilot.pause()
        assert app.screen is lst


async def test_form_hides_backends_for_other_hardware(tmp_path, monkeypatch):
    from textual.widgets import Select

    from tunedeck.sim.demo import demo_host

    monkeypatch.setenv("TUNEDECK_PROFILES", str(tmp_path / "user"))
    from tunedeck.profiles.store import ProfileStore
    from tunedeck.ui.screens.launch import LaunchScreen

    store = ProfileStore()
    scr = LaunchScreen(store.get("sglang-base"), store=store, host=demo_host(), demo=True)
    app = ScreenApp(scr)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        values = [v for _, v in scr.query_one("#backend", Select)._options]
        assert "flashinfer" in values and "fa3" in values
        assert "ascend" not in values and "intel_xpu" not in values
        assert "other hardware hidden" in str(scr.query_one("#backend-source").content)


# ---------------------------------------------------------------- the command line says the same
def _td(*args: str):
    import subprocess

    from tests.conftest import REPO, tunedeck_cmd

    return subprocess.run([*tunedeck_cmd(), *args], cwd=REPO, capture_output=True, text=True, timeout=90)


def test_probe_demo_reads_the_simulated_engine_versions():
    r = _td("probe", "--demo")
    assert r.returncode == 0, r.stderr
    assert "not installed" not in r.stdout
    assert "0.5.23 (simulated)" in r.stdout


def test_unknown_profile_is_exit_1_everywhere_and_json_is_indented():
    codes = {
        tuple(a): _td(*a).returncode
        for a in (["launch", "nope", "--demo"], ["preflight", "nope", "--demo"], ["profiles", "show", "nope"])
    }
    assert set(codes.values()) == {1}, codes
    r = _td("runs", "--json")
    assert r.returncode == 0 and (r.stdout.strip() == "[]" or "\n  " in r.stdout)


# ---------------------------------------------------------------- layout and keys
async def test_80x24_keeps_the_important_columns_and_160_adds_history():
    from tests.snapshot_app import SCENES
    from tests.ui_text import screen_text
    from tunedeck.widgets.gpu_table import GpuTable
    from tunedeck.widgets.server_panel import ServerTable

    app, run_before = SCENES["status"]()
    async with app.run_test(size=(80, 24)) as pilot:
        await run_before(pilot)
        gpu = [k for k, _, _ in app.screen.query_one(GpuTable).shown_columns]
        srv = [k for k, _, _ in app.screen.query_one(ServerTable).shown_columns]
        assert {"temp", "power", "sm"} <= set(gpu) and "mem_hist" not in gpu
        assert {"waiting", "kv", "gen", "ttft"} <= set(srv)
        text = screen_text(app)
        for word in ("Temp", "Power", "SM", "Wait", "KV", "tok/s", "TTFT"):
            assert word in text, word
        await pilot.resize_terminal(160, 48)
        await pilot.pause(0.3)
        gpu = [k for k, _, _ in app.screen.query_one(GpuTable).shown_columns]
        srv = [k for k, _, _ in app.screen.query_one(ServerTable).shown_columns]
        assert "mem_hist" in gpu and {"run_hist", "wait_hist", "kv_hist", "gen_hist"} <= set(srv)


async def test_question_mark_lists_the_keys_of_the_screen():
    from tests.snapshot_app import SCENES
    from tests.ui_text import screen_text
    from tunedeck.ui.screens.modals import KeysModal

    app, run_before = SCENES["profiles"]()
    async with app.run_test(size=(100, 40)) as pilot:
        await run_before(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        assert isinstance(app.screen, KeysModal)
        text = screen_text(app)
        assert "Keys: Profiles" in text and "Launch it" in text and "Pre-flight, then launch" in text
        assert "Cursor up" not in text  # Textual's own cursor keys are not the screen's keys
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, KeysModal)


async def test_profiles_filter_takes_a_burst_and_headers_sort():
    from textual import events

    from tests.snapshot_app import base_app
    from tunedeck.ui.screens.profiles import ProfilesScreen
    from tunedeck.widgets.filter_table import TableFilter

    app = base_app(ticks=2, interval=0.25)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, ProfilesScreen))
        lst = app.screen
        for ch in "/vllm":
            app.post_message(events.Key("slash" if ch == "/" else ch, ch))
        app.post_message(events.Key("enter", None))
        for _ in range(5):
            await pilot.pause()
        assert app.screen is lst and app.current_mode == "launch"  # 'l' / 'm' ran nothing
        assert lst.table.shown_keys == ["vllm-baseline"]
        assert lst.highlighted == "vllm-baseline"
        assert not lst.query_one(TableFilter).is_open and lst.table.filter_text == "vllm"
        await pilot.press("slash", "escape")
        await pilot.pause()
        assert len(lst.table.shown_keys) == 4
        lst.table.sort_by("name")
        lst.table.sort_by("name")  # again: reversed
        await pilot.pause()
        assert lst.table.shown_keys == sorted(lst.table.shown_keys, reverse=True)
        lst.table.move_cursor(row=0)
        await pilot.pause()
        assert lst.highlighted == lst.table.shown_keys[0]  # the row, not the position in the file list


async def test_results_list_filters_and_sorts():
    import json as _json

    from tests.snapshot_app import base_app
    from tunedeck.bench.store import run_dir
    from tunedeck.ui.screens.bench_setup import BenchSetupScreen
    from tunedeck.widgets.filter_table import FilterTable

    for rid, prof, tput in (
        ("20260101-000000-aaaaaa", "sglang-base", 61.0),
        ("20260101-000001-bbbbbb", "vllm-x", 9.5),
        ("20260101-000002-cccccc", "sglang-tuned", 120.0),
    ):
        d = run_dir(rid)
        d.mkdir(parents=True)
        (d / "meta.json").write_text(_json.dumps({"run_id": rid, "max_concurrency": 1, "profile": prof}))
        (d / "summary.json").write_text(
            _json.dumps({"completed": 5, "failed": 0, "output_throughput": tput, "median_ttft_ms": 7.0})
        )
    app = base_app(ticks=2, interval=0.25)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("b")
        await until(pilot, lambda: isinstance(app.screen, BenchSetupScreen))
        scr = app.screen
        await until(pilot, lambda: scr.results_read)
        table = scr.query_one("#bs-results", FilterTable)
        table.focus()
        await pilot.pause()
        await pilot.press("slash", "s", "g", "l", "enter")
        await pilot.pause()
        assert app.current_mode == "bench" and len(table.shown_keys) == 2
        table.sort_by("tok")
        await pilot.pause()
        assert table.shown_keys == ["20260101-000000-aaaaaa", "20260101-000002-cccccc"]


def switcher_app(factory):
    """The dashboard on host "first" (8 fake GPUs) whose host switcher makes hosts with ``factory``."""
    from tests.ui_fakes import FakeGpu, FakeHost, FakeServers, gpu_status, host_stats
    from tunedeck.ui.app import make_app

    return make_app(
        gpu=FakeGpu([gpu_status(8)]),
        host_source=FakeHost(host_stats()),
        servers=FakeServers(),
        target="first",
        host_factory=factory,
    )


async def test_host_switcher_lists_ssh_config_and_switches(tmp_path, monkeypatch):
    from tests.ui_fakes import FakeGpu, FakeHost, FakeServers, gpu_status, host_stats
    from tunedeck.collectors.sources import Sources
    from tunedeck.ui.screens.hosts import HostsModal, recent_hosts

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host gpu-a gpu-b\n  User op\nHost *.internal\n  User x\n")
    monkeypatch.setenv("HOME", str(home))
    made: list[str] = []

    def factory(target):
        made.append(target)
        return None, Sources(
            gpu=FakeGpu([gpu_status(2)]), host=FakeHost(host_stats(hostname=target)), servers=FakeServers(())
        )

    app = switcher_app(factory)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.latest.link.ok)
        await pilot.press("H")
        await until(pilot, lambda: isinstance(app.screen, HostsModal))
        ids = [o.id for o in app.screen.query_one("#hosts-list").options]
        assert ids == ["first", "gpu-a", "gpu-b", "local", "demo"]
        await pilot.press("down", "enter")
        await until(
            pilot, lambda: app.target == "gpu-a" and app.latest.host is not None and app.latest.host.hostname == "gpu-a"
        )
        assert made == ["gpu-a"] and app.sub_title.startswith("gpu-a")
        await until(pilot, lambda: len(app.latest.gpu.gpus) == 2)
        assert recent_hosts()[0] == "gpu-a"


async def test_a_host_switch_from_a_run_view_leaves_the_old_hosts_run(tmp_path, monkeypatch):
    """The run view follows one host's run: after a switch to another host it is closed (its
    follower ended), not left showing the old host's log under the new host's banner."""
    from tests.ui_fakes import FakeGpu, FakeHost, FakeServers, gpu_status, host_stats
    from tunedeck.collectors.sources import Sources
    from tunedeck.hostops.runstore import RunRecord
    from tunedeck.ui.screens.hosts import HostsModal
    from tunedeck.ui.screens.run import RunScreen

    monkeypatch.setenv("HOME", str(tmp_path))

    def factory(target):
        return None, Sources(
            gpu=FakeGpu([gpu_status(2)]), host=FakeHost(host_stats(hostname=target)), servers=FakeServers(())
        )

    class StubHost:
        target = "first"

    app = switcher_app(factory)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.latest.link.ok)
        run = RunScreen(StubHost(), RunRecord("r1", "first", ["x"]))  # type: ignore[arg-type]
        app.push_screen(run)
        await until(pilot, lambda: app.screen is run)
        await pilot.press("H")
        await until(pilot, lambda: isinstance(app.screen, HostsModal))
        await pilot.press("down", "enter")
        await until(pilot, lambda: app.target != "first" and not isinstance(app.screen, (HostsModal, RunScreen)))
        assert run not in app.screen_stack
        await until(pilot, lambda: not run.is_attached)  # removed: its follower ended with it


async def test_runs_list_filters_sorts_and_opens(monkeypatch):
    from textual import events

    from tests.ui_fakes import FakeGpu, FakeHost, FakeServers, gpu_status
    from tunedeck.hostops.runstore import RunRecord, RunStore
    from tunedeck.ui.app import make_app
    from tunedeck.ui.screens.runs import RunsScreen

    store = RunStore()
    for i, (prof, st, port) in enumerate(
        (("sglang-base", "stopped", 30000), ("vllm-baseline", "ready", 8000), ("sglang-tuned", "failed", 30001))
    ):
        store.save(
            RunRecord(
                f"abcdef{i:02d}",
                "t",
                ["x"],
                engine=prof.split("-")[0],
                port=port,
                profile=prof,
                status=st,
                created=1_700_000_000.0 + i,
            )
        )
    app = make_app(gpu=FakeGpu([gpu_status(2)]), host_source=FakeHost(), servers=FakeServers(), target="t")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        scr = app.screen
        await until(pilot, lambda: scr.loads)
        assert [scr.records[k].profile for k in scr.table.shown_keys] == [
            "sglang-tuned",
            "vllm-baseline",
            "sglang-base",
        ]
        for ch in "/sglang":
            app.post_message(events.Key("slash" if ch == "/" else ch, ch))
        app.post_message(events.Key("enter", None))
        for _ in range(5):
            await pilot.pause()
        assert app.screen is scr and app.current_mode == "status"
        assert len(scr.table.shown_keys) == 2
        scr.table.sort_by("port")
        await pilot.pause()
        assert [scr.records[k].port for k in scr.table.shown_keys] == [30000, 30001]
        await pilot.press("enter")  # no host in this app: says so, no traceback
        await pilot.pause()
        assert app.screen is scr
