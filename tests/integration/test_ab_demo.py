"""End to end over the simulator: `tunedeck ab` launches, benchmarks and stops both sides.

Each test uses copies of the built-in profiles on a free port (parallel test
runs on one machine must not fight over the engines' default ports); the
copies differ from the built-ins only in name and port.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests import clifix
from tests.clifix import read_until, start_cli
from tests.ports import free_port
from tests.screenapp import ScreenApp
from tests.simfix_ab import ab_profiles, assert_b_wins_unless_busy
from tests.waits import until_async

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


@pytest.fixture
def profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """User copies of sglang-base / sglang-tuned on a free port, plus a B that fails with OOM."""
    user = tmp_path / "profiles"
    monkeypatch.setenv("TUNEDECK_PROFILES", str(user))
    monkeypatch.setenv("TUNEDECK_SIM_LOAD_S", "1")
    names = ab_profiles(user, "t", free_port())
    bad = (user / "t-base.toml").read_text().replace('name = "t-base"', 'name = "t-oom"')
    typo = bad.replace('name = "t-oom"', 'name = "t-typo"')
    bad = bad.replace(
        "schema_version = 1", 'schema_version = 1\nextra_args = "--sim-fault oom"\nallow_unlisted_flags = true', 1
    )
    (user / "t-oom.toml").write_text(bad)
    names["oom"] = "t-oom"
    typo = typo.replace("schema_version = 1", 'schema_version = 1\nextra_args = "--attention-backnd triton"', 1)
    (user / "t-typo.toml").write_text(typo)
    names["typo"] = "t-typo"
    return names


#: an A/B's command: minutes on a loaded machine
run_cli = functools.partial(clifix.run_cli, timeout=240)


async def nothing_running() -> tuple[list, list | None]:
    from tunedeck.hostops import launcher
    from tunedeck.services.targets import get_host

    host = get_host(None, demo=True)
    alive = [h for h in await launcher.list_host_runs(host) if h.alive]
    apps = await launcher.compute_apps(host)
    return alive, apps


def test_ab_demo_tuned_wins_and_nothing_left_running(profiles):
    r = run_cli("ab", profiles["sglang-base"], profiles["sglang-tuned"], "--demo", "--plan", "quick", "--json", "--yes")
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    assert rep["status"] == "completed"
    cmp = rep["comparison"]
    rows = {row["key"]: row for row in cmp["rows"]}
    assert_b_wins_unless_busy(rep)
    peak = rows["peak_output_tok_s"]
    single = rows["single_decode_tok_s"]
    # the sim's perf model (docs/sim-model.md): flashinfer 0.97, 4 decode steps, NCCL all-reduce
    # with the PCIe preset -> about +9.4% at C=1 and +15% at C=16
    from tests.simfix_ab import expected_gain_pct

    assert abs(single["delta_pct"] - expected_gain_pct(1)) <= 3.0, (single, expected_gain_pct(1))
    assert single["outcome"] == "better" and peak["outcome"] == "better", peak
    assert abs(peak["delta_pct"] - expected_gain_pct(16)) <= 6.0, (peak, expected_gain_pct(16))
    names = {c["name"] for c in cmp["config_diff"]}
    assert {
        "--attention-backend",
        "--num-continuous-decode-steps",
        "--disable-custom-all-reduce",
        "NCCL_PROTO",
    } <= names
    for side in ("a", "b"):
        run = rep[side]["runs"][0]
        assert run["startup_s"] and run["server_log"]
        assert [lv["concurrency"] for lv in run["levels"]] == [1, 16]
    assert "[" in r.stderr and "ready" in r.stderr and "GPU memory freed" in r.stderr
    alive, apps = asyncio.run(nothing_running())
    assert alive == [] and not apps
    # the journal links it all; compare re-shows it
    r2 = run_cli("compare", rep["id"])
    assert r2.returncode == 0 and "Peak output tok/s (C=16)" in r2.stdout


def test_ab_demo_b_fails_to_start(profiles):
    r = run_cli("ab", profiles["sglang-base"], profiles["oom"], "--demo", "--plan", "quick", "--yes")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "B (t-oom) failed to start" in r.stderr
    assert re.search(r"out of memory|OOM", r.stderr, re.IGNORECASE), r.stderr[-2000:]
    alive, apps = asyncio.run(nothing_running())
    assert alive == [] and not apps
    r2 = run_cli("journal", "list", "--kind", "ab", "--json")
    ent = json.loads(r2.stdout)[-1]
    assert ent["status"] == "failed" and ent["a"]["runs"][0]["levels"]  # A's results kept


def test_ab_benchmarks_a_side_launched_with_an_api_key(profiles):
    """B's server requires an API key (401 without it): its benchmarks send the run's key, read on
    the host from the run's 0600 file; the key is in no report, record or result."""
    user = Path(os.environ["TUNEDECK_PROFILES"])
    secret = "sk-ab-7Hq2"
    text = (user / "t-base.toml").read_text().replace('name = "t-base"', 'name = "t-key"')
    (user / "t-key.toml").write_text(text.replace("[flags]\n", f'[flags]\napi-key = "{secret}"\n', 1))
    r = run_cli("ab", profiles["sglang-base"], "t-key", "--demo", "--plan", "quick", "--json", "--yes")
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    for lv in rep["b"]["runs"][0]["levels"]:
        assert lv["summary"]["failed"] == 0 and lv["summary"]["completed"] > 0, lv["summary"]
    assert secret not in r.stdout + r.stderr
    home = Path(os.environ["XDG_STATE_HOME"]).parent
    leaks = [
        p
        for p in home.rglob("*")
        if p.is_file() and p.name not in ("api_key", "log") and secret.encode() in p.read_bytes()
    ]
    assert leaks == []


