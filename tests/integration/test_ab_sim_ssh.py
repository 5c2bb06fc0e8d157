"""`tunedeck ab A B --host H [--sim]` over a real sshd on a host with nothing installed: pre-flight
runs on both sides before anything is stopped (a failing side refuses the A/B and the running
server keeps running), and `--sim` runs both sides on the host-side runtime's simulator."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.integration.test_ab_ssh import remote_state
from tests.simfix import free_port
from tests.sshd import ROOT_USER, SshdServer, cli, sshd, sshd_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(400)]


def _profile(folder: Path, name: str, port: int, *, tp: int = 2, extra: str = "") -> None:
    (folder / f"{name}.toml").write_text(
        "schema_version = 1\n"
        'engine = "sglang"\n'
        'model = "Qwen/Qwen3-8B"\n'
        f"tp = {tp}\n"
        f"port = {port}\n"
        "\n[env]\n"
        'TUNEDECK_SIM_LOAD_S = "0.5"\n'
        f"\n[flags]\n{extra}"
    )


def _alive(server: SshdServer) -> list[str]:
    alive, _apps = asyncio.run(remote_state(server))
    return [h.run_id for h in alive]


def test_ab_preflights_both_sides_before_stopping_and_sim_runs_the_simulator(sshd: SshdServer, tmp_path: Path):
    for name in ("nvidia-smi", "tdpython", "simpython"):  # a bare host: no engine, no nvidia-smi
        (sshd.shim_dir / name).unlink(missing_ok=True)
    port = free_port()
    user = tmp_path / "profiles"
    user.mkdir()
    _profile(user, "one", port)
    _profile(user, "two", port, extra="chunked-prefill-size = 4096\n")
    _profile(user, "huge", port, tp=16)  # more GPUs than the host's 8 simulated ones
    target = sshd.target(ROOT_USER)
    r = cli(sshd, user, "launch", "one", "--host", target, "--sim", "--wait", "--timeout", "120", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    running = json.loads(r.stdout)["run"]["run_id"]
    try:
        # the real engine is not installed: pre-flight says so and nothing is stopped
        r = cli(sshd, user, "ab", "one", "two", "--host", target, "--plan", "quick", "--yes")
        assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
        err = r.stderr.strip().splitlines()[-1]
        assert "pre-flight failed" in err and "nothing stopped" in err and "A (one)" in err, err
        assert "does not run" in err, err
        assert _alive(sshd) == [running]
        # --sim, but one side cannot run there: refused the same way, before anything is stopped
        r = cli(sshd, user, "ab", "one", "huge", "--host", target, "--sim", "--plan", "quick", "--yes")
        assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
        err = r.stderr.strip().splitlines()[-1]
        assert "B (huge): pre-flight failed" in err and "nothing stopped" in err, err
        assert _alive(sshd) == [running]
        # --sim: both sides run on the runtime's simulator (the running server stopped first, --yes)
        r = cli(sshd, user, "ab", "one", "two", "--host", target, "--sim", "--plan", "quick", "--yes", "--json")
        assert r.returncode == 0, r.stderr[-3000:]
        rep = json.loads(r.stdout)
        assert rep["status"] == "completed", rep.get("error")
        for side in ("a", "b"):
            argv = rep[side]["argv"]
            assert argv[1] == "-I" and argv[2].startswith(f"{sshd.remote_home}/lib/tunedeck-host-"), argv
            assert argv[3:5] == ["sim", "sglang"], argv
            assert [lv["concurrency"] for lv in rep[side]["runs"][0]["levels"]] == [1, 16]
        assert _alive(sshd) == []
    finally:
        cli(sshd, user, "stop", "--host", target, "--sim", "--yes", "--grace", "5")
