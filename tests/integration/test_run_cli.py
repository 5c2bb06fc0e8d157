"""launch / runs / logs / stop from the command line (subprocesses, LocalHost, fake server)."""

from __future__ import annotations

import functools
import json
import sys

import pytest

from tests.clifix import FAKE, launch_fake, run_cli
from tests.ports import free_port

pytestmark = pytest.mark.timeout(90)


td = functools.partial(run_cli, timeout=60)


def test_launch_wait_runs_logs_stop():
    port = free_port()
    r = td(*launch_fake(port, 1))
    try:
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        rid = out["run"]["run_id"]
        assert out["progress"]["state"] == "ready" and out["run"]["status"] == "ready"
        assert "weight-loading" in r.stderr  # the live progress line
        r = td("runs", "--json")
        runs = json.loads(r.stdout)
        assert [x["run_id"] for x in runs] == [rid] and runs[0]["port"] == port
        r = td("logs", rid[:6])
        assert r.returncode == 0 and "The server is fired up and ready to roll!" in r.stdout
        r = td("launch", "--cmd", "sleep", "1")
        assert r.returncode != 0 and "refused" in r.stderr and rid in r.stderr
    finally:
        r = td("stop", "--yes", "--json", "--grace", "5")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["state"] == "stopped" and res["run_id"] == rid
    r = td("runs")
    assert "stopped" in r.stdout
    r = td("stop", "--yes")
    assert r.returncode != 0 and "no running server" in r.stderr


def test_launch_wait_failure_exit_code():
    port = free_port()
    r = td(*launch_fake(port, 0.3, "--fault", "oom", json_out=False))
    assert r.returncode == 1
    assert "failed: CUDA out of memory" in r.stderr and "OutOfMemoryError" in r.stderr


@pytest.mark.parametrize(
    "args,msg",
    [
        (["launch"], "give a profile NAME or --cmd"),
        (["launch", "--cmd", "sleep", "1", "--env", "1BAD=x"], None),
        (["launch", "--env", "BAD NAME=x", "--cmd", "sleep", "1"], "invalid environment variable name"),
        (["stop", "--yes", "deadbeef"], "not found"),
        (["logs", "nope"], "not found"),
    ],
)
def test_bad_input(args, msg):
    r = td(*args)
    if msg is None:  # everything after --cmd is the command itself
        assert r.returncode == 0
        td("stop", "--yes", "--grace", "1")
        return
    assert r.returncode != 0 and msg in r.stderr and "Traceback" not in r.stderr


def test_logs_follow_of_an_ended_run_prints_and_exits():
    port = free_port()
    r = td(
        "launch", "--wait", "--timeout", "30", "--cmd", sys.executable, FAKE, "--engine", "sglang", "--port", str(port)
    )
    assert r.returncode == 0, r.stderr
    r = td("stop", "--yes", "--grace", "5")
    assert r.returncode == 0, r.stderr
    # a stopped run writes nothing more: --follow prints the log and ends instead of hanging
    r = td("logs", "--follow", timeout=20)
    assert r.returncode == 0 and "The server is fired up and ready to roll!" in r.stdout
    assert "has ended (stopped); not following" in r.stderr
    r = td("logs", "--follow", "--json", timeout=20)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0 and rows and all(set(x) == {"run_id", "offset", "line"} for x in rows)
    assert any("fired up" in x["line"] for x in rows)


def test_plain_stop_stops_a_live_run_whatever_its_record_says():
    """A run an older tunedeck marked "failed" while its process held the GPUs: `runs`
    shows it stalled, a second launch names it and the command to stop it, and plain
    `tunedeck stop` (no id) stops it."""
    from tunedeck.hostops.runstore import RunStore

    port = free_port()
    r = td(*launch_fake(port, 0.3, "--fault", "hang", wait=False))
    assert r.returncode == 0, r.stderr
    rid = json.loads(r.stdout)["run_id"]
    try:
        store = RunStore()
        rec = store.load(rid)
        rec.status, rec.diagnosis = "failed", "stalled: no log output for 5 min"
        store.save(rec)
        runs = json.loads(td("runs", "--json").stdout)
        assert [x["status"] for x in runs if x["run_id"] == rid] == ["stalled"]
        r = td("launch", "--cmd", "sleep", "1")
        assert r.returncode != 0 and rid in r.stderr and f"tunedeck stop {rid}" in r.stderr
    finally:
        r = td("stop", "--yes", "--json", "--grace", "3")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "stopped" and [x["run_id"] for x in out["runs"]] == [rid]
    assert RunStore().load(rid).status == "stopped"
