"""Multi-node deployments over two namespaced hosts (tests/nshosts.py): each host a network
namespace with its own address, sshd and 8 simulated GPUs, joined by veth to one bridge.

- vLLM on a real Ray cluster (``ray`` from PyPI): ``tunedeck launch NAME --sim --wait`` starts the
  Ray head and worker (each pinned to its host's address, its own temp dir), waits for Ray to show
  the 16 GPUs, starts the simulated vLLM (which asks that cluster for its GPUs, holds the head's 8
  and has node B's Ray node start the workers that hold node B's 8), serves a benchmark on the head,
  and ``tunedeck stop`` leaves all 16 GPUs free and no Ray or simulator process behind;
- the head's vLLM killed: node B's workers end and its GPUs are free, its Ray node lives on;
- a worker whose Ray declares no GPU: the launch stops at the wait for Ray's GPUs; without the wait,
  vLLM fails with its own placement-group text and triage names it;
- SGLang on the same hosts: the operator's link to the worker cut for longer than the NCCL watchdog
  (its SSH traffic dropped; the network between the nodes stays up, as when a laptop's link drops)
  leaves both nodes running, and the view of the deployment comes back once the link does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
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
from tests.waits import scaled
from tunedeck.hostops.runstore import RunStore

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(420)]


def cli(a: NsHost, user: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return sshd_cli(a.sshd, user, *args, timeout=timeout)


def ray_profile(tmp_path: Path, a: NsHost, b: NsHost, *, ray_wait: int = 150) -> tuple[Path, int]:
    user = tmp_path / "profiles"
    user.mkdir(exist_ok=True)
    port = free_port()
    (user / "ray-2n.toml").write_text(
        "schema_version = 1\n"
        'engine = "vllm"\n'
        'model = "Qwen/Qwen2.5-7B-Instruct"\n'
        "tp = 8\n"
        'python = "tdpython"\n'
        f"port = {port}\n"
        f'nodes = ["{a.sshd.target(ROOT_USER)}", "{b.sshd.target(ROOT_USER)}"]\n'
        "\n[deploy]\n"
        f"port = {free_port()}\n"
        f'node_addresses = ["{a.ip}", "{b.ip}"]\n'
        "ray_num_cpus = 1\n"
        "ray_dashboard = false\n"
        f'ray_temp_dir = ["{a.ray_tmp}", "{b.ray_tmp}"]\n'
        f"ray_wait = {ray_wait}\n"
    )
    return user, port


def ours(h: NsHost, needle: str) -> list[tuple[int, str]]:
    """Processes inside host ``h`` (its namespace) whose command line holds ``needle``."""
    return [(p, c) for p, c in h.processes(needle) if not c.startswith("sshd")]


def wait_gone(hosts: list[NsHost], needle: str, timeout: float = 60) -> list[tuple[int, str]]:
    end = time.monotonic() + timeout
    left: list[tuple[int, str]] = []
    while time.monotonic() < end:
        left = [x for h in hosts for x in ours(h, needle)]
        if not left:
            return []
        time.sleep(0.5)
    return left


def test_vllm_on_a_real_ray_cluster_launches_serves_a_benchmark_and_stops_with_16_gpus_free(ns_hosts, tmp_path: Path):
    a, b = ns_hosts(2)
    user, port = ray_profile(tmp_path, a, b)
    ta, tb = a.sshd.target(ROOT_USER), b.sshd.target(ROOT_USER)
    r = cli(a, user, "launch", "ray-2n", "--sim", "--wait", "--timeout", "240", "--json")
    assert r.returncode == 0, r.stderr[-4000:] + r.stdout[-2000:]
    out = json.loads(r.stdout)
    assert out["state"] == "ready", out
    dep = out["deployment"]
    assert [(m["node"], m["kind"]) for m in dep["members"]] == [(ta, "ray-head"), (tb, "ray-worker"), (ta, "server")]
    # each Ray node runs inside its own host, pinned to that host's address
    assert any(f"--node-ip-address={a.ip}" in c for _, c in ours(a, "raylet"))
    assert any(f"--node-ip-address={b.ip}" in c for _, c in ours(b, "raylet"))
    # the engine asked the real cluster and found its 16 GPUs; this node's 8 hold the ranks it runs
    r = cli(a, user, "logs", dep["deploy_id"], "--node", ta)
    assert "Connected to Ray cluster." in r.stdout and "No current placement group found." in r.stdout, r.stdout[-3000:]
    assert "exceeds the total number of available GPUs" not in r.stdout
    assert all(u > 0 for u in a.gpus_used()) and len(a.gpus_used()) == 8
    # the other 8 bundles are on node B, held by worker processes of node B's Ray node (as Ray's
    # RayWorkerWrapper actors are), which the driver's log shows with Ray's prefix
    assert all(u > 0 for u in b.gpus_used()) and len(b.gpus_used()) == 8
    workers = ray_workers(b)
    assert len(workers) == 8, ours(b, "ray")
    assert all(f"(RayWorkerWrapper pid={p}, ip={b.ip})" in r.stdout for p in workers), r.stdout[-3000:]

    bench = cli(
        a,
        user,
        "bench",
        "--host",
        ta,
        "--port",
        str(port),
        "--python",
        "tdpython",
        "--concurrency",
        "2",
        "--num-prompts",
        "10",
        "--input-len",
        "8",
        "--output-len",
        "8",
        "--warmup",
        "0",
        "--json",
        "-",
    )
    assert bench.returncode == 0, bench.stderr[-3000:]
    s = json.loads(bench.stdout)
    assert s["completed"] == 10 and s["failed"] == 0, s

    # a long grace: the Ray head outwaits TERM, and a Ray node gets 10 s of it, not the whole grace
    # (before, the head had all of the default 30 s: 33 s). 60 s, so that the bound stands clear of
    # both: two Ray nodes' 10 s and a loaded machine's ssh round trips took up to 29.6 s
    t = time.monotonic()
    r = cli(a, user, "stop", dep["deploy_id"], "--yes", "--grace", "60", "--json")
    took = time.monotonic() - t
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    res = json.loads(r.stdout)
    assert res["state"] == "stopped" and res["gpus_free"] == {ta: True, tb: True}, res
    assert took < scaled(45), f"the stop took {took:.1f} s"
    # vLLM first, then the Ray worker, then the Ray head
    assert [(m["node"], m["kind"]) for m in res["members"]] == [(ta, "server"), (tb, "ray-worker"), (ta, "ray-head")]
    assert a.gpus_used() == [0] * 8 and b.gpus_used() == [0] * 8
    assert wait_gone([a, b], "ray") == []  # no Ray process of ours on either host (nor its workers)
    assert wait_gone([a, b], " sim ") == []  # nor the simulator's


def ray_workers(h: NsHost) -> list[int]:
    """The simulated Ray workers holding GPUs on ``h``, as its nvidia-smi lists them."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tunedeck",
            "sim",
            "smi",
            "--query-compute-apps=pid,process_name",
            "--format=csv,noheader",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "TUNEDECK_SIM_STATE": str(h.state), "PYTHONPATH": str(REPO)},
    )
    rows = [[x.strip() for x in line.split(",")] for line in r.stdout.splitlines() if line.strip()]
    return [int(p) for p, name in rows if name == "ray::RayWorkerWrapper"]


