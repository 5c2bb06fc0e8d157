"""Stored-results table: a run where no request finished shows TTFT N/A, not 0.0."""

from __future__ import annotations

import json

import pytest
from textual.app import App
from textual.widgets import DataTable

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
        await pilot.pause()
        table = app.screen.query_one("#bs-results", DataTable)
        assert table.get_cell("20260101-000000-aaaaaa", "ttft") == "N/A"
        assert table.get_cell("20260101-000000-aaaaaa", "state") == "partial"
        assert table.get_cell("20260101-000001-bbbbbb", "ttft") == "6.9"
