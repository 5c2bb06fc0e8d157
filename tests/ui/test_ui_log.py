"""The run log in the real app: burst typing after ``/``, polls hidden, current match, first error."""

from __future__ import annotations

import pytest
from textual import events

from tests.ui_fakes import FakeGpu, FakeHost, FakeServers, gpu_status
from tunedeck.hostops.runstore import RunRecord
from tunedeck.ui.app import make_app
from tunedeck.ui.screens.run import RunScreen
from tunedeck.widgets.server_log import ServerLog
from tunedeck.widgets.severity_log import is_probe_line

pytestmark = pytest.mark.timeout(60)
SIZE = (120, 40)

LINES = [
    "[2026-01-01 10:00:00] server_args=ServerArgs(model_path='m')",
    'INFO:     127.0.0.1:40100 - "GET /health HTTP/1.1" 200 OK',
    "[2026-01-01 10:00:01] WARNING: cuda graph disabled",
    'INFO:     127.0.0.1:40102 - "GET /metrics HTTP/1.1" 200 OK',
    "[2026-01-01 10:00:02] ERROR: NCCL timeout on rank 3",
    "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
    'INFO:     10.1.2.3:5555 - "POST /v1/completions HTTP/1.1" 200 OK',
    "[2026-01-01 10:00:03] ERROR: second failure",
    "INFO:     Uvicorn says hello again",
]


class StubHost:
    target = "local"


def app_with_run():
    app = make_app(gpu=FakeGpu([gpu_status(2)]), host_source=FakeHost(), servers=FakeServers(), target="t")
    return app


async def open_run(app, pilot) -> tuple[RunScreen, ServerLog]:
    run = RunScreen(StubHost(), RunRecord("r1", "local", ["x"]))  # type: ignore[arg-type]
    app.push_screen(run)
    await pilot.pause()
    log = run.query_one(ServerLog)
    log.append_lines(LINES)
    log.flush_now()
    await pilot.pause()
    return run, log


def burst(app, text: str) -> None:
    """Keys as a terminal delivers a paste-speed burst: all queued before any is handled."""
    names = {"/": "slash", " ": "space", "\n": "enter"}
    for ch in text:
        key = names.get(ch, ch)
        app.post_message(events.Key(key, None if key == "enter" else ch))


async def test_keys_typed_right_after_slash_go_to_the_search_box():
    app = app_with_run()
    async with app.run_test(size=SIZE) as pilot:
        run, log = await open_run(app, pilot)
        assert app.current_mode == "status"
        burst(app, "/Uvicorn\n")
        for _ in range(5):
            await pilot.pause()
        assert app.screen is run, "a key ran as a command"
        assert app.current_mode == "status"  # 'c' did not switch to Compare
        assert not any(w.group == "reconnect" for w in app.workers)  # 'r' did not reconnect
        assert log.query_text == "Uvicorn"
        assert len(log.matches) == 2 and log.match_index == 0


async def test_polls_hidden_by_default_and_h_shows_them():
    app = app_with_run()
    async with app.run_test(size=SIZE) as pilot:
        _run, log = await open_run(app, pilot)
        shown = list(log.view.lines)
        assert not any("/health" in ln or "/metrics" in ln for ln in shown)
        assert any("/v1/completions" in ln for ln in shown)
        assert "2 /health, /metrics lines hidden (h)" in log.status_text
        await pilot.press("h")
        await pilot.pause()
        assert len(log.view.lines) == len(LINES)
    assert is_probe_line('127.0.0.1:1 - "GET /metrics HTTP/1.1" 200') and not is_probe_line("GET /metrics")


async def test_e_jumps_to_the_first_error_then_the_next():
    app = app_with_run()
    async with app.run_test(size=SIZE) as pilot:
        _run, log = await open_run(app, pilot)
        await pilot.press("e")
        await pilot.pause()
        assert "NCCL timeout" in log.view.lines[log.error_line]
        assert log.view.current_line == log.error_line and not log.following
        await pilot.press("e")
        await pilot.pause()
        assert "second failure" in log.view.lines[log.error_line]


async def test_current_match_is_distinct_and_m_without_search_says_so():
    app = app_with_run()
    async with app.run_test(size=SIZE) as pilot:
        _run, log = await open_run(app, pilot)
        await pilot.press("m")
        await pilot.pause()
        assert not log.filtering and "filter on" not in log.status_text
        log.set_search("uvicorn")
        await pilot.pause()
        first, second = log.matches
        assert log.view.current_line == first
        await pilot.press("n")
        await pilot.pause()
        assert log.view.current_line == second
        # the current line renders differently from another matching line
        view = log.view
        cur = view._render_line_strip(second, view.rich_style)
        other = view._render_line_strip(first, view.rich_style)
        assert [s.style for s in cur if "Uvicorn" in s.text] != [s.style for s in other if "Uvicorn" in s.text]
        await pilot.press("m")
        await pilot.pause()
        assert log.filtering and "only matching lines" in log.status_text


async def test_a_match_past_the_right_edge_scrolls_into_view_and_back():
    app = app_with_run()
    async with app.run_test(size=SIZE) as pilot:
        _, log = await open_run(app, pilot)
        log.append_lines(["[2026-01-01 10:00:04] " + "x" * 300 + " needle at column 322", "short needle here"])
        log.flush_now()
        await pilot.pause()
        burst(app, "/needle\n")
        for _ in range(5):
            await pilot.pause()
        view = log.view
        width = view.scrollable_content_region.width
        assert width < 322
        # the first match is past the right edge: the view scrolls so that it shows
        assert log.current_match_line == len(view.lines) - 2
        assert view.scroll_x <= 322 < view.scroll_x + width - len("needle")
        assert "needle" in "".join(s.text for s in view.render_line(int(view.current_line - view.scroll_y)))
        await pilot.press("n")  # the next one fits: back to the start of the line
        for _ in range(3):
            await pilot.pause()
        assert view.scroll_x == 0
