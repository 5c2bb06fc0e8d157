"""The host-side runtime over a real sshd: a host with no tunedeck and a bare python3, a link
that drops (sshd killed, listener and sessions) while a benchmark or an A/B runs there, and a
laptop killed with kill -9 in the middle of an A/B."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.clifix import Stderr, bench_load, run_cli
from tests.conftest import REPO, tunedeck_cmd
from tests.integration.test_ab_ssh import remote_shims, remote_state
from tests.simfix import free_port, sim_ttft_ms, vllm_sim
from tests.simfix_ab import ab_profiles, assert_b_wins_unless_busy
from tests.sshd import ROOT_USER, TEST_USER, SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(420)]


def cli(sshd: SshdServer, *args: str, timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
    return run_cli(*args, timeout=timeout, env=sshd.client_env(**env))


def bench_args(port: int, conc: int, n: int, out: int) -> list[str]:
    return ["bench", "--port", str(port), *bench_load(conc, n, out)]


def test_bench_on_a_host_with_no_tunedeck_and_a_python_without_httpx(sshd: SshdServer, tmp_path: Path):
    from tunedeck.bench import store

    target = sshd.target(TEST_USER)  # a plain user: only /usr/bin/python3, nothing installed
    probe = cli(sshd, "probe", target, "--json")
    assert probe.returncode == 0, probe.stderr
    rt = json.loads(probe.stdout)["runtime"]
    assert rt["python"] and not rt["python"].startswith("/root") and rt["problem"] is None, rt
    port = free_port()
    rec = tmp_path / "truth.jsonl"
    with vllm_sim(port, "--sim-record-timestamps", str(rec)):
        r = cli(sshd, "--host", target, *bench_args(port, 4, 16, 16))
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout)
    assert s["completed"] == 16 and s["client"]["where"] == "host"
    # the server's loopback, not the tunnel: against the server's own record of each request
    truth = sim_ttft_ms(rec, store.load_run(s["run_id"]).meta["bench_start_wall"], 16)
    assert truth >= 45 and -5 < s["mean_ttft_ms"] - truth < 40, (s["mean_ttft_ms"], truth)
    assert len(store.read_samples(s["run_id"])) == 16
    home = sshd.remote_home
    assert list((home / "lib").glob("tunedeck-host-*.pyz"))
    assert not list(Path("/tmp").glob("tunedeck-host-*"))  # nothing written outside TUNEDECK_HOME


def test_bench_survives_sshd_killed_five_times_with_nothing_lost_or_repeated(sshd: SshdServer):
    from tunedeck.bench import store

    target = sshd.target(TEST_USER)
    port = free_port()
    conc, n, out = 64, 1024, 100  # ~16 s at a fixed 50 ms TTFT and 10 ms ITL
    with vllm_sim(port):
        uncut = cli(sshd, "--host", target, *bench_args(port, conc, n, out))
        assert uncut.returncode == 0, uncut.stderr[-3000:]
        ref = json.loads(uncut.stdout)
        proc = subprocess.Popen(
            [*tunedeck_cmd(), "--host", target, *bench_args(port, conc, n, out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=sshd.client_env(),
        )
        err = Stderr(proc)
        err.wait_for("waiting for", "runs on", timeout=60)
        for _ in range(5):
            time.sleep(1.5)
            sshd.stop()  # listener and every session: the host "goes away"
            time.sleep(1.0)
            sshd.start()
        out_text = err.finish(240)
        err.join()
    assert proc.returncode == 0, err.text()[-3000:]
    assert "link to the host lost" in err.text()
    s = json.loads(out_text)
    for key in ("completed", "failed", "num_prompts", "total_output_tokens"):
        assert s[key] == ref[key], (key, s[key], ref[key])
    samples = store.read_samples(s["run_id"])
    idx = [x["index"] for x in samples]
    assert len(idx) == n and len(set(idx)) == n  # none lost, none repeated


def test_ab_goes_on_through_two_sshd_kills_and_a_killed_laptop(sshd: SshdServer, tmp_path: Path):
    import asyncio

    user = tmp_path / "profiles"
    ab_profiles(user, "k", free_port(), python=str(remote_shims(sshd, tmp_path / "remote-sim")))
    target = sshd.target(ROOT_USER)
    env = sshd.client_env(TUNEDECK_PROFILES=str(user))
    proc = subprocess.Popen(
        [*tunedeck_cmd(), "ab", "k-base", "k-tuned", "--host", target, "--plan", "quick", "--yes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
        start_new_session=True,
    )
    assert proc.stderr is not None
    seen: list[str] = []
    kills = 0
    job = None
    deadline = time.monotonic() + 200
    for line in proc.stderr:
        seen.append(line)
        m = re.search(r"A/B job (\S+) runs on", line)
        if m:
            job = m.group(1)
        if kills < 2 and (
            "[A] benchmark" in line
            or "[B] launching" in line
            or "[B #1] launching" in line
            or "[A #1] benchmark" in line
        ):
            sshd.stop()
            time.sleep(1.0)
            sshd.start()
            kills += 1
        if "[B #1] benchmark" in line or "[B] benchmark" in line:
            os.killpg(proc.pid, signal.SIGKILL)  # the laptop dies mid-A/B
            break
        assert time.monotonic() < deadline, "".join(seen)
    proc.wait(10)
    assert job, "".join(seen)
    assert kills == 2, "".join(seen)
    # attach: follows it to the end (it went on without the laptop) and shows the comparison
    r = cli(sshd, "ab", "--attach", job, "--host", target, "--json", timeout=240, TUNEDECK_PROFILES=str(user))
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    assert rep["status"] == "completed", rep.get("error")
    assert_b_wins_unless_busy(rep)
    for side in ("a", "b"):
        assert [lv["concurrency"] for lv in rep[side]["runs"][0]["levels"]] == [1, 16]
    jr = cli(sshd, "journal", "list", "--kind", "ab", "--json")
    assert any(e["id"] == rep["id"] and e["status"] == "completed" for e in json.loads(jr.stdout))
    alive, apps = asyncio.run(remote_state(sshd))
    assert alive == [] and apps == []
