"""End to end over the simulator: `tunedeck tune` launches, measures and stops every candidate
on the demo host, ranks them as the simulator's model does, and resumes after its host-side
process is killed.

The base is a copy of the built-in sglang-base on a free port with the triton attention backend
(so that the model's best is clear of the rest by more than the search's 10 % resolution).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import tunedeck_cmd
from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

SLO = ["ttft_p90:200", "tpot_p90:30"]
INPUT_LEN, OUTPUT_LEN = 64, 16
#: short levels: 2 x C requests of 16 output tokens, the search bracketing from C=16
LEVELS = ["--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN), "--prompts-per-c", "2", "--min-prompts", "6"]
SEARCH = ["--start", "16", "--max-steps", "10", "--repeats-max", "1"]


@pytest.fixture(params=["Qwen/Qwen3-8B"])
def base(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The base profile; its model is the test's parameter (``indirect``), Qwen3-8B by default."""
    user = tmp_path / "profiles"
    user.mkdir()
    monkeypatch.setenv("TUNEDECK_PROFILES", str(user))
    monkeypatch.setenv("TUNEDECK_SIM_LOAD_S", "1")
    text = (REPO / "profiles" / "servers" / "sglang-base.toml").read_text()
    text = re.sub(r'(?m)^name = ".*"$', 'name = "t-base"', text)
    text = re.sub(r"(?m)^port = \d+$", f"port = {free_port()}", text)
    text = text.replace("[nccl]", '[attention]\nbackend = "triton"\n\n[nccl]', 1)
    text = re.sub(r'(?m)^model = ".*"$', f'model = "{request.param}"', text)
    (user / "t-base.toml").write_text(text)
    return "t-base"


def run_cli(*args: str, timeout: float = 500) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*tunedeck_cmd(), *args], capture_output=True, text=True, cwd=REPO, timeout=timeout, env=dict(os.environ)
    )


async def nothing_running() -> tuple[list, list | None]:
    from tunedeck.hostops import launcher
    from tunedeck.services.targets import get_host

    host = get_host(None, demo=True)
    alive = [h for h in await launcher.list_host_runs(host) if h.alive]
    return alive, await launcher.compute_apps(host)


def predicted(cand: dict) -> int:
    """The simulator's model figure for a candidate's command (docs/sim-model.md)."""
    from tunedeck.ab.capacity import parse_slo
    from tunedeck.sim import capmodel

    argv = cand["argv"]
    assert argv[1:3] == ["sim", "sglang"], argv
    sc = capmodel.serve_config("sglang", argv[3:], cand["env"])
    return capmodel.predicted_capacity(sc, parse_slo(SLO), input_len=INPUT_LEN, output_len=OUTPUT_LEN)


def eta_checked(rep: dict) -> None:
    """The campaign's ETA as the Tune screen folds its events (the host's events file, replayed
    at each event's time): the estimate before it started within a factor of 4 of the campaign's
    real length, and the ETA once the first candidate has ended within a factor of 2 of what was
    really left (the estimate assumed 10 s a level and a 15 s stop: 6 times the real length)."""
    from tunedeck.ab.events import ABEvent
    from tunedeck.ab.tuneview import TuneProgress

    path = Path(os.environ["TUNEDECK_HOME"]) / "tune" / rep["job_id"] / "events.jsonl"
    evs = [ABEvent.from_json(e) for e in map(json.loads, path.read_text().splitlines()) if e.get("type") == "ab"]
    start = next(e.time for e in evs if e.kind == "start")
    end = next(e.time for e in evs if e.kind == "done")
    assert end - start > 0
    p = TuneProgress([(c["name"], c["tp"]) for c in rep["candidates"]], estimate_s=rep["estimate_s"])
    first = None
    for e in evs:
        p.feed(e)
        if e.kind == "start":
            s = p.snapshot(now=e.time)
            assert s.eta_basis == "estimated" and s.eta_s == pytest.approx(rep["estimate_s"])
        if e.kind == "capacity":
            first = p.snapshot(now=e.time), end - e.time
            break
    assert first is not None
    (snap, left), total = first, end - start
    print(f"estimate {rep['estimate_s']:.0f} s for {total:.0f} s; ETA {snap.eta_s:.0f} s for {left:.0f} s left")
    assert total / 2 <= rep["estimate_s"] <= 4 * total, (rep["estimate_s"], total)
    assert snap.eta_basis == "measured" and left / 2 <= snap.eta_s <= 2 * left, (snap.eta_s, left)


