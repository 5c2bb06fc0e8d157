"""The log view's buffers are bounded in bytes, not only in lines (issue "Hardening, round
three", item 2): 200 lines of 1 MB once took the run view past 600 MB."""

from __future__ import annotations

import sys

import pytest
from textual.app import App, ComposeResult

from tunedeck.widgets.server_log import ServerLog

pytestmark = pytest.mark.timeout(120)

MB = 1024 * 1024


class LogApp(App[None]):
    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.max_bytes = max_bytes

    def compose(self) -> ComposeResult:
        yield ServerLog(max_lines=10_000, max_bytes=self.max_bytes, id="log")


def _held(lines: object) -> int:
    """The memory the lines take (what the caps bound)."""
    return sum(sys.getsizeof(str(ln)) for ln in lines)  # type: ignore[attr-defined]


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
    from tunedeck.widgets.severity_log import RENDER_CACHE_LINES, SHOW_CHARS

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


async def test_a_log_of_cut_huge_lines_holds_its_memory_under_the_cap() -> None:
    """A view following 1 MB lines, each cut by the follower at its 16 KiB cap with "… N bytes
    cut" (so 2 bytes a character in memory), a short line after each: the lines the ring and the
    view hold take at most the cap in memory at every step, not twice it. (Counted in UTF-8, the
    ring held twice its cap, and the hostile-log benchmark still grew 0.1 MB/s of RSS after 5
    minutes, the ring not yet full.)"""
    from tunedeck.hostops.logfollow import LINE_CAP, LineSplitter

    cap = MB
    one = LineSplitter().feed(("z" * MB + "\n").encode())[0]  # a 1 MB line as the follower passes it on
    assert len(one) > LINE_CAP and sys.getsizeof(one) > 2 * LINE_CAP
    app = LogApp(cap)
    async with app.run_test(size=(160, 48)) as pilot:
        log = app.query_one(ServerLog)
        for batch in range(12):  # 600 huge lines, 600 short ones: both buffers fill and go on dropping
            for i in range(batch * 50, batch * 50 + 50):
                log.append_lines([f"[{i}] INFO huge line {one}", f"[{i}] INFO decode batch #running-req: 8"])
            log.flush_now()
            await pilot.pause()
            ring, shown = _held(log.ring), _held(log.view.lines)
            assert ring <= cap and shown <= cap, (batch, ring, shown)
            assert log.ring_bytes == ring and log.view.held_bytes == shown
        assert ring > cap - 2 * sys.getsizeof(one) and shown > cap - 10_000  # full, the newest kept
        assert log.total_lines == 1200 and log.view.lines[-1] == "[599] INFO decode batch #running-req: 8"


async def test_a_long_line_is_drawn_from_only_the_characters_that_can_be_in_view() -> None:
    """Rich keeps the last 16,384 pieces it cut a line into when a character of it is not
    one-cell-only ("…" of a cut line is not): the pieces of whole 2,000-character lines held
    100 MB and more after 10 minutes of a log of 1 MB lines. A line is drawn from its first
    scroll + width characters: the same cells in view."""
    app = LogApp(4 * MB)
    async with app.run_test(size=(100, 30)) as pilot:
        log = app.query_one(ServerLog)
        log.append_lines([f"{i:04d} {'é' * 5000} … 1 bytes cut" for i in range(60)])
        log.flush_now()
        await pilot.pause()
        view = log.view
        last = view.line_count - 1
        strip = view._render_line_strip(last, view.rich_style)
        assert sum(len(s.text) for s in strip) <= view.scroll_offset.x + view.size.width
        drawn = view._render_line(last, 0, view.size.width)
        assert drawn.text == "0059 " + "é" * (view.size.width - 5)
        view.scroll_to(x=3000, animate=False, immediate=True)
        await pilot.pause()
        x = view.scroll_offset.x
        assert x > 0
        assert view._render_line(last, x, 10).text == ("0059 " + "é" * 5000)[x : x + 10]
