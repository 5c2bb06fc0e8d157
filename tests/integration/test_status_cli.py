"""``tunedeck status`` as a subprocess, with a fake nvidia-smi first on PATH."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.fake_engines import SGLANG_METRICS, FakeEngine, fill
from tests.fake_smi import FakeSmi

pytestmark = pytest.mark.timeout(60)


def _env(fake: FakeSmi | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    if fake is not None:
        env["PATH"] = fake.path_env()
    return env


def _run(args: list[str], fake: FakeSmi | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*tunedeck_cmd(), "status", *args], cwd=REPO, env=_env(fake), capture_output=True, text=True, timeout=40
    )


def test_status_json_with_fake_gpus(tmp_path: Path) -> None:
    fake = FakeSmi(tmp_path, gpus=8)
    fake.set_apps("4242, GPU-fake-3, 60000, sglang::scheduler_TP3\n")
    r = _run(["--json"], fake)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {"target", "gpu_state", "gpus", "host", "servers"} <= set(data)
    assert data["target"] == "local" and data["gpu_state"] == "ok"
    assert len(data["gpus"]) == 8
    assert [g["index"] for g in data["gpus"]] == list(range(8))
    assert all(isinstance(g["utilization"], int) and g["memory_total"] == 81559 for g in data["gpus"])
    assert data["processes"] == [
        {"pid": 4242, "name": "sglang::scheduler_TP3", "gpu_uuid": "GPU-fake-3", "gpu_index": 3, "used_memory": 60000}
    ]
    host = data["host"]
    assert host["mem_total"] > 0 and host["cpu_count"] >= 1 and host["uptime"] > 0
    assert host["cpu_percent"] is None or 0 <= host["cpu_percent"] <= 100
    assert data["servers"] == []


def test_status_na_is_null(tmp_path: Path) -> None:
    fake = FakeSmi(tmp_path)
    fake.set_mode("na")
    data = json.loads(_run(["--json"], fake).stdout)
    g = data["gpus"][0]
    assert g["utilization"] is None and g["power_draw"] is None and g["power_limit"] is None
    assert g["memory_used"] == 1024


@pytest.mark.parametrize("mode,state", [("exit9", "driver-not-loaded"), ("exit18", "nvml-mismatch")])
def test_status_driver_failure(tmp_path: Path, mode: str, state: str) -> None:
    fake = FakeSmi(tmp_path)
    fake.set_mode(mode)
    r = _run(["--json"], fake)
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert data["gpu_state"] == state and data["gpus"] == [] and data["gpu_message"]
    assert data["host"]["mem_total"] > 0  # the rest is still reported
    human = _run([], fake)
    assert human.returncode == 1 and "Traceback" not in human.stderr
    assert "GPUs:" in human.stdout and "Host: CPU" in human.stdout


def test_status_human_table(tmp_path: Path) -> None:
    fake = FakeSmi(tmp_path, gpus=3)
    r = _run([], fake)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.strip().startswith("GPU "))
    rows = lines[head + 1 : head + 4]
    assert [ln.split()[0] for ln in rows] == ["0", "1", "2"]
    # aligned: every row has its UTIL column where the header has it
    col = lines[head].index("UTIL")
    assert all(ln[col].isdigit() for ln in rows)
    assert any(ln.startswith("Host: CPU") for ln in lines)


async def test_status_with_servers(tmp_path: Path) -> None:
    fake = FakeSmi(tmp_path)
    async with FakeEngine("sglang", model="Qwen/Qwen3-8B") as e:
        e.metrics = fill(SGLANG_METRICS, b1=1, b2=1, b3=1, s=0.05)
        proc = await asyncio.create_subprocess_exec(
            *tunedeck_cmd(),
            "status",
            "--json",
            "--server",
            f"http://127.0.0.1:{e.port}",
            "--server",
            "vllm=127.0.0.1:1",
            cwd=REPO,
            env=_env(fake),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 40)
    assert proc.returncode == 0, err.decode()
    servers = json.loads(out)["servers"]
    assert [(s["engine"], s["state"]) for s in servers] == [("sglang", "ready"), ("vllm", "down")]
    assert servers[0]["model"] == "Qwen/Qwen3-8B" and servers[0]["running"] == 12
    assert servers[1]["running"] is None


@pytest.mark.parametrize(
    "args,words",
    [(["--server", "ftp://x"], "--server"), (["--host", "a b"], "--host"), (["--server", "http://h:99999"], "port")],
)
def test_status_bad_input(args: list[str], words: str) -> None:
    r = _run(args, None)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and words in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_status_demo_shows_eight_gpus() -> None:
    r = _run(["--demo", "--json"], None)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["gpu_state"] == "ok" and len(data["gpus"]) == 8
    assert all(g["utilization"] is not None and g["memory_used"] is not None for g in data["gpus"])
    assert data["host"]["mem_total"] > 0


def test_known_servers_from_run_folders(tmp_path: Path) -> None:
    """Live run folders on the host become servers; the model comes from the local record."""
    from tunedeck.collectors.status import RECENT_FAILURE_S, known_servers, model_from_argv, servers_of_runs
    from tunedeck.hostops.launcher import launch, list_host_runs, stop_run
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.hostops.runstore import RunStore
    from tunedeck.util.aio import run_async

    async def scenario() -> tuple:
        host = LocalHost()
        live = await launch(
            host,
            ["sh", "-c", "sleep 30", "--model-path", "Qwen/Qwen3-8B"],
            engine="sglang",
            port=30000,
            profile="qwen-fast",
            check=False,
        )
        gone = await launch(host, ["true"], engine="vllm", port=8000, check=False)
        for _ in range(50):
            runs = {r.run_id: r for r in await list_host_runs(host)}
            if gone.run_id in runs and not runs[gone.run_id].alive:
                break
            await asyncio.sleep(0.1)
        specs = await known_servers(host)
        later = servers_of_runs(host, await list_host_runs(host), now=time.time() + RECENT_FAILURE_S + 1)
        await stop_run(host, live, grace=2, gpu_wait=1)
        return live, gone, specs, later

    live, gone, specs, later = run_async(scenario())
    # the live run, and the one that ended before it served: settled from its log as failed, and
    # listed (its row reads failed with the cause) for RECENT_FAILURE_S
    assert sorted((s.name, s.engine, s.port, s.run_id, s.model) for s in specs) == sorted(
        [
            ("qwen-fast", "sglang", 30000, live.run_id, "Qwen/Qwen3-8B"),
            (gone.run_id, "vllm", 8000, gone.run_id, ""),
        ]
    )
    assert RunStore().load(gone.run_id).status == "failed"  # type: ignore[union-attr]
    assert [s.run_id for s in later] == [live.run_id]
    assert model_from_argv(["vllm", "serve", "Qwen/Qwen3-8B", "--port", "8000"]) == "Qwen/Qwen3-8B"