def test_vllm_on_ray_killed_frees_the_worker_nodes_gpus_while_its_ray_node_lives_on(ns_hosts, tmp_path: Path):
    a, b = ns_hosts(2)
    user, _ = ray_profile(tmp_path, a, b)
    r = cli(a, user, "launch", "ray-2n", "--sim", "--wait", "--timeout", "240", "--json")
    assert r.returncode == 0, r.stderr[-4000:] + r.stdout[-2000:]
    dep = json.loads(r.stdout)["deployment"]
    assert all(u > 0 for u in b.gpus_used())
    workers = ray_workers(b)
    assert len(workers) == 8
    # the workers live in node B's Ray node run (its process group), as the raylet's children do
    node_b = RunStore().load(dep["members"][1]["run_id"])
    assert node_b is not None and node_b.pid
    assert all(os.getpgid(p) == node_b.pid for p in workers)
    for pid, _ in ours(a, " sim vllm "):
        os.kill(pid, signal.SIGKILL)  # the driver crashes
    end = time.monotonic() + 30
    while any(b.gpus_used()) and time.monotonic() < end:
        time.sleep(0.5)
    assert b.gpus_used() == [0] * 8 and ray_workers(b) == []
    assert wait_gone([b], "RayWorkerWrapper", timeout=10) == []
    # node B's Ray node is still there
    assert ours(b, "raylet") and ours(b, " sim ray-node ")
    r = cli(a, user, "stop", dep["deploy_id"], "--yes", "--grace", "10", "--json")
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    res = json.loads(r.stdout)
    assert res["state"] == "stopped", res
    assert a.gpus_used() == [0] * 8 and b.gpus_used() == [0] * 8
    assert wait_gone([a, b], "ray") == [] and wait_gone([a, b], " sim ") == []


