"""`--sim` on an SSH target with nothing installed but the system Python: the simulator comes
in tunedeck's host-side runtime, its GPUs live in the host's ${TUNEDECK_HOME}/sim and its
simulated nvidia-smi is what `status --sim` and `stop --sim` query."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.simfix import free_port
from tests.sshd import ROOT_USER, SshdServer, cli, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.sshfix import launch_sim

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(300)]


def test_sim_on_a_bare_ssh_host_launches_serves_shows_its_gpus_and_stops(sshd: SshdServer, tmp_path: Path):
    for name in ("nvidia-smi", "tdpython"):  # nothing of tunedeck's, no nvidia-smi on the host
        (sshd.shim_dir / name).unlink(missing_ok=True)
    port = free_port()
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "one.toml").write_text(
        "schema_version = 1\n"
        'engine = "sglang"\n'
        'model = "Qwen/Qwen3-8B"\n'
        "tp = 2\n"
        f"port = {port}\n"
        "\n[flags]\n"
        "enable-metrics = true\n"
    )
    target = sshd.target(ROOT_USER)
    out = launch_sim(sshd, user, "one", 1)
    argv = out["run"]["argv"]
    home = str(sshd.remote_home)
    # the runtime's `sim sglang`, run by the host's own python3
    assert argv[1] == "-I" and argv[2].startswith(f"{home}/lib/tunedeck-host-") and argv[3:5] == ["sim", "sglang"]
    run_id = out["run"]["run_id"]
    try:
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=json.dumps({"model": "Qwen/Qwen3-8B", "prompt": "hello", "max_tokens": 4}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            done = json.loads(resp.read())
        assert done["usage"]["completion_tokens"] == 4 and done["choices"][0]["text"]

        r = cli(sshd, user, "status", "--host", target, "--sim", "--json")
        assert r.returncode == 0, r.stderr[-2000:]
        st = json.loads(r.stdout)
        assert st["gpu_state"] == "ok" and len(st["gpus"]) == 8, st
        used = [g["memory_used"] for g in st["gpus"]]
        assert all(u > 0 for u in used[:2]) and used[2:] == [0] * 6, used
        assert (sshd.remote_home / "sim" / "bin" / "nvidia-smi").is_file()
        assert list((sshd.remote_home / "sim" / "servers").glob("*.json"))
        # several hosts at once, each with its own simulated GPUs
        r = cli(sshd, user, "status", "--host", target, "--host", "local", "--sim", "--json")
        assert r.returncode in (0, 1), r.stderr[-2000:]
        hosts = json.loads(r.stdout)["hosts"]
        assert [h["target"] for h in hosts] == [target, "local"], hosts
        assert [g["memory_used"] > 0 for g in hosts[0]["gpus"]] == [True] * 2 + [False] * 6, hosts[0]
        assert hosts[1]["gpu_state"] == "ok", hosts[1]
    finally:
        r = cli(sshd, user, "stop", run_id, "--host", target, "--sim", "--yes", "--grace", "5", "--json")
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
    r = cli(sshd, user, "status", "--host", target, "--sim", "--json")
    st = json.loads(r.stdout)
    assert [g["memory_used"] for g in st["gpus"]] == [0] * 8, st


async def test_the_dashboard_with_sim_shows_a_bare_hosts_simulated_gpus(sshd: SshdServer):
    """`tunedeck --host T --sim`: the host sampler gives a host with no nvidia-smi the simulated
    one, so the GPU table fills with that host's simulated GPUs."""
    from tests.ui.test_ui_status import SIZE, until
    from tunedeck.collectors.sources import default_sources
    from tunedeck.hostops.ssh import SshHost
    from tunedeck.ui.app import make_app
    from tunedeck.widgets.gpu_table import GpuTable

    for name in ("nvidia-smi", "tdpython"):
        (sshd.shim_dir / name).unlink(missing_ok=True)
    host = SshHost(sshd.target(ROOT_USER), retry_attempts=1)
    app = make_app(host, sources=default_sources(host, interval=0.5, sim=True), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(GpuTable)
        await until(pilot, lambda: table.row_count == 8, timeout=60)
        assert table.get_cell("gpu-0", "name").plain.startswith("H")  # the simulated H100/H200
    assert (sshd.remote_home / "sim" / "bin" / "nvidia-smi").is_file()
