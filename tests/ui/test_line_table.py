"""The GPU table drawn line by line (tunedeck.widgets.line_table): what DataTable gave it still works:
a fixed header, the row cursor and its keys, scrolling a host with more GPUs than rows, a click,
cells by key, and a repaint of only the rows whose cells changed."""

from __future__ import annotations

import dataclasses

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Static

from tests.ui_fakes import gpu_status
from tests.ui_text import screen_text
from tests.waits import until_async
from tunedeck.widgets.gpu_table import GpuHistory, GpuTable

pytestmark = pytest.mark.timeout(30)


class _TableApp(App[None]):
    CSS = "GpuTable { max-height: 8; }"

    def compose(self) -> ComposeResult:
        yield GpuTable(id="gpus")
        yield Static("below")


def _show(table: GpuTable, n: int, t: int = 0) -> None:
    status = gpu_status(n, t)
    history = GpuHistory()
    history.add(status)
    table.update_gpus(status.gpus, history)


async def test_sixteen_gpus_scroll_under_a_fixed_header_with_the_cursor_keys():
    app = _TableApp()
    async with app.run_test(size=(120, 20)) as pilot:
        table = app.query_one(GpuTable)
        _show(table, 16)
        table.focus()
        await pilot.pause()
        assert table.row_count == 16
        assert [k.split("-")[1] for k in table.row_keys()] == [str(i) for i in range(16)]
        lines = screen_text(app).splitlines()
        assert lines[0].split()[:3] == ["GPU", "Name", "Util"]
        assert lines[1].split()[0] == "0" and table.cursor_row == 0
        await pilot.press("end")
        await until_async(lambda: table.cursor_row == 15, 3, pilot=pilot, what="cursor on the last GPU")
        await pilot.pause()
        lines = screen_text(app).splitlines()
        assert lines[0].split()[:3] == ["GPU", "Name", "Util"]  # the header stays while the rows scroll
        shown = [ln.split()[0] for ln in lines[1:8]]  # 7 rows under the header (max-height 8)
        assert "15" in shown and "0" not in shown, shown
        await pilot.press("home")
        await pilot.press("down", "down")
        await pilot.pause()
        assert table.cursor_row == 2
        assert screen_text(app).splitlines()[1].split()[0] == "0"


async def test_a_click_puts_the_cursor_on_the_row_and_cells_are_read_by_key():
    app = _TableApp()
    async with app.run_test(size=(120, 20)) as pilot:
        table = app.query_one(GpuTable)
        _show(table, 4)
        await pilot.pause()
        await pilot.click(GpuTable, offset=(2, 3))  # the header is line 0: line 3 is GPU 2
        assert table.cursor_row == 2
        util = table.get_cell("gpu-2", "util")
        assert util.plain.endswith("%") and str(util.style)  # its theme colour goes with it


async def test_only_the_rows_whose_cells_changed_are_drawn_again():
    app = _TableApp()
    async with app.run_test(size=(120, 20)) as pilot:
        table = app.query_one(GpuTable)
        status = gpu_status(4, 0)
        table.update_gpus(status.gpus)
        await pilot.pause()
        drawn: list[int] = []
        line = table._line

        def counting(cells, style, cursor, width):  # type: ignore[no-untyped-def]
            drawn.append(int(cells[0][0]))
            return line(cells, style, cursor, width)

        table._line = counting  # type: ignore[method-assign]
        hot = list(status.gpus)
        hot[1] = dataclasses.replace(hot[1], utilization=99.0)
        table.update_gpus(tuple(hot))
        await pilot.pause()
        assert drawn == [1], drawn  # GPU 1's line built again, the other three from the cache
        assert table.get_cell("gpu-1", "util").plain == "99%"
        assert "99%" in screen_text(app)
