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
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import REPO
from tests.simfix import free_port
from tests.sshd import ROOT_USER, SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)

#: what a node runs tunedeck's host-side runtime with: a bare Python, no tunedeck package
SYSTEM_PYTHON = "/usr/bin/python3"

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def second_sshd(sshd_server: SshdServer) -> Iterator[SshdServer]:
    base = Path(tempfile.mkdtemp(prefix="tunedeck-sshd-b-"))
    server = SshdServer(base)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


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


def write_profile(tmp_path: Path, a: SshdServer, b: SshdServer, *, dist_timeout: int = 60) -> Path:
    user = tmp_path / "profiles"
    user.mkdir(exist_ok=True)
    (user / "r1-2n.toml").write_text(
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
        f"dist-timeout = {dist_timeout}\n"
    )
    return user


def cli(a: SshdServer, user: Path, *args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=a.client_env(PYTHONPATH=str(REPO), TUNEDECK_PROFILES=str(user)),
    )


def gpus_used(state: Path) -> list[int]:
    r = subprocess.run(
        [sys.executable, "-m", "tui", "sim", "smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
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
    assert all(u > 0 for u in gpus_used(sim_state(a))) and len(gpus_used(sim_state(a))) == 8
    assert all(u > 0 for u in gpus_used(sim_state(b))) and len(gpus_used(sim_state(b))) == 8

    r = cli(a, user, "runs", dep["deploy_id"], "--json")
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert [m["alive"] for m in shown["members"]] == [True, True]
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

    # no terminal and no --yes: nothing is stopped
    r = cli(a, user, "stop", dep["deploy_id"])
    assert r.returncode == 1 and "Not stopped" in r.stderr
    assert all(u > 0 for u in gpus_used(sim_state(b)))
    r = cli(a, user, "stop", dep["deploy_id"], "--yes", "--grace", "5", "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    res = json.loads(r.stdout)
    assert res["state"] == "stopped" and res["gpus_free"] == {ta: True, tb: True}
    assert [m["node"] for m in res["members"]] == [ta, tb]  # the head first, then the worker
    assert gpus_used(sim_state(a)) == [0] * 8 and gpus_used(sim_state(b)) == [0] * 8


def _plan_and_hosts(a: SshdServer, b: SshdServer, user: Path):
    from tui.hostops.ssh import SshHost
    from tui.profiles.deploy import build_deployment
    from tui.profiles.store import ProfileStore

    os.environ["TUNEDECK_PROFILES"] = str(user)
    prof = ProfileStore().get("r1-2n")
    plan = build_deployment(prof, sim=True)
    hosts = {n: SshHost(n, keepalive_interval=1, keepalive_count_max=3, retry_attempts=3) for n in plan.nodes}
    return plan, hosts


async def test_a_rank_killed_mid_load_is_named_as_the_first_failure(nodes, tmp_path: Path, monkeypatch):
    from tui.services import deploy as D

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
        victims = [pid for pid, cl in b.processes_matching("--node-rank=1") if " sim sglang " in cl]
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
    from tui.services import deploy as D

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
