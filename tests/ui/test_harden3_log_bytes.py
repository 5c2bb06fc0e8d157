"""The log view's buffers are bounded in bytes, not only in lines (issue "Hardening, round
three", item 2): 200 lines of 1 MB once took the run view past 600 MB."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from widgets.server_log import ServerLog

pytestmark = pytest.mark.timeout(120)

MB = 1024 * 1024


class LogApp(App[None]):
    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.max_bytes = max_bytes

    def compose(self) -> ComposeResult:
        yield ServerLog(max_lines=10_000, max_bytes=self.max_bytes, id="log")


def _held(lines: object) -> int:
    return sum(len(str(ln).encode()) for ln in lines)  # type: ignore[attr-defined]


async def test_two_hundred_lines_of_one_megabyte_stay_under_the_byte_cap() -> None:
    cap = 8 * MB
    app = LogApp(cap)
    async with app.run_test(size=(100, 30)) as pilot:
        log = app.query_one(ServerLog)
        for i in range(200):
            log.append_lines([f"{i:04d} " + "y" * (MB - 5)])
            if i % 20 == 19:
                log.flush_now()
                assert _held(log.ring) <= cap and _held(log.view.lines) <= cap
        log.append_lines(["the last, short line"])
        log.flush_now()
        await pilot.pause()
        ring, shown = _held(log.ring), _held(log.view.lines)
        assert ring <= cap and shown <= cap, (ring, shown)
        assert log.ring_bytes == ring and log.view.held_bytes == shown  # the running sums are exact
        assert 5 <= len(log.ring) <= 8  # the newest lines are the ones kept
        assert log.ring[-1] == "the last, short line" and log.ring[-2].startswith("0199 ")
        assert log.view.lines[-1] == "the last, short line"
        assert log.total_lines == 201
        assert f"{len(log.ring)} lines of 201" in log.status_text


async def test_short_lines_are_still_bounded_by_count_and_search_still_works() -> None:
    app = LogApp(MB)
    async with app.run_test(size=(100, 30)) as pilot:
        log = app.query_one(ServerLog)
        log.append_lines([f"line {i} " + "z" * 200 for i in range(20_000)])
        log.flush_now()
        await pilot.pause()
        assert _held(log.ring) <= MB and _held(log.view.lines) <= MB
        assert log.view.lines[-1].startswith("line 19999 ")
        log.set_search("line 1999[0-9] ")
        assert len(log.matches) == 10
        assert all(log.view.lines[i].startswith("line 1999") for i in log.matches)


async def test_a_long_line_is_shown_cut_and_few_rendered_lines_are_kept() -> None:
    """Each shown line is rendered, styled and cached whole: a 16 KiB line is shown as its first
    SHOW_CHARS characters and how much more there is, and the render cache holds a screen's worth
    (a view following 1 MB lines once grew 0.6 MB/s in RSS through that cache)."""
    from widgets.server_log import RENDER_CACHE_LINES, SHOW_CHARS

    app = LogApp(MB)
    async with app.run_test(size=(100, 30)) as pilot:
        log = app.query_one(ServerLog)
        log.append_lines(["short", "z" * (16 * 1024)])
        log.flush_now()
        await pilot.pause()
        shown = log.view.lines[-1]
        assert shown.startswith("z" * SHOW_CHARS) and shown.endswith(f" … {16 * 1024 - SHOW_CHARS} chars more")
        assert log.view.lines[-2] == "short"
        assert log.view._render_line_cache.maxsize == RENDER_CACHE_LINES
