"""The dashboard as a daily tool: profile list → form / one-key launch, runs opened from the
status screen, the bench setup screen. Real demo host (simulator) where a server is needed;
every run launched here is stopped before the test ends."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from tests.clifix import launch_demo, run_cli
from tests.simfix import free_port
from tests.ui.test_ui_status import SIZE, app_with, until
from tunedeck.services.targets import get_host
from tunedeck.ui.app import make_app

pytestmark = pytest.mark.timeout(120)

BUILTINS = {"sglang-base", "sglang-tuned", "sglang-eagle3", "vllm-baseline"}


cli = functools.partial(run_cli, timeout=90)


def stop_all_demo() -> None:
    r = cli("stop", "--demo", "--yes", timeout=90)
    assert r.returncode == 0 or "no run" in (r.stdout + r.stderr).lower(), r.stdout + r.stderr


async def alive_runs() -> list:
    from tunedeck.hostops.launcher import list_host_runs

    host = get_host(None, demo=True)
    try:
        return [r for r in await list_host_runs(host) if r.alive]
    finally:
        await host.close()


def user_profile(tmp_path, monkeypatch, base: str = "sglang-base", name: str = "itest"):
    """A user copy of a built-in on a free port (the built-ins' ports may be taken on a shared machine)."""
    from tunedeck.profiles.store import ProfileStore

    monkeypatch.setenv("TUNEDECK_PROFILES", str(tmp_path / "profiles"))
    store = ProfileStore()
    p = replace(store.get(base), port=free_port())
    return store.save(p.with_(source="", path=""), name=name)


# ---------------------------------------------------------------- profile list
async def test_profile_list_shows_builtins_and_preview(tmp_path, monkeypatch):
    from tunedeck.profiles.builder import build_command
    from tunedeck.profiles.store import ProfileStore
    from tunedeck.ui.screens.profiles import ProfilesScreen

    monkeypatch.setenv("TUNEDECK_PROFILES", str(tmp_path / "profiles"))
    app = app_with(demo=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, ProfilesScreen))
        scr = app.screen
        assert set(scr.profiles) == BUILTINS
        assert {p.source for p in scr.profiles.values()} == {"builtin"}
        assert scr.table.row_count == 4
        name = scr.highlighted
        want = build_command(ProfileStore().get(name), demo=True).display
        assert str(scr.query_one("#profile-preview").content) == want
        await pilot.press("down")
        await pilot.pause()
        assert scr.highlighted != name
        assert "sglang" in str(scr.query_one("#profile-preview").content) or "vllm" in str(
            scr.query_one("#profile-preview").content
        )
        # marks
        await pilot.press("1")
        await pilot.press("up", "2")
        assert scr.marked["B"] == name and scr.marked["A"] not in (None, name)


async def test_ab_from_the_list_opens_compare_with_marks(tmp_path, monkeypatch):
    from tunedeck.ui.screens.compare import CompareScreen
    from tunedeck.ui.screens.profiles import ProfilesScreen

    monkeypatch.setenv("TUNEDECK_PROFILES", str(tmp_path / "profiles"))
    app = app_with()  # no host: the A/B cannot run, and says so on the Compare screen
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, ProfilesScreen))
        lst = app.screen
        assert lst.check_action("start_ab", ()) is None  # dimmed until A and B are marked
        assert lst.check_action("launch", ()) is False  # no host: no launch key
        names = list(lst.profiles)
        lst.table.move_cursor(row=names.index("sglang-base"))
        await pilot.press("1")
        lst.table.move_cursor(row=names.index("sglang-tuned"))
        await pilot.press("2")
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        cmp = app.screen
        assert app.current_mode == "compare"
        assert cmp.marked == {"A": "sglang-base", "B": "sglang-tuned"}
        await until(pilot, lambda: "no host" in str(cmp.query_one("#ab-status").content))


def test_new_binding_ids_are_unique():
    from tunedeck.ui.app import TunedeckApp
    from tunedeck.ui.screens.bench_setup import BenchSetupScreen
    from tunedeck.ui.screens.profiles import ProfilesScreen
    from tunedeck.ui.screens.status import StatusScreen

    for screen in (ProfilesScreen, BenchSetupScreen, StatusScreen):
        ids = [b.id for b in TunedeckApp.BINDINGS + screen.BINDINGS]
        assert all(ids) and len(set(ids)) == len(ids), screen