def test_ab_refuses_a_bad_profile_before_launching_anything(profiles):
    r = run_cli("ab", profiles["sglang-base"], profiles["typo"], "--demo", "--plan", "quick", "--yes")
    assert r.returncode == 1
    assert "B (t-typo):" in r.stderr and "--attention-backnd" in r.stderr
    assert "launching" not in r.stderr
    alive, apps = asyncio.run(nothing_running())
    assert alive == [] and not apps


@pytest.mark.timeout(300)
async def test_pilot_one_key_runs_demo_ab_and_shows_comparison(profiles):
    """In the TUI: mark A and B, press g; the real A/B runs over the simulator and the view appears."""

    from tunedeck.sim.demo import demo_host
    from tunedeck.ui.screens.compare import CompareScreen
    from tunedeck.widgets.compare_chart import CompareChart
    from tunedeck.widgets.compare_table import CompareTable

    scr = CompareScreen(profiles=[profiles["sglang-base"], profiles["sglang-tuned"]], plan="quick")

    app = ScreenApp(scr, host=demo_host(), target="demo")
    async with app.run_test(size=(120, 44)) as pilot:
        await pilot.pause()
        await pilot.press("1", "down", "2", "g")
        assert scr.campaign is not None
        for _ in range(2400):
            if scr.report is not None:
                break
            await pilot.pause(0.1)
        assert scr.report is not None and scr.report.status == "completed", scr.report and scr.report.error
        table = scr.query_one(CompareTable)
        assert table.get_cell("peak_output_tok_s", "verdict").plain.startswith("B +")
        chart = scr.query_one(CompareChart)  # both runs' tok/s over time, from samples read in a thread
        await until_async(lambda: chart.series and all(vals for _, vals in chart.series), pilot=pilot)
    alive, apps = await nothing_running()
    assert alive == [] and not apps


def test_ab_detaches_on_sigterm_and_cancel_stops_the_server_keeping_results(profiles):
    """SIGTERM (as a closing terminal sends) while B benchmarks only detaches: the A/B goes on
    on the host. ``ab --cancel`` then stops it: B's server is stopped, A's results are kept."""
    import signal

    proc = start_cli("ab", profiles["sglang-base"], profiles["sglang-tuned"], "--demo", "--plan", "quick", "--yes")
    seen: list[str] = []
    assert proc.stderr is not None
    try:
        if read_until(proc.stderr, lambda line: "[B #1] benchmark single-stream" in line, seen, 200):
            proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(seen) + err
    assert "detached" in err
    job = re.search(r"A/B job (\S+) runs on demo", "".join(seen)).group(1)
    r = run_cli("ab", "--cancel", job, "--demo", "--yes")
    assert r.returncode == 130, r.stderr
    assert "cancelled" in r.stderr and "stopping t-tuned" in r.stderr
    alive, apps = asyncio.run(nothing_running())
    assert alive == [] and not apps
    r = run_cli("journal", "list", "--kind", "ab", "--json")
    ent = json.loads(r.stdout)[-1]
    assert ent["status"] == "cancelled"
    assert [lv["concurrency"] for lv in ent["a"]["runs"][0]["levels"]] == [1, 16]


def test_an_ab_job_killed_after_side_a_reports_a_partial_exit_5(profiles):
    """The host's A/B job dies (SIGKILL: no report, no exit event) once A's levels are done: the
    outcome is what its job folder holds, A's levels, reported as partial with exit 5."""
    import signal

    from tunedeck.commands.ab import EXIT_PARTIAL
    from tunedeck.services import jobs
    from tunedeck.sim.demo import demo_host

    a, b = profiles["sglang-base"], profiles["sglang-tuned"]
    proc = start_cli("ab", a, b, "--demo", "--plan", "quick", "--yes", "--json")
    seen: list[str] = []
    assert proc.stderr is not None
    try:
        read_until(proc.stderr, lambda line: f"launching {b}" in line, seen, 200)
        jid = re.search(r"A/B job (\S+) runs on demo", "".join(seen)).group(1)
        job = asyncio.run(jobs.find(demo_host(), "ab", jid))
        kids = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True).stdout.split()
        assert kids, "the A/B job's process is not running"
        for k in kids:  # the campaign itself, under its wrapper: no report, no exit event
            os.kill(int(k), signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        run_cli("stop", "--demo", "--yes", "--grace", "2", "--gpu-wait", "5")  # B's server, if it started
    assert proc.returncode == EXIT_PARTIAL, "".join(seen) + err
    rep = json.loads(out)
    assert rep["status"] == "partial" and rep["job_id"] == jid
    assert "level(s) read from the job folder" in rep["error"]
    levels = rep["a"]["runs"][0]["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 16]
    assert all(lv["summary"]["completed"] > 0 and not lv["summary"]["partial"] for lv in levels)
    assert not rep["b"].get("runs") and rep["comparison"] is None
    assert "partial" in err and "(exit 5)" in err
    ent = json.loads(run_cli("journal", "list", "--kind", "ab", "--json").stdout)[-1]
    assert ent["id"] == rep["id"] and ent["status"] == "partial"
    alive, apps = asyncio.run(nothing_running())
    assert alive == [] and not apps
