"""The status screen on the demo host with a server launched by ``tunedeck launch --demo``:
the server is found from its run folder and shown ready with its metrics."""

from __future__ import annotations

import functools

import pytest

from tests.clifix import launch_demo, run_cli
from tests.simfix import free_port
from tests.ui.test_ui_status import SIZE, cell, until
from tunedeck.services.targets import get_host
from tunedeck.ui.app import make_app
from tunedeck.widgets.gpu_table import GpuProcessTable, GpuTable
from tunedeck.widgets.server_panel import ServerPanel

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


cli = functools.partial(run_cli, timeout=90)


# its own waits add up to more than the suite's 120 s (launch --wait 60 s, the screen 70 s, stop 90 s),
# which a loaded 2-core machine reaches: the test's bound is the sum of its parts
@pytest.mark.timeout(300)
async def test_demo_status_shows_launched_server(monkeypatch):
    monkeypatch.setenv("TUNEDECK_SIM_LOAD_S", "1")
    port = free_port()
    r = cli(*launch_demo(port, "--tp", "2", "--port", str(port), "--enable-metrics"))
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        app = make_app(get_host(None, demo=True), target="demo", demo=True, interval=0.5)
        async with app.run_test(size=SIZE) as pilot:
            gpus = app.screen.query_one(GpuTable)
            await until(pilot, lambda: gpus.row_count == 8, timeout=20)
            panel = app.screen.query_one(ServerPanel)
            await until(pilot, lambda: bool(panel.servers) and panel.servers[0].state == "ready", timeout=30)
            s = panel.servers[0]
            key = f"srv-{s.name}-{port}"
            assert cell(panel.table, key, "state") == "ready"
            assert cell(panel.table, key, "engine") == "sglang"
            assert cell(panel.table, key, "port") == str(port)
            assert cell(panel.table, key, "model") == "Qwen3-8B"
            assert cell(panel.table, key, "running") != "N/A"  # metrics enabled: figures, not N/A
            procs = app.screen.query_one(GpuProcessTable)
            await until(pilot, lambda: procs.row_count >= 2, timeout=20)  # TP=2 holds two GPUs
    finally:
        r = cli("stop", "--demo", "--yes", timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr


async def test_launch_form_request_opens_the_run_view_and_launches(monkeypatch, tmp_path):
    """LaunchScreen.LaunchRequested reaching the app launches the profile on the host (demo) in a RunScreen."""
    from dataclasses import replace

    from tunedeck.profiles.builder import build_command
    from tunedeck.profiles.store import ProfileStore
    from tunedeck.ui.screens.launch import LaunchScreen
    from tunedeck.ui.screens.run import RunScreen

    monkeypatch.setenv("TUNEDECK_SIM_LOAD_S", "1")
    monkeypatch.setenv("TUNEDECK_PROFILES", str(tmp_path / "profiles"))
    store = ProfileStore()
    profile = replace(store.get("sglang-base"), port=free_port())
    cmd = build_command(profile, demo=True, store=store)
    app = make_app(get_host(None, demo=True), target="demo", demo=True, interval=0.5)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("l")
            await pilot.pause()
            await pilot.press("n")  # the profile list opens the form for a new profile
            await until(pilot, lambda: isinstance(app.screen, LaunchScreen))
            app.screen.post_message(LaunchScreen.LaunchRequested(profile, cmd))
            await until(pilot, lambda: isinstance(app.screen, RunScreen), timeout=10)
            run = app.screen
            await until(
                pilot, lambda: run.record.run_id != "(launching)" and run.record.port == profile.port, timeout=30
            )
            await until(pilot, lambda: run.tracker.snapshot().state == "ready", timeout=60)
            await app.run_action("close", run)  # back to the launch form; the server keeps running
            await until(pilot, lambda: isinstance(app.screen, LaunchScreen))
            await pilot.press("s")
            panel = app.screen.query_one(ServerPanel)
            await until(
                pilot,
                lambda: any(s.name == "sglang-base" and s.state == "ready" for s in panel.servers or ()),
                timeout=30,
            )
    finally:
        r = cli("stop", "--demo", "--yes", timeout=90)
        assert r.returncode == 0 or "no run" in (r.stdout + r.stderr).lower(), r.stdout + r.stderr