async def test_escape_from_form_returns_to_list(tmp_path, monkeypatch):
    from tunedeck.ui.screens.launch import LaunchScreen
    from tunedeck.ui.screens.profiles import ProfilesScreen

    monkeypatch.setenv("TUNEDECK_PROFILES", str(tmp_path / "profiles"))
    app = app_with()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, ProfilesScreen))
        lst = app.screen
        want = lst.highlighted
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, LaunchScreen))
        assert app.screen.profile.name == want
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is lst)
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, LaunchScreen))
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is lst)
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, LaunchScreen))
        assert app.screen.profile.name == "new-profile"
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is lst)


async def test_one_key_launches_highlighted_profile_on_demo(tmp_path, monkeypatch):
    from tunedeck.ui.screens.modals import ConfirmModal
    from tunedeck.ui.screens.profiles import ProfilesScreen
    from tunedeck.ui.screens.run import RunScreen

    monkeypatch.setenv("TUNEDECK_SIM_LOAD_S", "1")
    prof = user_profile(tmp_path, monkeypatch)
    app = make_app(get_host(None, demo=True), target="demo", demo=True, interval=0.5)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("l")
            await until(pilot, lambda: isinstance(app.screen, ProfilesScreen))
            lst = app.screen
            assert lst.profiles[prof.name].source == "user"
            lst.table.move_cursor(row=list(lst.profiles).index(prof.name))
            await pilot.pause()
            assert lst.highlighted == prof.name
            await pilot.press("L")
            await until(pilot, lambda: isinstance(app.screen, (RunScreen, ConfirmModal)), timeout=60)
            if isinstance(app.screen, ConfirmModal):
                await pilot.press("y")
                await until(pilot, lambda: isinstance(app.screen, RunScreen), timeout=10)
            run = app.screen
            await until(pilot, lambda: run.record.pid is not None and run.record.port == prof.port, timeout=30)
            assert run.record.profile == prof.name
            await until(pilot, lambda: run.tracker.snapshot().state == "ready", timeout=60)
            await pilot.press("escape")  # the log has focus: escape still goes back
            await until(pilot, lambda: app.screen is lst)
    finally:
        stop_all_demo()
    assert await alive_runs() == []


async def test_run_log_escape_clears_search_first(tmp_path, monkeypatch):
    from textual.app import App

    from tunedeck.hostops.runstore import RunRecord
    from tunedeck.ui.screens.run import RunScreen
    from tunedeck.widgets.server_log import ServerLog

    class Host:
        target = "local"

    class A(App):
        def on_mount(self) -> None:
            self.push_screen(RunScreen(Host(), RunRecord("r1", "local", ["x"])))  # type: ignore[arg-type]

    app = A()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        scr = app.screen
        log = scr.query_one(ServerLog)
        log.set_search("ready")
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is scr and log.pattern is None
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is not scr)


async def test_status_enter_opens_the_run_view_and_stops_it(tmp_path, monkeypatch):
    """A server launched earlier (CLI) is reattached on start; enter on its row opens its run view."""
    from tunedeck.ui.screens.modals import ConfirmModal
    from tunedeck.ui.screens.run import RunScreen
    from tunedeck.widgets.server_log import ServerLog
    from tunedeck.widgets.server_panel import ServerPanel, ServerTable

    monkeypatch.setenv("TUNEDECK_SIM_LOAD_S", "1")
    port = free_port()
    r = cli(*launch_demo(port, wait=False))
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        # the CLI's local record is gone: only the host knows the run (reattach must find it)
        from tunedeck.hostops.runstore import RunStore

        for rec in RunStore().all():
            RunStore().path(rec.run_id).unlink()
        app = make_app(get_host(None, demo=True), target="demo", demo=True, interval=0.5)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: len(app.runs) == 1, timeout=20)
            run_id = next(iter(app.runs))
            panel = app.screen.query_one(ServerPanel)
            await until(pilot, lambda: any(s.run_id == run_id for s in panel.servers or ()), timeout=30)
            status = app.screen
            await pilot.press("o")  # the status screen's key for the highlighted server
            await until(pilot, lambda: isinstance(app.screen, RunScreen), timeout=10)
            assert app.screen.record.run_id == run_id
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is status)
            table = panel.query_one(ServerTable)
            table.focus()
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, RunScreen), timeout=10)
            run = app.screen
            assert run.record.run_id == run_id
            log = run.query_one(ServerLog)
            await until(pilot, lambda: run.shown_offset > 0, timeout=20)
            await until(pilot, lambda: run.tracker.snapshot().state == "ready", timeout=60)
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
            await pilot.press("y")
            await until(pilot, lambda: run.stop_result is not None, timeout=60)
            assert run.stop_result.state == "stopped", run.stop_result
            assert log is not None
    finally:
        stop_all_demo()
    assert await alive_runs() == []


