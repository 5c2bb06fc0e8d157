"""A 2-node SGLang deployment over two real sshd instances (``--sim``): its worker, which serves no
HTTP, reads ``up (worker)`` once the head is ready; with both nodes' engines killed and nothing
following them (no ``logs --follow``, no ``launch --wait``, no deployment view), the next
``runs --deployments`` re-reads the nodes' processes and reads ``failed``, within 10 s."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.integration.test_deploy_ssh import nodes, second_sshd, write_profile  # noqa: F401  (fixtures)
from tests.sshd import ROOT_USER, cli, sshd, sshd_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(300)]


def test_worker_up_once_head_ready_and_killed_nodes_read_failed_without_a_follower(nodes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, b = nodes
    user = write_profile(tmp_path, a, b)
    ta, tb = a.target(ROOT_USER), b.target(ROOT_USER)
    r = cli(a, user, "launch", "r1-2n", "--sim", "--wait", "--timeout", "150", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    dep_id = out["deployment"]["deploy_id"]
    assert out["state"] == "ready"
    assert [(m["node"], m["state"]) for m in out["members"]] == [(ta, "ready"), (tb, "up (worker)")]

    r = cli(a, user, "runs", dep_id, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    shown = json.loads(r.stdout)
    assert shown["status"] == "ready"
    assert [(m["role"], m["status"], m["alive"]) for m in shown["members"]] == [
        ("head", "ready", True),
        ("worker", "up (worker)", True),
    ]
    runs_b = json.loads(cli(a, user, "runs", "--host", tb, "--json").stdout)
    assert [(x["status"], x["deployment"]) for x in runs_b] == [("up (worker)", dep_id)]

    # both nodes' engines die; nothing follows them
    pids = a.engine_pids() + b.engine_pids()
    assert len(pids) == 2, pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    while True:
        r = cli(a, user, "runs", "--deployments", "--json")
        assert r.returncode == 0, r.stderr[-2000:]
        dep = next(d for d in json.loads(r.stdout) if d["deploy_id"] == dep_id)
        if dep["status"] == "failed":
            break
        assert time.monotonic() - killed < 10, dep
    took = time.monotonic() - killed
    assert took < 10, took
    assert "failed first: killed (SIGKILL: the OOM killer or a kill -9)" in dep["diagnosis"], dep
    print(f"runs --deployments read failed {took:.1f} s after the kill")
    assert dep["first_failed"] in (ta, tb)
    r = cli(a, user, "runs", "--deployments")
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith(dep_id))
    assert row.split()[1] == "failed", r.stdout
    r = cli(a, user, "runs", dep_id, "--json")
    shown = json.loads(r.stdout)
    assert [(m["status"], m["alive"]) for m in shown["members"]] == [("failed", False), ("failed", False)], shown
