"""A 2-node SGLang deployment over real sshd: two "GPU hosts" (two sshd instances on loopback, each
with its own 8 simulated GPUs), the simulator in place of the engine (``--sim``), its ranks meeting
over TCP at ``--dist-init-addr``.

- ``tunedeck launch NAME --sim --wait`` runs pre-flight on both nodes, starts both detached, and
  exits 0 once the head serves; ``runs``, ``logs`` (merged, a node tag on every line, ``--node``)
  and ``stop`` (one confirmation: none without a terminal or --yes) treat it as one unit, and the
  stop leaves all 16 GPUs free;
- a rank killed mid-load is named as the first failure (not the head, which fails later in NCCL);
- a worker that never joins gives the engine's timeout on the head, diagnosed "node B never joined".
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.clifix import read_until, start_cli
from tests.conftest import REPO
from tests.simfix import free_port
from tests.sshd import ROOT_USER, SshdServer, cli, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.sshfix import second_sshd  # noqa: F401  (fixture)
from tests.waits import until
from tunedeck.bench.workloads.base import estimate_tokens

#: what a node runs tunedeck's host-side runtime with: a bare Python, no tunedeck package
SYSTEM_PYTHON = "/usr/bin/python3"

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(300)]


def node_shims(server: SshdServer, *, load_s: float = 2.0) -> None:
    """``tdpython``: the system Python, nothing installed (the simulator comes in tunedeck's
    host-side runtime, its GPUs in the node's ``${TUNEDECK_HOME}/sim``), with the simulator's
    timings. No ``nvidia-smi`` on the node: ``--sim`` gives it the simulated one. A ``nojoin`` file
    next to the shims makes the engine never start (a node stuck before its ranks come up)."""
    q = shlex.quote
    nojoin = q(str(server.shim_dir / "nojoin"))
    text = (
        "#!/bin/sh\n"
        f"TUNEDECK_SIM_LOAD_S={load_s}; export TUNEDECK_SIM_LOAD_S\n"
        "TUNEDECK_SIM_NCCL_TIMEOUT_S=3; export TUNEDECK_SIM_NCCL_TIMEOUT_S\n"
        f'case "$*" in *" sim sglang "*) [ -e {nojoin} ] && exec sleep 300;; esac\n'
        f'exec {q(SYSTEM_PYTHON)} "$@"\n'
    )
    p = server.shim_dir / "tdpython"
    p.write_text(text)
    p.chmod(0o755)
    for gone in ("nojoin", "nvidia-smi"):
        (server.shim_dir / gone).unlink(missing_ok=True)


def sim_state(server: SshdServer) -> Path:
    """The node's simulated GPUs: ``${TUNEDECK_HOME}/sim`` there."""
    return server.remote_home / "sim"


@pytest.fixture
def nodes(sshd: SshdServer, second_sshd: SshdServer, tmp_path: Path) -> Iterator[tuple[SshdServer, SshdServer]]:
    second_sshd.start()
    second_sshd.admit(sshd)
    node_shims(sshd)
    node_shims(second_sshd)
    yield sshd, second_sshd
    (second_sshd.shim_dir / "nojoin").unlink(missing_ok=True)
    for s in (sshd, second_sshd):
        for pid, _ in s.processes_matching(str(s.remote_home / "lib")):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    second_sshd.kill_sessions()


def write_profile(
    tmp_path: Path, a: SshdServer, b: SshdServer, *, dist_timeout: int = 60, name: str = "r1-2n", extra: str = ""
) -> Path:
    user = tmp_path / "profiles"
    user.mkdir(exist_ok=True)
    (user / f"{name}.toml").write_text(
        "schema_version = 1\n"
        'engine = "sglang"\n'
        'model = "deepseek-ai/DeepSeek-V2-Lite-Chat"\n'
        "tp = 16\n"
        'python = "tdpython"\n'
        f"port = {free_port()}\n"
        f'nodes = ["{a.target(ROOT_USER)}", "{b.target(ROOT_USER)}"]\n'
        "\n[deploy]\n"
        'head_address = "127.0.0.1"\n'
        f"port = {free_port()}\n"
        "\n[flags]\n"
        "enable-metrics = true\n"
        f"dist-timeout = {dist_timeout}\n" + extra
    )
    return user


def gpus_used(state: Path) -> list[int]:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tunedeck",
            "sim",
            "smi",
            "--query-gpu=index,memory.used",
            "--format=csv,noheader,nounits",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "TUNEDECK_SIM_STATE": str(state), "PYTHONPATH": str(REPO)},
    )
    return [int(line.split(",")[1]) for line in r.stdout.splitlines() if line.strip()]