# ---------------------------------------------------------------- bench mode
def test_bench_plan_for_demo_remote_and_url():
    from tests.ui_fakes import server
    from tunedeck.ui.screens.bench_form import BenchForm, BenchFormError, bench_plan

    s = server("sglang-tuned", "ready", port=30001)
    f = BenchForm(concurrency="1, 16", num_prompts="20", input_len="64", output_len="32", warmup="0", ignore_eos=False)
    plan = bench_plan(f, s, target="demo", demo=True)
    assert (plan.demo, plan.host, plan.port, plan.profile) == (True, None, 30001, "sglang-tuned")
    assert (plan.concurrency, plan.num_prompts, plan.input_len, plan.output_len) == ((1, 16), 20, 64, 32)
    assert plan.to_argv() == [
        "--demo",
        "--port",
        "30001",
        "--profile",
        "sglang-tuned",
        "--endpoint",
        "completions",
        "--concurrency",
        "1,16",
        "--num-prompts",
        "20",
        "--input-len",
        "64",
        "--output-len",
        "32",
        "--warmup",
        "0",
        "--no-ignore-eos",
    ]
    remote = bench_plan(BenchForm(), s, target="gpuop@box", demo=False)
    assert remote.to_argv()[:4] == ["--host", "gpuop@box", "--port", "30001"] and remote.ignore_eos is True
    by_url = bench_plan(BenchForm(url="http://10.0.0.7:8000"), None, target="x", demo=False)
    assert (by_url.url, by_url.host, by_url.port) == ("http://10.0.0.7:8000", None, None)
    with pytest.raises(BenchFormError, match="concurrency"):
        bench_plan(BenchForm(concurrency="1,x"), s, target=None, demo=False)
    with pytest.raises(BenchFormError, match="server"):
        bench_plan(BenchForm(), None, target=None, demo=False)


async def test_bench_setup_runs_against_sim_server_and_chart_fills(tmp_path, monkeypatch):
    from textual.widgets import DataTable, Input

    from tunedeck.ui.screens.bench import BenchScreen
    from tunedeck.ui.screens.bench_setup import BenchSetupScreen
    from tunedeck.widgets.throughput_chart import ThroughputChart

    monkeypatch.setenv("TUNEDECK_SIM_LOAD_S", "1")
    port = free_port()
    r = cli(*launch_demo(port))
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        app = make_app(get_host(None, demo=True), target="demo", demo=True, interval=0.5)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("b")
            await until(pilot, lambda: isinstance(app.screen, BenchSetupScreen))
            setup = app.screen
            await until(
                pilot, lambda: any(s.port == port and s.state == "ready" for s in setup.servers.values()), timeout=30
            )
            for wid, val in (
                ("#bs-concurrency", "2"),
                ("#bs-num-prompts", "6"),
                ("#bs-input-len", "16"),
                ("#bs-output-len", "24"),
                ("#bs-warmup", "0"),
            ):
                setup.query_one(wid, Input).value = val
            await pilot.pause()
            assert setup.current_plan().to_argv()[:3] == ["--demo", "--port", str(port)]
            setup.query_one("#bs-servers", DataTable).focus()
            await pilot.press("enter", "ctrl+r")  # enter picks the server; ctrl+r starts
            await until(pilot, lambda: isinstance(app.screen, BenchScreen), timeout=5)
            bench = app.screen
            assert bench.plan == setup.last_plan
            chart = bench.query_one("#tok-chart", ThroughputChart)
            await until(pilot, lambda: bench.rc is not None, timeout=90)
            assert bench.rc == 0, bench.error
            assert sum(len(v) for v in chart.series.values()) > 0
            assert bench.summaries and bench.summaries[0]["completed"] == 6
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is setup)
            await until(pilot, lambda: len(setup.results) == 1)
            results = setup.query_one("#bs-results", DataTable)
            results.focus()
            await pilot.press("enter")
            await pilot.pause()
            text = str(setup.query_one("#bs-summary").content)
            assert "Successful requests:" in text and "6" in text
    finally:
        stop_all_demo()
    assert await alive_runs() == []