def test_a_campaign_of_seven_ranks_them_as_the_model_does(base: str, tmp_path: Path):
    out = tmp_path / "tune.json"
    r = run_cli(
        "tune",
        base,
        "--demo",
        "--vary",
        "flags.attention-backend=triton,flashinfer,flex_attention",
        "--vary",
        "flags.max-running-requests=32,128",
        "--slo",
        *SLO,
        *LEVELS,
        *SEARCH,
        "--yes",
        "--json",
        str(out),
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rep = json.loads(out.read_text())
    cands = {c["name"]: c for c in rep["candidates"]}
    print(r.stdout)
    assert len(cands) == 7 and all(c["state"] in ("measured", "dropped") for c in cands.values()), [
        (c["name"], c["state"], c["findings"]) for c in cands.values()
    ]
    model = {n: predicted(c) for n, c in cands.items()}
    best = max(model, key=lambda n: model[n])
    assert sorted(model.values())[-2] < 0.9 * model[best], model  # the model's best is clear of the rest
    assert rep["winner"] == best == "t-base+attention-backend=flashinfer,max-running-requests=128", (
        rep["ranking"],
        model,
    )
    win = cands[best]
    assert abs(win["capacity"] - model[best]) <= 0.1 * model[best], (win["capacity"], model[best], win["steps"])
    # the ranking table, the frontier, the winner's changes against the base
    assert rep["ranking"][0] == best and win["rank"] == 1 and win["pareto"] and best in rep["pareto"]
    assert {d["name"] for d in rep["winner_diff"]} == {"--attention-backend", "--max-running-requests"}
    for c in cands.values():
        assert c["startup_s"] and c["single_user_tok_s"] and c["tok_s_per_gpu"] and c["steps"]
        assert c["steps"][0]["concurrency"] == 1
    assert f"winner: {best}" in r.stdout and "*t-base+attention-backend=flashinfer" in r.stdout
    assert re.search(r"\+ --max-running-requests=128", r.stdout), r.stdout
    alive, apps = asyncio.run(nothing_running())
    assert alive == [] and not apps
    eta_checked(rep)
    # the journal records the campaign and its winner
    ent = json.loads(run_cli("journal", "list", "--kind", "tune", "--json").stdout)[-1]
    assert ent["id"] == rep["campaign"] and ent["status"] == "completed" and ent["winner"] == best


@pytest.mark.parametrize("base", ["deepseek-ai/DeepSeek-V2-Lite-Chat"], indirect=True)
def test_killed_campaign_resumes_and_a_second_campaign_is_refused(base: str, tmp_path: Path):
    """The host-side campaign process is killed while the second candidate is measured: the
    follow restarts it, it resumes (the first candidate is not measured again, the second is
    redone) and completes; while it runs a second campaign and an A/B are refused. The third
    candidate is impossible (flex_attention on an MLA model): skipped by pre-flight, a finding."""
    from tunedeck.services import jobs
    from tunedeck.sim.demo import demo_host

    out = tmp_path / "tune.json"
    cmd = ["tune", base, "--demo", "--vary", "flags.attention-backend=flashinfer,flex_attention", "--slo", *SLO]
    proc = subprocess.Popen(
        [*tunedeck_cmd(), *cmd, *LEVELS, *SEARCH, "--yes", "--json", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
    )
    second = f"{base}+attention-backend=flashinfer"
    seen: list[str] = []
    deadline = time.monotonic() + 300
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            seen.append(line)
            if f"[{second} #1] C=16:" in line:
                break
            assert time.monotonic() < deadline, "".join(seen)
        jid = re.search(r"campaign job (\S+) runs on demo", "".join(seen)).group(1)
        r = run_cli(*cmd, "--yes")
        assert r.returncode == 1 and f"tuning campaign {jid} is running there" in r.stderr, r.stderr
        r = run_cli("ab", base, base, "--demo", "--plan", "quick", "--yes")
        assert r.returncode == 1 and f"tuning campaign {jid} is running there" in r.stderr, r.stderr
        job = asyncio.run(jobs.find(demo_host(), "tune", jid))
        kids = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True).stdout.split()
        assert kids, "the campaign's process is not running"
        for k in kids:  # the campaign itself, under its wrapper: no report, no exit event
            os.kill(int(k), signal.SIGKILL)
        _out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(seen) + err
    assert proc.returncode == 0, err[-4000:]
    assert "restarting it to resume" in err and "resumed (restart 1)" in err, err[-4000:]
    rep = json.loads(out.read_text())
    assert rep["status"] == "completed" and rep["resumes"] == 1
    launches = {c["name"]: [bool(la.get("interrupted")) for la in c["launches"]] for c in rep["candidates"]}
    # 0 finished candidates measured twice; the interrupted one redone
    flex = f"{base}+attention-backend=flex_attention"
    assert launches == {base: [False], second: [True, False], flex: []}
    skipped = next(c for c in rep["candidates"] if c["name"] == flex)
    assert skipped["state"] == "skipped" and "does not run MLA models" in skipped["findings"][0]
    assert f"{flex}: skipped: pre-flight failed" in err
    assert err.count(f"[{base} #1] launching {base}\n") == 1, err[-4000:]
    assert rep["winner"] == second
    alive, apps = asyncio.run(nothing_running())
    assert alive == [] and not apps


def test_a_campaign_killed_more_often_than_it_is_restarted_ends_partial_with_exit_5(base: str, tmp_path: Path):
    """The host-side campaign process is killed four times while the second candidate is
    measured; the follow restarts it three times (MAX_RESTARTS), then reads the outcome from the
    job folder: the first candidate measured and ranked, the second (cut short four times) and the
    third (never reached) named as not measured, exit 5, `--json` with status partial, the
    journal partial, the report says so, and the second's server, left running by the killed
    process, named with how to stop it."""
    from tunedeck.commands.tune import EXIT_PARTIAL
    from tunedeck.services import jobs
    from tunedeck.services.tunerun import MAX_RESTARTS
    from tunedeck.sim.demo import demo_host

    out = tmp_path / "tune.json"
    vary = ["--vary", "flags.attention-backend=flashinfer,flex_attention"]
    proc = subprocess.Popen(
        [*tunedeck_cmd(), "tune", base, "--demo", *vary, "--slo", *SLO, *LEVELS, *SEARCH, "--yes", "--json", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
    )
    second, third = f"{base}+attention-backend=flashinfer", f"{base}+attention-backend=flex_attention"
    seen: list[str] = []
    kills = 0
    deadline = time.monotonic() + 400
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            seen.append(line)
            # the second candidate's server is up and measured (its first level starts): kill the campaign
            if f"[{second} #1] C=1: " in line and " prompts, " in line:
                jid = re.search(r"campaign job (\S+) runs on demo", "".join(seen)).group(1)
                job = asyncio.run(jobs.find(demo_host(), "tune", jid))
                kids = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True).stdout.split()
                assert kids, "the campaign's process is not running"
                for k in kids:  # the campaign itself, under its wrapper: no report, no exit event
                    os.kill(int(k), signal.SIGKILL)
                kills += 1
                if kills == MAX_RESTARTS + 1:
                    break
            assert time.monotonic() < deadline, "".join(seen)
        stdout, err = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(seen) + err
    try:
        assert kills == MAX_RESTARTS + 1, err[-4000:]
        assert proc.returncode == EXIT_PARTIAL, err[-4000:]
        assert err.count("restarting it to resume") == MAX_RESTARTS and f"resumed (restart {MAX_RESTARTS})" in err
        rep = json.loads(out.read_text())
        assert rep["status"] == "partial" and rep["job_id"] == jid and rep["resumes"] == MAX_RESTARTS
        by = {c["name"]: c for c in rep["candidates"]}
        assert [by[n]["state"] for n in (base, second, third)] == ["measured", "pending", "pending"]
        assert rep["ranking"] == [base] and rep["winner"] == base and by[base]["capacity"]
        assert rep["not_measured"] == [second, third]
        assert [la.get("interrupted") for la in by[second]["launches"]] == [True] * (MAX_RESTARTS + 1)
        assert by[second]["findings"] == [
            f"not measured: its measurement was cut short {MAX_RESTARTS + 1} time(s) by the end of the campaign's process"
        ]
        assert by[third]["findings"] == ["not measured: the campaign's process ended before it was reached"]
        assert f"ended without its report {MAX_RESTARTS + 1} times" in rep["error"]
        assert "1 of 3 candidate(s) measured, read from the job folder" in rep["error"]
        assert len(rep["left_running"]) == 1 and rep["left_running"][0].startswith(f"{second} (run ")
        assert f"best of the measured: {base}" in stdout and f"not measured: {second}, {third}" in stdout
        assert "tunedeck tune: partial: " in err and "(exit 5)" in err and "still running after the campaign" in err
        ent = json.loads(run_cli("journal", "list", "--kind", "tune", "--json").stdout)[-1]
        assert ent["id"] == rep["campaign"] and ent["status"] == "partial" and ent["winner"] == base
        page = tmp_path / "tune.html"
        r = run_cli("report", str(out), "--html", str(page), timeout=60)
        assert r.returncode == 0, r.stderr
        html = page.read_text()
        assert "Partial: 1 of 3 candidates measured. Best measured: " in html and "Partial result" in html
    finally:
        run_cli("stop", "--demo", "--yes", "--grace", "2", "--gpu-wait", "5")  # the server it left
    alive, apps = asyncio.run(nothing_running())
    assert alive == [] and not apps


def test_cancel_asks_stops_the_server_and_keeps_the_results(base: str, tmp_path: Path):
    proc = subprocess.Popen(
        [*tunedeck_cmd(), "tune", base, "--demo", "--vary", "flags.attention-backend=flashinfer", "--slo", *SLO]
        + [*LEVELS, *SEARCH, "--yes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
    )
    seen: list[str] = []
    deadline = time.monotonic() + 300
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            seen.append(line)
            if "launching t-base+attention-backend=flashinfer" in line:
                break
            assert time.monotonic() < deadline, "".join(seen)
        jid = re.search(r"campaign job (\S+) runs on demo", "".join(seen)).group(1)
        r = run_cli("tune", "--list", "--demo")
        assert r.returncode == 0 and jid in r.stdout and "running" in r.stdout, r.stdout + r.stderr
        r = run_cli("tune", "--cancel", jid, "--demo")  # no terminal, no --yes: not cancelled
        assert r.returncode == 1 and "pass --yes" in r.stderr, r.stderr
        r = run_cli("tune", "--cancel", jid, "--demo", "--yes")
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert r.returncode == 130, r.stdout + r.stderr
    assert "cancelled" in r.stderr and "winner: t-base" in r.stdout  # the base's measurement is kept
    assert proc.returncode == 130, "".join(seen) + err
    alive, apps = asyncio.run(nothing_running())
    assert alive == [] and not apps
