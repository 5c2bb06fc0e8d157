"""`tunedeck ab` over a real sshd on loopback: the servers run on the "remote" host (the
simulator behind an engine-shaped ``python``), the benchmarks run here through SSH port
forwards, and nothing is left running afterwards."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from tests.clifix import run_cli
from tests.ports import free_port
from tests.simfix_ab import ab_profiles, assert_b_wins_unless_busy
from tests.sshd import ROOT_USER, SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(300)]


def remote_shims(sshd: SshdServer, sim_state: Path) -> Path:
    """``simpython`` (``-m sglang.launch_server`` → the simulated SGLang) and ``nvidia-smi``
    (the simulated GPUs), both with this test's own simulator state."""
    q = shlex.quote
    head = (
        "#!/bin/sh\n"
        f"PYTHONPATH={q(str(REPO))}; export PYTHONPATH\n"
        f"TUNEDECK_SIM_STATE={q(str(sim_state))}; export TUNEDECK_SIM_STATE\n"
        "TUNEDECK_SIM_LOAD_S=1; export TUNEDECK_SIM_LOAD_S\n"
    )
    py = q(sys.executable)
    files = {
        "nvidia-smi": head + f'exec {py} -m tunedeck.sim.smi "$@"\n',
        "simpython": head + 'if [ "$1" = -m ] && [ "$2" = sglang.launch_server ]; then shift 2; '
        f'exec {py} -m tunedeck sim sglang "$@"; fi\nexec {py} "$@"\n',
    }
    for name, text in files.items():
        p = sshd.shim_dir / name
        p.write_text(text)
        p.chmod(0o755)
    return sshd.shim_dir / "simpython"


async def remote_state(sshd: SshdServer) -> tuple[list, list | None]:
    """What runs on the "remote" host, read on this machine (it is the same machine): the run
    folders under the sshd session's TUNEDECK_HOME and the simulated GPUs' processes."""
    from tunedeck.hostops import launcher
    from tunedeck.hostops.localhost import LocalHost

    path = f"{sshd.shim_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    host = LocalHost("remote-view", env_overlay={"TUNEDECK_HOME": str(sshd.remote_home), "PATH": path})
    alive = [h for h in await launcher.list_host_runs(host) if h.alive]
    apps = await launcher.compute_apps(host)
    return alive, apps


def test_ab_over_ssh(sshd: SshdServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    user = tmp_path / "profiles"
    ab_profiles(user, "s", free_port(), python=str(remote_shims(sshd, tmp_path / "remote-sim")))
    env = sshd.client_env(TUNEDECK_PROFILES=str(user))
    target = sshd.target(ROOT_USER)  # uid 0: the remote side runs this machine's Python
    r = run_cli("ab", "s-base", "s-tuned", "--host", target, "--plan", "quick", "--yes", "--json", env=env, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    assert rep["status"] == "completed" and rep["host"] == target
    assert_b_wins_unless_busy(rep)
    for side in ("a", "b"):
        run = rep[side]["runs"][0]
        assert run["server_log"].startswith(str(sshd.remote_home))  # the server ran on the "remote" host
        assert [lv["concurrency"] for lv in run["levels"]] == [1, 16]
    assert "GPU memory freed" in r.stderr
    alive, apps = asyncio.run(remote_state(sshd))
    assert alive == [] and apps == []
