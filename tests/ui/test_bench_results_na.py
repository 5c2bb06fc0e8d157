"""Stored-results table: a run where no request finished shows TTFT N/A, not 0.0."""

from __future__ import annotations

import json

import pytest
from textual.app import App
from textual.widgets import DataTable

from tests.waits import until_async
from tunedeck.bench.store import run_dir
from tunedeck.ui.screens.bench_setup import BenchSetupScreen

pytestmark = pytest.mark.timeout(60)


def _write(run_id: str, summary: dict) -> None:
    d = run_dir(run_id)
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"run_id": run_id, "max_concurrency": 1, "profile": "p"}))
    (d / "summary.json").write_text(json.dumps(summary))


async def test_zero_completed_run_shows_na_ttft():
    _write(
        "20260101-000000-aaaaaa",
        {"completed": 0, "failed": 1, "output_throughput": 0.0, "median_ttft_ms": 0.0, "partial": True},
    )
    _write("20260101-000001-bbbbbb", {"completed": 5, "failed": 0, "output_throughput": 64.2, "median_ttft_ms": 6.9})
    app = App()
    async with app.run_test(size=(140, 42)) as pilot:
        app.push_screen(BenchSetupScreen())
        await until_async(lambda: getattr(app.screen, "results_read", 0), pilot=pilot)
        table = app.screen.query_one("#bs-results", DataTable)
        assert table.get_cell("20260101-000000-aaaaaa", "ttft") == "N/A"
        assert table.get_cell("20260101-000000-aaaaaa", "state") == "partial"
        assert table.get_cell("20260101-000001-bbbbbb", "ttft") == "6.9"


async def test_stored_results_are_read_off_the_event_loop_and_shown_when_read(monkeypatch):
    """A store of a few hundred levels is a thousand small files: the screen reads them in a thread
    each time it comes back, and the keys go on meanwhile."""
    import threading

    from tunedeck.bench import store

    _write("20260101-000002-cccccc", {"completed": 3, "failed": 0, "output_throughput": 10.0, "median_ttft_ms": 5.0})
    release = threading.Event()
    readers: list[bool] = []
    real = store.list_runs

    def gated_list_runs() -> list[store.RunInfo]:
        readers.append(threading.current_thread() is threading.main_thread())
        release.wait(10)
        return real()

    monkeypatch.setattr(store, "list_runs", gated_list_runs)
    app = App()
    async with app.run_test(size=(140, 42)) as pilot:
        scr = BenchSetupScreen()
        app.push_screen(scr)
        await until_async(lambda: readers, pilot=pilot)
        await pilot.press("tab")  # the event loop answers while the store is being read
        assert scr.results_read == 0 and scr.query_one("#bs-results", DataTable).row_count == 0
        release.set()
        await until_async(lambda: scr.results_read, pilot=pilot)
        assert scr.query_one("#bs-results", DataTable).get_cell("20260101-000002-cccccc", "tok") == "10.0"
    assert readers == [False]