async def test_too_few_gpus_in_the_ray_cluster_stop_the_launch_and_vllm_names_its_placement_group(
    ns_hosts, tmp_path: Path, monkeypatch
):
    from tunedeck.hostops.ssh import SshHost
    from tunedeck.profiles.deploy import RAY_WAIT, RAY_WORKER, build_deployment
    from tunedeck.profiles.store import ProfileStore
    from tunedeck.services import deploy as D

    a, b = ns_hosts(2)
    a.write_shims(extra="TUNEDECK_SIM_RAY_PG_TIMEOUT_S=6; export TUNEDECK_SIM_RAY_PG_TIMEOUT_S\n")
    user, _ = ray_profile(tmp_path, a, b)
    monkeypatch.setenv("TUNEDECK_PROFILES", str(user))
    plan = build_deployment(ProfileStore().get("ray-2n"), sim=True)

    # the worker's Ray declares no GPU
    def no_gpus(step: D.Step) -> D.Step:
        if step.kind != RAY_WORKER or step.command is None:
            return step
        argv = tuple("--num-gpus=0" if x.startswith("--num-gpus=") else x for x in step.command.argv)
        return dataclasses.replace(step, command=dataclasses.replace(step.command, argv=argv))

    short = dataclasses.replace(plan, steps=tuple(no_gpus(s) for s in plan.steps))
    hosts = {n: SshHost(n, retry_attempts=3) for n in plan.nodes}
    ta = a.sshd.target(ROOT_USER)
    try:
        # 1. tunedeck's own wait for Ray's GPUs refuses to start vLLM, and stops what it started;
        # it ends once both nodes joined and the figures held (not at its deadline, which is long
        # enough for the head's own 8 GPUs to show on a loaded 2-core machine)
        t0 = time.monotonic()
        rec = await D.launch(short, hosts, ray_wait=scaled(120), ray_poll=1)
        assert time.monotonic() - t0 < scaled(100), "the wait went on to its deadline"
        assert rec.status == "failed", rec
        assert rec.diagnosis is not None and "Ray shows 8 of the 16 GPUs the placement needs" in rec.diagnosis
        assert "2 of the 2 nodes joined" in rec.diagnosis
        tb = b.sshd.target(ROOT_USER)
        assert f"1 node joined without GPUs: {tb};" in rec.diagnosis, rec.diagnosis  # named by Ray's node address
        assert rec.first_failed == tb
        assert wait_gone([a, b], "ray") == []

        # 2. with a wait that asks only for the head's 8 GPUs (as a hand-started vLLM might be),
        # vLLM asks the cluster for its 16 and fails in its own words
        unwaited = dataclasses.replace(
            short, steps=tuple(dataclasses.replace(s, gpus=8) if s.kind == RAY_WAIT else s for s in short.steps)
        )
        rec = await D.launch(unwaited, hosts)
        assert rec.status == "starting", rec
        verdict, states = await D.watch(rec, hosts, timeout=150, settle=2)
        assert verdict.state == "failed", (verdict, states)
        assert verdict.first_failed == ta, verdict
        assert verdict.proof is not None and "Cannot provide a placement group requiring 16.0 GPUs" in verdict.proof
        head = next(s for s in states if s.serves)
        assert head.kind == "ray-gpus", head
        assert verdict.diagnosis is not None and "placement group" in verdict.diagnosis, verdict
        _, free = await D.stop(rec, hosts, grace=5, gpu_wait=20)
        assert all(v is True for v in free.values()), free
        assert wait_gone([a, b], "ray") == []
    finally:
        await D.close_hosts(hosts)


