"""The Runs view re-reads the host's processes while it is open: a run that served and then crashed,
with nothing following it, turns ``failed`` there with its cause (and the journal is corrected)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.integration.test_launcher import free_port
from tests.ui.test_ui_status import until
from tests.ui_text import screen_text
from tunedeck.ab.journal import Journal
from tunedeck.services.targets import get_host
from tunedeck.ui.app import make_app

pytestmark = pytest.mark.timeout(240)


def cell(table, row: str, col: str) -> str:  # type: ignore[no-untyped-def]
    return table.get_cell(row, col).plain


async def test_runs_view_turns_a_crashed_run_failed_with_its_cause(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tunedeck.ui.screens.runs import RunsScreen

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    port = free_port()
    r = subprocess.run(
        [
            *tunedeck_cmd(), "launch", "--demo", "--wait", "--json", "--timeout", "120", "--cmd", "tunedeck", "sim",
            "sglang", "--model-path", "Qwen/Qwen3-8B", "--tp-size", "2", "--port", str(port),
            "--sim-load-seconds", "1", "--sim-fault", "crash", "--sim-crash-after", "6",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    rid = json.loads(r.stdout)["run"]["run_id"]
    cause = "RuntimeError: CUDA error: an illegal memory access was encountered"
    app = make_app(get_host(None, demo=True), target="demo", demo=True, interval=0.5)
    try:
        async with app.run_test(size=(200, 40)) as pilot:
            await pilot.pause()
            await app.push_screen(RunsScreen())
            await until(pilot, lambda: isinstance(app.screen, RunsScreen) and rid in app.screen.records, timeout=20)
            runs = app.screen
            # nothing follows the run: the view's own re-read of the host's processes settles it
            await until(pilot, lambda: cell(runs.table, rid, "status") == "failed", timeout=60)
            assert cell(runs.table, rid, "cause") == cause
            # the highlighted run's advice under the table
            runs.table.move_cursor(row=runs.table.get_row_index(rid))
            await until(pilot, lambda: "advice: read the proving line" in screen_text(app), timeout=10)
            assert cause[:55] in screen_text(app)  # as shown: the column cuts a long cause
    finally:
        subprocess.run([*tunedeck_cmd(), "stop", "--demo", "--yes"], cwd=tmp_path, env=env, timeout=90)
    latest = {e["id"]: e for e in Journal().entries("launch")}
    assert latest[rid]["status"] == "failed" and latest[rid]["corrects"] == "ready"


async def test_status_screen_row_of_a_crashed_run_reads_failed_with_its_cause(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The Status screen's own poll settles a run that served and then died (nothing else follows
    it): its server row reads failed with the cause from its log, instead of vanishing; the
    one-shot `status` shows the same row."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    port = free_port()
    app = make_app(get_host(None, demo=True), target="demo", demo=True, interval=0.5)
    cause = "RuntimeError: CUDA error: an illegal memory access was encountered"
    try:
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause()
            r = subprocess.run(
                [
                    *tunedeck_cmd(), "launch", "--demo", "--wait", "--json", "--timeout", "120", "--cmd", "tunedeck",
                    "sim", "sglang", "--model-path", "Qwen/Qwen3-8B", "--tp-size", "2", "--port", str(port),
                    "--sim-load-seconds", "1", "--sim-fault", "crash", "--sim-crash-after", "8",
                ],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150,
            )  # fmt: skip
            assert r.returncode == 0, r.stderr[-3000:]
            rid = json.loads(r.stdout)["run"]["run_id"]

            def row() -> object:
                latest = app.latest.servers or ()
                return next((s for s in latest if s.run_id == rid), None)

            # launch --wait said ready; nothing follows the run now but the screen's own poll
            await until(pilot, lambda: getattr(row(), "state", None) == "failed", timeout=60)
            assert row().message == cause  # type: ignore[attr-defined]
            await until(pilot, lambda: cause[:40] in screen_text(app), timeout=10)
        out = subprocess.run(
            [*tunedeck_cmd(), "status", "--demo", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=90,
        )  # fmt: skip
        servers = {s["run_id"]: s for s in json.loads(out.stdout)["servers"]}
        assert servers[rid]["state"] == "failed" and servers[rid]["message"] == cause, servers
    finally:
        subprocess.run([*tunedeck_cmd(), "stop", "--demo", "--yes"], cwd=tmp_path, env=env, timeout=90)
