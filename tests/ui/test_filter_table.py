"""FilterTable: a re-read that changed nothing rebuilds no rows; a change, a filter, a sort or a
cleared table shows the rows again."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from tunedeck.widgets.filter_table import FilterTable

pytestmark = pytest.mark.timeout(60)


class _App(App[None]):
    def compose(self) -> ComposeResult:
        yield FilterTable(id="t")


ROWS = [(f"r{i:03d}", (f"r{i:03d}", f"profile-{i % 3}", str(i))) for i in range(200)]


async def test_the_same_rows_again_rebuild_nothing_and_keep_the_cursor_a_change_shows():
    app = _App()
    async with app.run_test(size=(80, 20)) as pilot:
        t = app.query_one(FilterTable)
        for key, label in (("run", "Run"), ("profile", "Profile"), ("n", "N")):
            t.add_column(label, key=key)
        t.set_rows(ROWS)
        t.move_cursor(row=150)
        await pilot.pause()
        rebuilt: list[int] = []
        real_add = t.add_row

        def counted(*cells: object, **kw: object) -> object:
            rebuilt.append(1)
            return real_add(*cells, **kw)  # type: ignore[arg-type]

        t.add_row = counted  # type: ignore[method-assign]
        t.set_rows(list(ROWS))  # a periodic re-read: the same rows
        assert rebuilt == [] and t.cursor_row == 150 and t.row_count == 200
        t.set_rows([*ROWS[:199], ("r199", ("r199", "profile-x", "199"))])  # one cell changed
        assert len(rebuilt) == 200 and t.get_cell("r199", "profile") == "profile-x" and t.cursor_row == 150
        t.set_filter("profile-1")
        assert t.row_count == len([r for r in ROWS[:199] if r[1][1] == "profile-1"])  # r199 is profile-x now
        t.set_filter("")
        t.sort_by("n")
        assert t.shown_keys[:2] == ["r000", "r001"]
        t.clear(columns=True)  # columns remade (a view whose columns change): the same rows come back
        for key, label in (("run", "Run"), ("profile", "Profile"), ("n", "N")):
            t.add_column(label, key=key)
        t.sort_column = None
        t.set_rows([*ROWS[:199], ("r199", ("r199", "profile-x", "199"))])
        assert t.row_count == 200
