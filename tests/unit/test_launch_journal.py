"""`tunedeck launch --wait` lands in the tuning journal (README: every launch is journaled)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.integration.test_launcher import free_port

pytestmark = pytest.mark.timeout(120)


def test_launch_wait_is_recorded_in_the_journal(tmp_path):
    env = {**os.environ, "TUNEDECK_SIM_LOAD_S": "1", "PYTHONPATH": str(REPO)}

    def td(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*tunedeck_cmd(), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90
        )

    r = td("launch", "sglang-base", "--demo", "--wait", "--port", str(free_port()))
    try:
        assert r.returncode == 0, r.stderr
        run_id = r.stderr.split("launched run ", 1)[1].split()[0]
        rows = json.loads(td("journal", "list", "--json").stdout)
        launches = [e for e in rows if e.get("kind") == "launch"]
        assert [e["id"] for e in launches] == [run_id]
        e = launches[0]
        assert e["status"] == "ready" and e["profile"] == "sglang-base" and e["host"] == "demo"
        assert e["startup_s"] > 0 and e["server_log"].endswith(f"/runs/{run_id}/log")
        assert any(t.get("event") == "process-start" for t in e["timeline"])
    finally:
        s = td("stop", "--demo", "--yes")
    assert s.returncode == 0, s.stderr