async def test_sglang_link_cut_to_one_node_leaves_it_running_and_the_view_reconnects(
    ns_hosts, tmp_path: Path, monkeypatch
):
    from tunedeck.hostops.launcher import process_alive
    from tunedeck.hostops.runstore import RunStore
    from tunedeck.hostops.ssh import SshHost

    a, b = ns_hosts(2)
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "sg-2n.toml").write_text(
        "schema_version = 1\n"
        'engine = "sglang"\n'
        'model = "deepseek-ai/DeepSeek-V2-Lite-Chat"\n'
        "tp = 16\n"
        'python = "tdpython"\n'
        f"port = {free_port()}\n"
        f'nodes = ["{a.sshd.target(ROOT_USER)}", "{b.sshd.target(ROOT_USER)}"]\n'
        "\n[deploy]\n"
        f'head_address = "{a.ip}"\n'
        f"port = {free_port()}\n"
        "\n[flags]\n"
        "dist-timeout = 90\n"
    )
    tb = b.sshd.target(ROOT_USER)
    r = cli(a, user, "launch", "sg-2n", "--sim", "--wait", "--timeout", "180", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    dep = json.loads(r.stdout)["deployment"]
    assert all(u > 0 for u in a.gpus_used()) and all(u > 0 for u in b.gpus_used())
    worker = RunStore().load(dep["members"][1]["run_id"])
    assert worker is not None and worker.pid
    view = SshHost(tb, keepalive_interval=1, keepalive_count_max=3, connect_timeout=5, retry_attempts=None)
    try:
        assert await process_alive(view, worker.pid, worker.starttime)
        b.cut_operator()  # the operator's link to node B; the nodes still reach each other
        try:
            # the view notices (keepalive) while the link is down ...
            cut_at = time.monotonic()
            with pytest.raises(Exception):  # noqa: B017 - any failure of the dead link will do
                await asyncio.wait_for(view.run(["true"], timeout=5), timeout=12)
            # a drop longer than the simulator's NCCL watchdog: the ranks must not notice it
            await asyncio.sleep(max(0.0, 15 - (time.monotonic() - cut_at)))
            # ... and the deployment goes on on both nodes
            log = Path(worker.run_dir) / "log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
            assert ours(a, " sim sglang ") and ours(b, " sim sglang "), tail
        finally:
            b.restore_operator()
        end = time.monotonic() + 90
        while True:  # the same view reconnects once the link is back
            try:
                if await process_alive(view, worker.pid, worker.starttime):
                    break
            except Exception as e:  # noqa: BLE001 - still reconnecting: try again until the deadline
                assert time.monotonic() < end, f"no reconnect after the link came back: {e}"
            await asyncio.sleep(1)
    finally:
        await view.close()
    r = cli(a, user, "runs", dep["deploy_id"], "--json")
    assert r.returncode == 0, r.stderr
    assert [m["alive"] for m in json.loads(r.stdout)["members"]] == [True, True]
    # after the cut it still serves: a benchmark on the deployment runs on its head
    load = ("--concurrency", "2", "--num-prompts", "6", "--input-len", "32", "--output-len", "8", "--warmup", "0")
    r = cli(a, user, "bench", "--deployment", dep["deploy_id"], *load, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["completed"] == 6 and summary["client"]["where"] == "host", summary
    assert summary["deployment"]["id"] == dep["deploy_id"]
    r = cli(a, user, "stop", dep["deploy_id"], "--yes", "--grace", "5", "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    assert json.loads(r.stdout)["state"] == "stopped"
    assert a.gpus_used() == [0] * 8 and b.gpus_used() == [0] * 8
