"""Ready on the run's own evidence, dead runs failed everywhere: over a real sshd on loopback.

The port check reads the host's ``/proc/net/tcp{,6}`` and ``/proc/PID/fd`` through the SSH link;
the run is the simulator (this checkout's, run by the host's Python), detached in its run folder.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.test_launcher import free_port
from tests.integration.test_ready_demo import squatter  # noqa: F401  (fixture)
from tests.sshd import ROOT_USER, SshdServer, cli, sshd, sshd_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(300)]


def sim_cmd(port: int, *extra: str) -> list[str]:
    """``launch`` arguments that run this checkout's simulator on the host (the same machine)."""
    return [
        "--env", f"PYTHONPATH={REPO}", "--allow-dangerous-env", "--cmd", sys.executable, "-m", "tunedeck", "sim",
        "sglang", "--model-path", "Qwen/Qwen3-8B", "--tp-size", "2", "--port", str(port), *extra,
    ]  # fmt: skip


def test_ssh_port_held_by_another_server_preflight_names_it_and_the_run_fails(sshd: SshdServer, squatter, tmp_path):  # type: ignore[no-untyped-def]
    port, hits = squatter
    target = sshd.target(ROOT_USER)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "squat.toml").write_text(
        f'schema_version = 1\nengine = "sglang"\nmodel = "Qwen/Qwen3-8B"\ntp = 2\nport = {port}\n'
    )
    r = cli(sshd, profiles, "preflight", "squat", "--host", target, "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    port_errors = [f for f in json.loads(r.stdout)["findings"] if f["code"] == "port.in-use"]
    assert len(port_errors) == 1 and port_errors[0]["severity"] == "error", r.stdout
    assert f"port {port} is already in use on {target} by pid {os.getpid()} (" in port_errors[0]["message"]

    r = cli(
        sshd, profiles, "launch", "--host", target, "--wait", "--json", "--timeout", "150",
        *sim_cmd(port, "--sim-load-seconds", "6"),
    )  # fmt: skip
    try:
        assert r.returncode == 1, r.stderr[-3000:]
        assert "/health" in hits
        out = json.loads(r.stdout)
        assert out["progress"]["state"] == "failed" and out["run"]["status"] == "failed"
        assert f"failed: port {port} already in use" in r.stderr and "ready after" not in r.stderr
        rid = out["run"]["run_id"]
        rows = json.loads(cli(sshd, profiles, "journal", "list", "--json", "--kind", "launch").stdout)
        assert [(e["id"], e["status"]) for e in rows] == [(rid, "failed")]
    finally:
        cli(sshd, profiles, "stop", "--host", target, "--yes", "--grace", "2")


def test_ssh_served_then_crashed_run_reads_failed_with_its_cause(sshd: SshdServer, tmp_path: Path) -> None:
    target = sshd.target(ROOT_USER)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    port = free_port()
    r = cli(
        sshd, profiles, "launch", "--host", target, "--wait", "--json", "--timeout", "150",
        *sim_cmd(port, "--sim-load-seconds", "2", "--sim-fault", "crash", "--sim-crash-after", "3"),
    )  # fmt: skip
    try:
        assert r.returncode == 0, r.stderr[-3000:]
        out = json.loads(r.stdout)
        rid, run_dir = out["run"]["run_id"], out["run"]["run_dir"]
        assert run_dir.startswith(str(sshd.remote_home))
        end = time.monotonic() + 60
        while not (Path(run_dir) / "rc").exists():  # it dies; nothing follows it
            assert time.monotonic() < end
            time.sleep(0.2)
        cause = "RuntimeError: CUDA error: an illegal memory access was encountered"
        r = cli(sshd, profiles, "runs", "--host", target, "--json")
        assert r.returncode == 0, r.stderr[-2000:]
        run = {x["run_id"]: x for x in json.loads(r.stdout)}[rid]
        assert run["status"] == "failed" and run["diagnosis"] == cause and run["rc"] == 137
        rows = json.loads(cli(sshd, profiles, "journal", "list", "--json", "--kind", "launch").stdout)
        assert [(e["id"], e["status"], e.get("corrects"), e["diagnosis"]) for e in rows] == [
            (rid, "failed", "ready", cause)
        ]
    finally:
        cli(sshd, profiles, "stop", "--host", target, "--yes", "--grace", "2")
