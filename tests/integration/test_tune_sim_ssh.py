"""`tunedeck tune BASE --host H --sim` over a real sshd on a host with nothing installed: the
campaign runs in the shipped runtime, its candidates on the runtime's simulator; an impossible
candidate is skipped by pre-flight; the results are mirrored and the campaign journaled here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clifix import tune_small
from tests.integration.test_ab_sim_ssh import _alive, _profile
from tests.simfix import free_port
from tests.sshd import ROOT_USER, SshdServer, cli, sshd, sshd_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(400)]


def test_tune_over_ssh_on_the_runtime_simulator(sshd: SshdServer, tmp_path: Path):
    for name in ("nvidia-smi", "tdpython", "simpython"):  # a bare host: no engine, no nvidia-smi
        (sshd.shim_dir / name).unlink(missing_ok=True)
    user = tmp_path / "profiles"
    user.mkdir()
    _profile(user, "one", free_port())
    target = sshd.target(ROOT_USER)
    out = tmp_path / "tune.json"
    r = cli(
        sshd,
        user,
        "tune",
        "one",
        "--host",
        target,
        "--sim",
        "--vary",
        "tp=2,16",  # 16 GPUs: more than the host's 8 simulated ones
        "--vary",
        "attention.backend=flex_attention",
        *tune_small(out),
        timeout=360,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rep = json.loads(out.read_text())
    by = {c["name"]: c for c in rep["candidates"]}
    assert set(by) == {"one", "one+attention.backend=flex_attention", "one+tp=16,attention.backend=flex_attention"}
    for name in ("one+tp=16,attention.backend=flex_attention",):
        assert by[name]["state"] == "skipped", by[name]
        assert by[name]["findings"][0].startswith("skipped: pre-flight failed:") and "16" in by[name]["findings"][0]
    for name in ("one", "one+attention.backend=flex_attention"):
        argv = by[name]["argv"]
        assert argv[1] == "-I" and argv[2].startswith(f"{sshd.remote_home}/lib/tunedeck-host-"), argv
        assert argv[3:5] == ["sim", "sglang"], argv
        assert by[name]["capacity"] and by[name]["steps"][0]["concurrency"] == 1
    assert rep["winner"] == "one"  # fa3 is far faster than flex_attention in the simulator's model
    assert "one+tp=16,attention.backend=flex_attention: skipped: pre-flight failed" in r.stderr
    print(r.stdout)
    assert _alive(sshd) == []
    r = cli(sshd, user, "journal", "list", "--kind", "tune", "--json")
    assert json.loads(r.stdout)[-1]["winner"] == "one"
