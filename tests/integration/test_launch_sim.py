"""Launch the simulated engines on the demo host: ready, stop frees GPU memory, faults diagnosed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.clifix import run_cli
from tests.conftest import REPO
from tests.integration.test_launcher import free_port
from tests.waits import scaled
from tunedeck.hostops import launcher as L
from tunedeck.hostops import runstore
from tunedeck.hostops.launcher import demo_argv
from tunedeck.hostops.tracker import wait_ready
from tunedeck.profiles.builder import build_command
from tunedeck.profiles.store import ProfileStore
from tunedeck.services.targets import get_host

pytestmark = pytest.mark.timeout(120)


async def gpu_used(host) -> list[float]:
    mem = await L.gpu_memory_used(host)
    assert mem is not None, "the demo host has a (simulated) nvidia-smi"
    return [mem[k] for k in sorted(mem)]


@pytest.fixture
async def demo():
    host = get_host(None, demo=True)
    yield host
    for run in await L.list_host_runs(host):
        if run.alive:
            rec = runstore.RunStore().load(run.run_id)
            await L.stop_run(host, rec, grace=2, gpu_wait=5)


def sim_command(name: str, *extra: str) -> tuple[list[str], dict[str, str], str, int]:
    # a free port: the machine may run other servers on the engines' default ports
    prof = ProfileStore().get(name).with_(port=free_port())
    cmd = build_command(prof, demo=True)
    return demo_argv(list(cmd.argv)) + list(extra), cmd.env_dict, prof.engine, prof.effective_port


@pytest.mark.parametrize("name", ["sglang-base", "vllm-baseline"])
async def test_sim_ready_then_stop_frees_gpu(demo, name):
    idle = await gpu_used(demo)
    argv, env, engine, port = sim_command(name, "--sim-load-seconds", "3")
    rec = await L.launch(demo, argv, env, engine=engine, port=port, profile=name)
    seen_mem: list[tuple[float, ...]] = []
    final = await wait_ready(
        demo,
        rec,
        timeout=60,
        stall_after=30,
        gpu_interval=0.5,
        on_update=lambda s: seen_mem.append(s.gpu_memory),
    )
    assert final.state == "ready", final
    loaded = await gpu_used(demo)
    assert sum(loaded) > sum(idle) + 1024  # weights, KV cache and graphs are resident
    assert any(m and sum(m) > sum(idle) for m in [*seen_mem, final.gpu_memory]), seen_mem  # memory climbed
    tl = runstore.RunStore().load(rec.run_id).timeline
    phases = [e["phase"] for e in tl if "phase" in e]
    assert {"weight-loading", "kv-cache", "graph-capture", "ready"} <= set(phases)
    res = await L.stop_run(demo, rec, grace=10, gpu_wait=20)
    assert res.state == "stopped" and res.gpu_released is True, res
    assert await gpu_used(demo) == idle
    assert res.gpu_freed_mib and res.gpu_freed_mib > 1024


@pytest.mark.parametrize(
    "name,fault,cause",
    [
        ("sglang-base", "oom", r"out of memory|not enough memory"),
        ("vllm-baseline", "oom", r"out of memory|KV cache|GPU memory"),
        ("sglang-base", "nccl", r"NCCL error"),
        ("vllm-baseline", "nccl", r"NCCL error"),
        ("sglang-base", "port", r"port \d+ already in use"),
        ("vllm-baseline", "port", r"already in use"),
        ("sglang-base", "hang", r"^stalled"),
        ("vllm-baseline", "hang", r"^stalled"),
    ],
)
async def test_sim_faults_diagnosed(demo, name, fault, cause):
    argv, env, engine, port = sim_command(name, "--sim-load-seconds", "2", "--sim-fault", fault)
    rec = await L.launch(demo, argv, env, engine=engine, port=port, profile=f"{name}-{fault}")
    final = await wait_ready(demo, rec, timeout=60, stall_after=scaled(6) if fault == "hang" else 30, gpu_interval=0.5)
    want = "stalled" if fault == "hang" else "failed"
    assert final.state == want, final
    assert re.search(cause, final.diagnosis, re.I), final.diagnosis
    assert final.proof
    if fault == "hang":
        # alive and holding its GPUs: what it holds is in the diagnosis
        assert final.stalled and final.phase == "graph-capture"
        assert final.gpu_memory and "holds GPU 0" in final.diagnosis and "GiB" in final.diagnosis, final
    else:
        # the proof is the root exception line (or the fatal message), never a wrapper
        for w in ("Received sigquit", "See root cause above", "Scheduler hit an exception", "failed to start"):
            assert w not in final.proof, final.proof
    stored = runstore.RunStore().load(rec.run_id)
    assert stored.status == want and stored.diagnosis == final.diagnosis


def _demo_cli(folder: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``tunedeck`` run in ``folder`` (away from the checkout), the simulator loading in 2 s."""
    env = dict(os.environ, TUNEDECK_SIM_LOAD_S="2", PYTHONPATH=str(REPO))
    return functools.partial(run_cli, env=env, cwd=folder, timeout=90)


