"""The fleet over real sshd instances on loopback: two "GPU hosts" (two sshd on different ports,
each with its own simulated GPUs) and one that is not there (a closed port), with
``tunedeck status`` and with the fleet dashboard. One SSH connection and one host sampler per
host; the failed host shows its reason while the others update; a host that goes away and
comes back recovers by itself."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import REPO
from tests.integration.test_ab_ssh import remote_shims
from tests.integration.test_sampler import _sampler_procs
from tests.simfix import free_port
from tests.sshd import ROOT_USER, SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.sshfix import quick_host, second_sshd  # noqa: F401  (fixture)
from tests.ui.test_ui_fleet import cell
from tests.ui.test_ui_status import until
from tunedeck.collectors.fleet import fleet_members
from tunedeck.ui.fleet_app import FleetApp
from tunedeck.widgets.fleet_table import FleetNotes, FleetTable

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(240)]


@pytest.fixture
def hosts(sshd: SshdServer, second_sshd: SshdServer, tmp_path: Path) -> Iterator[tuple[SshdServer, SshdServer]]:
    second_sshd.start()
    second_sshd.admit(sshd)  # the sshd fixture's client home logs in on both
    remote_shims(sshd, tmp_path / "sim-a")
    remote_shims(second_sshd, tmp_path / "sim-b")
    yield sshd, second_sshd
    second_sshd.start()
    second_sshd.kill_sessions()


def test_status_of_two_hosts_and_a_closed_port(hosts: tuple[SshdServer, SshdServer]):
    a, b = hosts
    closed = f"{ROOT_USER}@127.0.0.1:{free_port()}"
    nokey = f"nosuchuser@127.0.0.1:{a.port}"
    targets = [a.target(ROOT_USER), b.target(ROOT_USER), closed, nokey]
    argv = [sys.executable, "-m", "tunedeck", "status", "--json"] + [x for t in targets for x in ("--host", t)]
    r = subprocess.run(
        argv, cwd=REPO, env=a.client_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=180
    )
    assert r.returncode == 3, r.stderr
    out = json.loads(r.stdout)["hosts"]
    assert [h["target"] for h in out] == targets
    for h in out[:2]:
        assert h["gpu_state"] == "ok" and len(h["gpus"]) == 8, h
        assert h["host"]["mem_total"] > 0 and h["host_error"] == ""
    assert out[2]["error"]["kind"] == "unreachable" and "refused" in out[2]["error"]["message"]
    assert out[3]["error"]["kind"] == "auth-failed"


async def test_fleet_dashboard_over_sshd_one_connection_and_sampler_per_host_failed_host_and_recovery(
    hosts: tuple[SshdServer, SshdServer],
):
    from tunedeck.hostops.ssh import SshHost

    a, b = hosts
    ta, tb = a.target(ROOT_USER), b.target(ROOT_USER)
    tc = f"{ROOT_USER}@127.0.0.1:{free_port()}"

    def make_host(t: str) -> SshHost:
        return quick_host(t, backoff_base=0.1)

    members = fleet_members([ta, tb, tc], interval=0.5, make_host=make_host)
    for m in members:
        m.sources.gpu.sampler.max_backoff = 2.0  # a host that comes back is found within seconds
    # a sample's timeout well above what a loaded machine takes (a 5-s one read "no answer" for a
    # live host once, beside a CPU hog and the full suite): the hosts that fail here are refused
    # or stopped, which is found at once, not by a timeout
    app = FleetApp(members, interval=0.5, sample_timeout=15, backoff=lambda attempt: 1.0, keymap={})
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.screen.query_one(FleetTable)
            notes = app.screen.query_one(FleetNotes)
            await until(
                pilot,
                lambda: cell(table, f"host:{ta}", "gpus") == "8" and cell(table, f"host:{tb}", "gpus") == "8",
                timeout=120,
            )
            assert cell(table, f"host:{ta}", "state") == "ok" and cell(table, f"host:{tb}", "state") == "ok"
            await until(pilot, lambda: cell(table, f"host:{tc}", "state") == "unreachable", timeout=30)
            # hosts by their shortest unique name: these differ by port alone
            assert f"{tc.split('@')[-1]}: unreachable: " in str(notes.content), str(notes.content)
            assert "refused" in str(notes.content)
            # one connection and one sampler per host
            assert len(a.session_pids(ROOT_USER)) == 1 and len(b.session_pids(ROOT_USER)) == 1
            assert len(_sampler_procs(a)) == 1 and len(_sampler_procs(b)) == 1
            # the GPUs of one host, expanded
            table.focus()
            table.move_cursor(row=1)
            await pilot.press("e")
            assert cell(table, f"gpu:{tb}:7", "host") == "  └ GPU 7"

            # b goes away: its row says so, a keeps updating
            b.stop()
            await until(pilot, lambda: cell(table, f"host:{tb}", "state") in ("unreachable", "lost"), timeout=30)
            assert str(notes.content).count("\n") >= 1 and tb.split("@")[-1] in str(notes.content)
            t0 = app.latest[ta].gpu.time
            await until(pilot, lambda: app.latest[ta].gpu.time > t0 + 1, timeout=15)
            assert cell(table, f"host:{ta}", "state") == "ok"

            # b comes back: it recovers by itself, on one connection and one sampler again
            b.start()
            await until(pilot, lambda: cell(table, f"host:{tb}", "state") == "ok", timeout=60)
            tb_time = app.latest[tb].gpu.time
            await until(pilot, lambda: app.latest[tb].gpu.time > tb_time, timeout=15)
            assert len(b.session_pids(ROOT_USER)) == 1 and len(_sampler_procs(b)) == 1
            assert cell(table, f"host:{tc}", "state") == "unreachable"
    finally:
        deadline = time.monotonic() + 30
        while (_sampler_procs(a) or _sampler_procs(b)) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert not _sampler_procs(a) and not _sampler_procs(b)  # leaving ends them on every host
