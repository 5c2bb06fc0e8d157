"""The Runs view reads its records (one file a run; the store only grows) off the event loop."""

from __future__ import annotations

import threading

import pytest
from textual.app import App

from tests.waits import until_async
from tunedeck.hostops import runstore
from tunedeck.ui.screens.runs import RunsScreen

pytestmark = pytest.mark.timeout(60)


async def test_the_runs_view_reads_its_records_in_a_thread_and_shows_them(monkeypatch):
    for i, status in enumerate(("ready", "failed")):
        runstore.RunStore().save(
            runstore.RunRecord(f"7f3a00{i:02d}", "local", ["x"], profile=f"p{i}", status=status, created=1.0 + i)
        )
    readers: list[bool] = []
    real = runstore.RunStore.all

    def watched(self: runstore.RunStore, target: str | None = None) -> list[runstore.RunRecord]:
        readers.append(threading.current_thread() is threading.main_thread())
        return real(self, target)

    monkeypatch.setattr(runstore.RunStore, "all", watched)
    app = App()
    async with app.run_test(size=(140, 30)) as pilot:
        scr = RunsScreen()
        await app.push_screen(scr)
        await until_async(lambda: scr.loads, pilot=pilot)
        assert scr.table.shown_keys == ["7f3a0001", "7f3a0000"]  # newest first
        await pilot.press("f5")  # read again, in a thread too
        await until_async(lambda: scr.loads == 2, pilot=pilot)
    assert readers == [False, False]