@contextlib.contextmanager
def _stopped_with_the_gpus_freed(td: Callable[..., subprocess.CompletedProcess[str]]) -> Iterator[None]:
    """Plain ``tunedeck stop --demo --yes`` at the end of the block: it must stop the block's runs
    and leave the simulated GPUs' memory as it was before."""
    gpu_memory = ("sim", "smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits")
    idle = td(*gpu_memory).stdout
    try:
        yield
    finally:
        s = td("stop", "--demo", "--yes")
    assert s.returncode == 0, s.stderr
    assert "stopped" in s.stdout and "GPU memory freed" in s.stdout
    assert td(*gpu_memory).stdout == idle


def test_sim_hang_is_stalled_and_plain_stop_frees_the_gpus(tmp_path):
    """launch --sim-fault hang --wait → stalled (exit 4) with its GPU memory; runs says stalled;
    `tunedeck stop --demo --yes` (no run id) stops it and the GPUs are idle again."""
    td = _demo_cli(tmp_path)
    argv, _, _, port = sim_command("sglang-base", "--sim-load-seconds", "2", "--sim-fault", "hang")
    with _stopped_with_the_gpus_freed(td):
        r = td("launch", "--demo", "--wait", "--stall-after", "3", "--json", "--port", str(port), "--cmd", *argv)
        assert r.returncode == 4, r.stdout + r.stderr
        out = json.loads(r.stdout)
        assert out["progress"]["state"] == "stalled" and out["run"]["status"] == "stalled"
        assert "holds GPU 0" in out["progress"]["diagnosis"] and sum(out["progress"]["gpu_memory"]) > 1024
        assert f"tunedeck stop {out['run']['run_id']} --demo" in r.stderr
        rid = out["run"]["run_id"]
        runs = json.loads(td("runs", "--demo", "--json").stdout)
        assert [x["status"] for x in runs if x["run_id"] == rid] == ["stalled"]
        # a second launch is refused, naming the stalled run and the command that stops it
        r2 = td("launch", "sglang-base", "--demo", "--port", str(free_port()))
        assert r2.returncode != 0 and f"tunedeck stop {rid} --demo" in r2.stderr, r2.stderr
        # the status screen's server rows say the same (not a bare "down")
        st = json.loads(td("status", "--demo", "--json").stdout)
        assert [x["state"] for x in st["servers"] if x["run_id"] == rid] == ["stalled"], st["servers"]


def test_cli_done_when(tmp_path):
    """launch sglang-base --demo --wait → 0; status shows it ready; stop → GPU memory idle."""
    td = _demo_cli(tmp_path)
    with _stopped_with_the_gpus_freed(td):
        r = td("launch", "sglang-base", "--demo", "--wait", "--port", str(free_port()))
        assert r.returncode == 0, r.stderr
        st = json.loads(td("status", "--demo", "--json").stdout)
        servers = [s for s in st["servers"] if s["name"] == "sglang-base"]
        assert servers and servers[0]["state"] == "ready", st["servers"]


async def test_runs_finds_a_stall_nobody_watched(demo, monkeypatch):
    """Launched without --wait and hung: `runs` alone says stalled, with what the GPUs hold."""
    from tunedeck.commands import runs as runs_cmd

    argv, env, engine, port = sim_command("sglang-base", "--sim-load-seconds", "1", "--sim-fault", "hang")
    rec = await L.launch(demo, argv, env, engine=engine, port=port, profile="unwatched-hang")
    try:
        log = Path(rec.run_dir) / "log"
        for _ in range(100):  # until the hang: graph capture begun, then silence
            if "CUDA graph begin" in log.read_text(errors="replace"):
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        store = runstore.RunStore()
        monkeypatch.setattr(runs_cmd, "STALL_AFTER", 600.0)
        recs = await runs_cmd.refresh_readiness(demo, store, [store.load(rec.run_id)])
        assert recs[0].status == "starting"  # quiet for less than the window: not judged yet
        old = time.time() - 700
        os.utime(log, (old, old))
        recs = await runs_cmd.refresh_readiness(demo, store, [store.load(rec.run_id)])
        assert recs[0].status == "stalled", recs[0]
        assert re.search(r"no log output for 1[12] min", recs[0].diagnosis) and "holds GPU" in recs[0].diagnosis
        assert store.load(rec.run_id).status == "stalled"
    finally:
        res = await L.stop_run(demo, runstore.RunStore().load(rec.run_id), grace=5, gpu_wait=20)
        assert res.state == "stopped"