def test_two_node_sglang_launches_ready_and_stops_with_all_16_gpus_freed(nodes, tmp_path: Path):
    a, b = nodes
    user = write_profile(tmp_path, a, b)
    r = cli(a, user, "launch", "r1-2n", "--sim", "--wait", "--timeout", "150", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["state"] == "ready", out
    dep = out["deployment"]
    ta, tb = a.target(ROOT_USER), b.target(ROOT_USER)
    assert [(m["node"], m["role"]) for m in dep["members"]] == [(ta, "head"), (tb, "worker")]
    # each node's run folder is on its own host, each host's 8 GPUs are held
    # the worker node may finish its own load a moment after the head serves (a loaded machine)
    for node in (a, b):
        until(lambda n=node: len(gpus_used(sim_state(n))) == 8 and all(u > 0 for u in gpus_used(sim_state(n))), 30)

    r = cli(a, user, "runs", dep["deploy_id"], "--json")
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert [m["alive"] for m in shown["members"]] == [True, True]
    # launched again while it runs: refused, and its own engines are not "processes tunedeck did not start"
    r = cli(a, user, "launch", "r1-2n", "--sim", "--json")
    assert r.returncode != 0 and "is still running there" in r.stderr, r.stderr[-2000:]
    assert "did not start" not in r.stderr, r.stderr[-2000:]
    r = cli(a, user, "runs", "--deployments")
    assert dep["deploy_id"] in r.stdout and tb in r.stdout

    r = cli(a, user, "logs", dep["deploy_id"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert all(line.startswith("[") for line in lines) and any(line.startswith(f"[{tb}") for line in lines)
    assert any("The server is fired up and ready to roll!" in line and line.startswith(f"[{ta}") for line in lines)
    r = cli(a, user, "logs", dep["deploy_id"], "--node", tb, "--json")
    got = json.loads(r.stdout)["lines"]
    assert got and {x["node"] for x in got} == {tb}
    # the second node's schedulers are the global ranks TP8..TP15, as SGLang names them
    worker = "\n".join(x["line"] for x in got)
    assert " TP8]" in worker and " TP15]" in worker and " TP0]" not in worker, worker[-2000:]

    # a benchmark on the deployment runs on its head node, against the port the head serves
    r = cli(a, user, "bench", "--deployment", "nope")
    assert r.returncode == 2 and "--deployment nope: no such deployment" in r.stderr, r.stderr
    r = cli(a, user, "bench", "--deployment", dep["deploy_id"][:8], "--host", tb)
    assert r.returncode == 2 and "drop --url/--host/--demo" in r.stderr, r.stderr
    bench = ("--concurrency", "2", "--num-prompts", "6", "--input-len", "32", "--output-len", "8", "--warmup", "0")
    r = cli(a, user, "bench", "--deployment", dep["deploy_id"][:8], *bench, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["completed"] == 6 and summary["failed"] == 0, summary
    assert summary["client"]["where"] == "host"
    r = cli(a, user, "results", "list", "--json")
    row = next(x for x in json.loads(r.stdout) if x["run_id"] == summary["run_id"])
    assert row["deployment"] == dep["deploy_id"] and row["target"] == ta and row["client_where"] == "host", row
    assert summary["deployment"]["nodes"] == [ta, tb]
    r = cli(a, user, "results", "show", summary["run_id"])
    assert f"deployment {dep['deploy_id']} (r1-2n): 2 nodes, the client ran on {ta}" in r.stdout, r.stdout

    # `logs --follow`: every node's log from its start, then live, until the deployment ends
    follow = subprocess.Popen(
        [sys.executable, "-m", "tunedeck", "logs", dep["deploy_id"], "--follow", "--json"],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=a.client_env(PYTHONPATH=str(REPO), TUNEDECK_PROFILES=str(user)),
    )

    # no terminal and no --yes: nothing is stopped
    r = cli(a, user, "stop", dep["deploy_id"])
    assert r.returncode == 1 and "Not stopped" in r.stderr
    assert all(u > 0 for u in gpus_used(sim_state(b)))
    r = cli(a, user, "stop", dep["deploy_id"], "--yes", "--grace", "5", "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    try:
        fout, ferr = follow.communicate(timeout=120)
    finally:
        follow.kill()
    assert follow.returncode == 0 and f"deployment {dep['deploy_id']} has ended (stopped)" in ferr, ferr[-3000:]
    followed = [json.loads(x) for x in fout.splitlines()]
    assert {x["node"] for x in followed} == {ta, tb}
    assert any("The server is fired up and ready to roll!" in x["line"] for x in followed if x["node"] == ta)
    res = json.loads(r.stdout)
    assert res["state"] == "stopped" and res["gpus_free"] == {ta: True, tb: True}
    assert [m["node"] for m in res["members"]] == [ta, tb]  # the head first, then the worker
    assert gpus_used(sim_state(a)) == [0] * 8 and gpus_used(sim_state(b)) == [0] * 8


def ab_of_deployments(
    tmp_path: Path, a: SshdServer, b: SshdServer, name: str, *, output_len: int, warmup: int, levels: str
) -> tuple[Path, Path]:
    """The profiles of an A/B of two deployments, r1-2n and r1-2n-steps (the same with 4 continuous
    decode steps), and its plan ``NAME`` (32-token prompts, ``output_len`` tokens, ``levels``)."""
    user = write_profile(tmp_path, a, b)
    write_profile(tmp_path, a, b, name="r1-2n-steps", extra="num-continuous-decode-steps = 4\n")
    plan = tmp_path / f"{name}.toml"
    plan.write_text(
        f'name = "{name}"\nendpoint = "completions"\ninput_len = 32\noutput_len = {output_len}\nignore_eos = true\n'
        f"temperature = 0.0\nseed = 1\nwarmup = {warmup}\n\n" + levels
    )
    return user, plan


def start_ab(a: SshdServer, user: Path, plan: Path, *extra: str) -> subprocess.Popen[str]:
    """``tunedeck ab`` of the profiles r1-2n and r1-2n-steps (``write_profile``) on the simulator with
    ``plan``, started here as ``a``'s client, without a terminal."""
    env = a.client_env(PYTHONPATH=str(REPO), TUNEDECK_PROFILES=str(user))
    return start_cli(
        "ab", "r1-2n", "r1-2n-steps", "--sim", "--plan", str(plan), *extra, env=env, stdin=subprocess.DEVNULL
    )


def _plan_and_hosts(a: SshdServer, b: SshdServer, user: Path):
    from tunedeck.hostops.ssh import SshHost
    from tunedeck.profiles.deploy import build_deployment
    from tunedeck.profiles.store import ProfileStore

    os.environ["TUNEDECK_PROFILES"] = str(user)
    prof = ProfileStore().get("r1-2n")
    plan = build_deployment(prof, sim=True)
    hosts = {n: SshHost(n, keepalive_interval=1, keepalive_count_max=3, retry_attempts=3) for n in plan.nodes}
    return plan, hosts


async def test_a_rank_killed_mid_load_is_named_as_the_first_failure(nodes, tmp_path: Path, monkeypatch):
    from tunedeck.services import deploy as D

    a, b = nodes
    node_shims(a, load_s=20)
    node_shims(b, load_s=20)
    user = write_profile(tmp_path, a, b)
    monkeypatch.setenv("TUNEDECK_PROFILES", str(user))
    plan, hosts = _plan_and_hosts(a, b, user)
    try:
        findings = await D.preflight(plan, hosts, python="tdpython")
        assert not [f for f in findings if f.severity == "error"], findings
        # the head was reached from the worker on the rendezvous port (the check ran, it said nothing)
        assert not [f for f in findings if f.check == "reachability"], findings
        rec = await D.launch(plan, hosts)
        assert rec.status == "starting" and len(rec.members) == 2
        worker_log = Path(D.RunStore().load(rec.members[1].run_id).run_dir) / "log"
        deadline = time.monotonic() + 60
        while b"Load weight begin" not in (worker_log.read_bytes() if worker_log.exists() else b""):
            assert time.monotonic() < deadline, "the worker never began to load"
            await asyncio.sleep(0.2)
        victims = b.engine_pids()  # node B's own engine: never another test's
        assert victims
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        verdict, states = await D.watch(rec, hosts, timeout=60, settle=5)
        assert verdict.state == "failed", verdict
        assert verdict.first_failed == b.target(ROOT_USER), verdict
        assert verdict.diagnosis.startswith(f"node B ({b.target(ROOT_USER)}) failed first"), verdict
        head = next(s for s in states if s.rank == 0)
        assert head.kind == "nccl" and head.failed_at > next(s for s in states if s.rank == 1).failed_at
        assert D.DeploymentStore().load(rec.deploy_id).first_failed == b.target(ROOT_USER)
        _, free = await D.stop(rec, hosts, grace=2, gpu_wait=20)
        assert all(v is True for v in free.values()), free
    finally:
        await D.close_hosts(hosts)


async def test_a_worker_that_never_joins_is_diagnosed_by_name(nodes, tmp_path: Path, monkeypatch):
    from tunedeck.services import deploy as D

    a, b = nodes
    (b.shim_dir / "nojoin").write_text("")
    user = write_profile(tmp_path, a, b, dist_timeout=6)
    monkeypatch.setenv("TUNEDECK_PROFILES", str(user))
    plan, hosts = _plan_and_hosts(a, b, user)
    try:
        rec = await D.launch(plan, hosts)
        verdict, states = await D.watch(rec, hosts, timeout=90, settle=1)
        assert verdict.state == "failed", verdict
        tb = b.target(ROOT_USER)
        assert verdict.never_joined == (tb,), (verdict, states)
        assert verdict.diagnosis.startswith(f"node B ({tb}) never joined: "), verdict.diagnosis
        assert "Timed out after 7 seconds waiting for clients. 8/16 clients joined." in verdict.proof
        results, free = await D.stop(rec, hosts, grace=2, gpu_wait=20)
        assert all(r.state in ("stopped", "exited") for r in results), results
        assert all(v is True for v in free.values()), free
    finally:
        await D.close_hosts(hosts)


def test_ab_of_two_deployments_each_benchmark_on_the_head_then_both_stopped(nodes, tmp_path: Path):
    """`tunedeck ab A B` with two multi-node profiles: the campaign runs detached here (it reaches
    both nodes), each side is a deployment launched and stopped as one unit, each benchmark runs
    host-side on the head, and the comparison shows the flag that differs. The plan's dataset
    file is read here when the A/B starts and placed on the head once: removed here right after
    the start, every level still sends its prompts, read on the head."""
    import hashlib

    from tunedeck.bench import store

    a, b = nodes
    rows = [{"prompt": f"question {i}: " + "why " * (4 + 3 * i), "output_len": 8} for i in range(6)]
    data = "".join(json.dumps(x) + "\n" for x in rows).encode()
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_bytes(data)
    levels = f'[[level]]\nconcurrency = 2\nnum_prompts = 6\n\n[workload]\nname = "custom"\npath = "{dataset.name}"\n'
    user, plan = ab_of_deployments(tmp_path, a, b, "tiny", output_len=8, warmup=1, levels=levels)
    proc = start_ab(a, user, plan, "--json")
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        read_until(proc.stderr, lambda line: "runs detached on this machine" in line, seen, 120)
        dataset.unlink()  # read and placed when the A/B started: the levels do not need it here
        out, err = proc.communicate(timeout=280)
    finally:
        proc.kill()
    assert proc.returncode == 0, "".join(seen) + err[-4000:]
    rep = json.loads(out)
    assert rep["status"] == "completed", rep.get("error")
    assert [x["side"] for x in rep["launches"]] == ["A", "B"] and all(x["ready"] for x in rep["launches"])
    ta, tb = a.target(ROOT_USER), b.target(ROOT_USER)
    results = json.loads(cli(a, user, "results", "list", "--json").stdout)
    ab_runs = [x for x in results if x["deployment"]]
    assert len(ab_runs) == 2 and {x["target"] for x in ab_runs} == {ta}
    assert all(x["client_where"] == "host" and x["completed"] == 6 for x in ab_runs), ab_runs
    sha = hashlib.sha256(data).hexdigest()
    placed = a.remote_home / "data" / sha
    assert placed.read_bytes() == data and not (b.remote_home / "data").exists()  # the head only
    for x in ab_runs:
        wl = store.load_run(x["run_id"]).meta["workload"]
        assert wl["name"] == "custom" and wl["params"]["file_sha256"] == sha, wl
        samples = store.read_samples(x["run_id"])
        assert sorted(s["prompt_len"] for s in samples) == sorted(estimate_tokens(r["prompt"]) for r in rows)
    assert not rep["left_running"]
    # both deployments stopped, all 16 GPUs free, nothing of theirs alive on either node
    deps = json.loads(cli(a, user, "runs", "--deployments", "--json").stdout)
    assert len(deps) == 2 and all(d["status"] == "stopped" for d in deps), deps
    assert gpus_used(sim_state(a)) == [0] * 8 and gpus_used(sim_state(b)) == [0] * 8
    text = cli(a, user, "compare", rep["id"]).stdout
    assert "num-continuous-decode-steps" in text, text
    assert tb


def test_ab_of_deployments_survives_its_terminal_and_cancel_stops_the_live_side(nodes, tmp_path: Path):
    """The foreground detaches (SIGINT) while A benchmarks; the campaign goes on; `--cancel --yes`
    stops it, and the deployment it had launched is stopped with its GPUs freed."""
    import re

    a, b = nodes
    levels = "[[level]]\nconcurrency = 1\nnum_prompts = 400\n"
    user, plan = ab_of_deployments(tmp_path, a, b, "long", output_len=400, warmup=0, levels=levels)
    proc = start_ab(a, user, plan)
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        read_until(proc.stderr, lambda line: "benchmark C=1" in line or "requests" in line, seen, 200)
        m = re.search(r"A/B job (\S+) of two deployments", "".join(seen))
        assert m is not None, "".join(seen)
        job = m.group(1)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "detached" in err, "".join(seen) + err
    # the campaign goes on without its terminal
    r = cli(a, user, "runs", "--deployments", "--json")
    deps = json.loads(r.stdout)
    assert len(deps) == 1 and deps[0]["status"] == "ready", deps
    r = cli(a, user, "ab", "--cancel", job)
    assert r.returncode == 1 and "not cancelled" in r.stderr  # no terminal, no --yes: no
    r = cli(a, user, "ab", "--cancel", job, "--yes", "--quiet", "--json", timeout=280)
    deps = json.loads(cli(a, user, "runs", "--deployments", "--json").stdout)
    assert [d["status"] for d in deps] == ["stopped"], (deps, r.stderr[-3000:])
    assert gpus_used(sim_state(a)) == [0] * 8 and gpus_used(sim_state(b)) == [0] * 8


def test_ab_of_deployments_killed_mid_level_reports_what_its_results_hold_exit_5(nodes, tmp_path: Path):
    """The A/B's process here is killed (SIGKILL: no report, no exit event) while A's second level
    runs on the head. The follow reports partial (exit 5) from what exists: A's first level, mirrored
    as it ran, and the level in flight, read from its benchmark job on the head, which runs on; the
    deployment it left is named with how to stop it. Once that level has ended there, `ab --attach`
    reads it whole."""
    import asyncio
    import re

    from tunedeck.commands.ab import EXIT_PARTIAL
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.services import jobs

    a, b = nodes
    levels = (
        "[[level]]\nconcurrency = 1\nnum_prompts = 4\noutput_len = 8\n"
        "\n[[level]]\nconcurrency = 2\nnum_prompts = 24\noutput_len = 64\n"
    )
    user, plan = ab_of_deployments(tmp_path, a, b, "two", output_len=8, warmup=0, levels=levels)
    proc = start_ab(a, user, plan, "--json")
    seen: list[str] = []
    try:
        assert proc.stderr is not None

        def second_level_measuring(line: str) -> bool:  # A's second level on the head, a request of it done
            second = any("benchmark C=2" in x for x in seen)
            return second and "[A #1]" in line and bool(re.search(r"[1-9]\d*/24 requests", line))

        read_until(proc.stderr, second_level_measuring, seen, 200)
        assert any("benchmark C=2" in x for x in seen), "".join(seen)
        jid = re.search(r"A/B job (\S+) of two deployments", "".join(seen)).group(1)  # type: ignore[union-attr]
        job = asyncio.run(jobs.find(LocalHost(), "ab", jid))
        kids = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True).stdout.split()
        assert kids, "the A/B's process is not running"
        for k in kids:  # the campaign itself, under its wrapper
            os.kill(int(k), signal.SIGKILL)
        out, err = proc.communicate(timeout=200)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_PARTIAL, "".join(seen) + err[-4000:]
    assert "partial" in err and "(exit 5)" in err and "still running after the A/B" in err, err[-3000:]
    rep = json.loads(out)
    assert rep["status"] == "partial" and rep["job_id"] == jid
    assert "level(s) read from its results here and on the head nodes" in rep["error"], rep["error"]
    levels = rep["a"]["runs"][0]["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 2], levels
    assert levels[0]["summary"]["completed"] == 4 and not levels[0]["summary"].get("partial")
    assert levels[1]["summary"]["completed"] > 0
    assert not rep["b"].get("runs") and rep["comparison"] is None
    deps = json.loads(cli(a, user, "runs", "--deployments", "--json").stdout)
    [dep] = [d for d in deps if d["status"] == "ready"]
    assert rep["left_running"] == [
        f"r1-2n (deployment {dep['deploy_id']}): left by the A/B's process; `tunedeck stop {dep['deploy_id']}` stops it"
    ], rep["left_running"]

    # the level in flight ran on to its end on the head: --attach reads it whole
    bench = a.remote_home / "bench"
    until(lambda: all((d / "rc").exists() for d in bench.iterdir() if d.is_dir()), 120, what="benchmark jobs ended")
    r = cli(a, user, "ab", "--attach", jid, "--json", "--quiet", timeout=200)
    assert r.returncode == EXIT_PARTIAL, r.stderr[-3000:]
    again = json.loads(r.stdout)["a"]["runs"][0]["levels"]
    assert again[1]["summary"]["completed"] == 24 and not again[1]["summary"].get("partial"), again[1]["summary"]
    ent = json.loads(cli(a, user, "journal", "list", "--kind", "ab", "--json").stdout)[-1]
    assert ent["id"] == rep["id"] and ent["status"] == "partial"
    r = cli(a, user, "stop", dep["deploy_id"], "--yes", timeout=200)
    assert r.returncode == 0, r.stderr[-3000:]
    assert gpus_used(sim_state(a)) == [0] * 8 and gpus_used(sim_state(b)) == [0] * 8
