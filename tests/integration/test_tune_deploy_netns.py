"""A tuning campaign whose base is a 2-node SGLang deployment, over two namespaced hosts
(tests/nshosts.py: each its own address, sshd and 8 simulated GPUs; the simulator on each node).

``tunedeck tune BASE --sim`` with a multi-node base runs detached on this machine, as an A/B of
deployments does: each candidate's deployment is pre-flighted on both nodes (an impossible one
is skipped), launched on both nodes, measured with benchmark levels run on the head, and stopped
with every GPU freed. While it runs, an A/B on one of its nodes and a second campaign are refused.
Detached, its process killed while the second candidate is measured, ``tune --attach`` starts it
again here: the finished candidate is not measured again, the deployment the killed process left
is stopped, and the report, ``--json`` and journal are a single-host campaign's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.nshosts import NsHost, ns_hosts  # noqa: F401  (fixture)
from tests.simfix import free_port
from tests.sshd import ROOT_USER
from tests.sshd import cli as sshd_cli
from tests.waits import scaled, until

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(600)]

BASE = "sg-2n"
FLEX = f"{BASE}+attention.backend=flex_attention"
#: tp=24 over 2 nodes of 8 GPUs: 12 ranks a node, impossible
BIG = f"{BASE}+attention.backend=flex_attention,tp=24"
TUNE = [
    "tune",
    BASE,
    "--sim",
    "--vary",
    "attention.backend=flex_attention",
    "--vary",
    "tp=16,24",
    "--slo",
    "ttft_p90:300",
    "tpot_p90:40",
    "--input-len",
    "64",
    "--output-len",
    "16",
    "--prompts-per-c",
    "2",
    "--min-prompts",
    "6",
    "--start",
    "16",
    "--max-steps",
    "4",
    "--repeats-max",
    "1",
]


def cli(a: NsHost, user: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return sshd_cli(a.sshd, user, *args, timeout=timeout)


def sg_profile(tmp_path: Path, a: NsHost, b: NsHost) -> Path:
    user = tmp_path / "profiles"
    user.mkdir(exist_ok=True)
    (user / f"{BASE}.toml").write_text(
        "schema_version = 1\n"
        'engine = "sglang"\n'
        'model = "Qwen/Qwen3-8B"\n'
        "tp = 16\n"
        'python = "tdpython"\n'
        f"port = {free_port()}\n"
        f'nodes = ["{a.sshd.target(ROOT_USER)}", "{b.sshd.target(ROOT_USER)}"]\n'
        "\n[deploy]\n"
        f'head_address = "{a.ip}"\n'
        f"port = {free_port()}\n"
        "\n[flags]\n"
        "dist-timeout = 60\n"
    )
    return user


def engines(h: NsHost) -> list[tuple[int, str]]:
    return [(p, c) for p, c in h.processes(" sim sglang ") if not c.startswith("sshd")]


def test_a_campaign_over_a_deployment_runs_here_and_resumes_on_attach_without_measuring_again(ns_hosts, tmp_path: Path):
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.services import jobs

    a, b = ns_hosts(2)
    user = sg_profile(tmp_path, a, b)
    ta, tb = a.sshd.target(ROOT_USER), b.sshd.target(ROOT_USER)
    out = tmp_path / "tune.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tunedeck", *TUNE, "--yes", "--json", str(out)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=a.sshd.client_env(PYTHONPATH=str(REPO), TUNEDECK_PROFILES=str(user)),
    )
    seen: list[str] = []
    deadline = time.monotonic() + scaled(300)
    assert proc.stderr is not None
    try:
        for line in proc.stderr:  # the base measured, the second candidate's deployment serving
            seen.append(line)
            if f"[{FLEX} #1] C=1:" in line:
                break
            assert time.monotonic() < deadline and proc.poll() is None, "".join(seen)
        text = "".join(seen)
        jid = re.search(r"campaign job (\S+) runs on this machine", text).group(1)  # type: ignore[union-attr]
        assert f"{BIG}: skipped: " in text, text
        proc.send_signal(signal.SIGINT)  # detach: the campaign goes on here
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "detached" in err, text + err

    # one campaign per deployment's hosts: an A/B on a node and a second campaign are refused
    r = cli(a, user, *TUNE, "--yes")
    assert r.returncode == 1 and f"tuning campaign {jid} is running there" in r.stderr, r.stderr
    single = user / "one.toml"
    single.write_text(f'schema_version = 1\nengine = "sglang"\nmodel = "Qwen/Qwen3-8B"\nport = {free_port()}\n')
    r = cli(a, user, "ab", "one", "one", "--host", tb, "--sim", "--plan", "quick", "--yes")
    on = ", ".join(sorted([ta, tb]))
    assert r.returncode == 1 and f"tuning campaign {jid} of deployments on {on}" in r.stderr, r.stderr
    assert engines(a) and engines(b)  # the candidate's deployment serves on both nodes

    # the campaign's process killed under its wrapper: no report, no exit event
    job = __import__("asyncio").run(jobs.find(LocalHost(), "tune", jid))
    state = Path(job.dir) / "state.json"
    kids = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True).stdout.split()
    assert kids, "the campaign's process is not running"
    for k in kids:
        os.kill(int(k), signal.SIGKILL)
    st = json.loads(state.read_text())
    assert [(c["name"], c["state"]) for c in st["candidates"]] == [
        (BASE, "measured"),
        (FLEX, "running"),
        (BIG, "skipped"),
    ], st
    assert st["live"]["candidate"] == FLEX and st["live"]["run_id"]  # its deployment is still up

    r = cli(a, user, "tune", "--attach", jid, "--json", str(out), timeout=scaled(400))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-4000:]
    assert "restarting it to resume" in r.stderr and "resumed (restart 1): 1 measurement(s) kept" in r.stderr
    assert "(left by this campaign)" in r.stderr, r.stderr[-4000:]
    print(r.stdout)
    rep = json.loads(out.read_text())
    assert rep["kind"] == "tune" and rep["status"] == "completed" and rep["resumes"] == 1
    assert rep["host"] == f"deployments on {', '.join(sorted([ta, tb]))}"
    by = {c["name"]: c for c in rep["candidates"]}
    # the base is not measured again; the interrupted candidate is redone on a fresh deployment
    assert [bool(la.get("interrupted")) for la in by[BASE]["launches"]] == [False]
    assert [bool(la.get("interrupted")) for la in by[FLEX]["launches"]] == [True, False]
    assert len(by[BASE]["measurements"]) == 1 and len(by[FLEX]["measurements"]) == 1
    assert by[BIG]["state"] == "skipped" and by[BIG]["findings"][0].startswith("skipped: "), by[BIG]
    for name in (BASE, FLEX):
        c = by[name]
        assert c["state"] == "measured" and c["capacity"] and c["steps"][0]["concurrency"] == 1, c
        assert c["tp"] == 16 and c["tok_s_per_gpu"] and c["startup_s"], c
        # the head's serving command, as the plan shows it (the runtime's simulator on the nodes)
        assert c["argv"][:3] == ["tunedeck-host", "sim", "sglang"] and "--nnodes=2" in c["argv"], c["argv"]
    assert rep["winner"] == BASE and rep["ranking"] == [BASE, FLEX], rep["ranking"]  # fa3 beats flex_attention
    assert rep["winner_diff"] == [] and f"winner: {BASE}" in r.stdout
    # every level ran on the head against the deployment, its result mirrored here
    results = json.loads(cli(a, user, "results", "list", "--json").stdout)
    assert results and all(x["deployment"] and x["target"] == ta for x in results), results
    assert all(x["client_where"] == "host" for x in results)
    # every deployment stopped (the one the killed process left too), every GPU free
    deps = json.loads(cli(a, user, "runs", "--deployments", "--json").stdout)
    assert len(deps) == 3 and all(d["status"] == "stopped" for d in deps), deps
    assert a.gpus_used() == [0] * 8 and b.gpus_used() == [0] * 8
    assert not engines(a) and not engines(b)
    ent = json.loads(cli(a, user, "journal", "list", "--kind", "tune", "--json").stdout)[-1]
    assert ent["id"] == rep["campaign"] and ent["status"] == "completed" and ent["winner"] == BASE


def test_a_lost_link_to_the_head_during_a_level_is_ridden_out_as_an_ab_of_deployments_does(ns_hosts, tmp_path: Path):
    """The operator's link to the head is cut (its SSH traffic dropped; the nodes still reach each
    other) while a level runs there: the level goes on on the head, the campaign's follow of it
    says the link is lost in the job's log, resumes at its offset once the link is back, and the
    campaign completes with every request of that level."""
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.services import jobs

    a, b = ns_hosts(2)
    user = sg_profile(tmp_path, a, b)
    out = tmp_path / "tune.json"
    cmd = [
        "tune",
        BASE,
        "--sim",
        "--vary",
        "attention.backend=flex_attention",
        "--slo",
        "ttft_p90:3000",
        "--repeats-max",
        "1",
    ]
    # one level (C=1) a candidate, long enough (4 requests of 150 tokens, ~10 s) to cut the link in
    level = ["--output-len", "150", "--prompts-per-c", "1", "--min-prompts", "4", "--max-steps", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tunedeck", *cmd, *level, "--yes", "--json", str(out)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=a.sshd.client_env(PYTHONPATH=str(REPO), TUNEDECK_PROFILES=str(user)),
    )
    seen: list[str] = []
    deadline = time.monotonic() + scaled(240)
    assert proc.stderr is not None
    try:
        for line in proc.stderr:  # the base's level has started on the head
            seen.append(line)
            if f"[{BASE} #1] warmup (" in line:
                break
            assert time.monotonic() < deadline and proc.poll() is None, "".join(seen)
        jid = re.search(r"campaign job (\S+) runs on this machine", "".join(seen)).group(1)  # type: ignore[union-attr]
        job = __import__("asyncio").run(jobs.find(LocalHost(), "tune", jid))
        log = Path(job.dir) / "log"
        a.cut_operator()
        cut = time.monotonic()
        try:
            until(lambda: "(attempt 1)" in log.read_text(errors="replace"), timeout=scaled(30))
            print(f"the campaign's follow of the level told the loss {time.monotonic() - cut:.1f} s after the cut")
        finally:
            a.restore_operator()
        back = time.monotonic()
        until(lambda: "the host answers again" in log.read_text(errors="replace"), timeout=scaled(60))
        print(f"... and the link back {time.monotonic() - back:.1f} s after it returned")
        _out, err = proc.communicate(timeout=scaled(240))
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(seen) + err
    assert proc.returncode == 0, err[-4000:]
    text = log.read_text(errors="replace")
    assert f"following {a.sshd.remote_home}/bench/" in text, text[-3000:]
    rep = json.loads(out.read_text())
    assert rep["status"] == "completed" and rep["ranking"] == [BASE, FLEX], rep["ranking"]
    step = next(c for c in rep["candidates"] if c["name"] == BASE)["steps"][0]["summary"]
    assert step["completed"] == 4 and not step.get("failed"), step
    assert a.gpus_used() == [0] * 8 and b.gpus_used() == [0] * 8
