"""The Compare screen inside the dashboard: the `c` mode opens it, it shows the last A/B from
the journal, and it runs A/Bs on the dashboard's own host."""

from __future__ import annotations

import pytest

from tests import ui_fakes

pytestmark = pytest.mark.timeout(60)


async def test_compare_mode_opens_with_last_ab_and_demo_ops():
    from tests.abfakes import FakeOps
    from tunedeck.ab.plans import load_plan
    from tunedeck.ab.runner import ABRunner
    from tunedeck.sim.demo import demo_host
    from tunedeck.ui.app import make_app
    from tunedeck.ui.screens.compare import CompareScreen
    from tunedeck.widgets.compare_table import CompareTable

    rep = await ABRunner(FakeOps(), "base", "tuned", load_plan("quick")).run()  # a journal entry
    app = make_app(
        demo_host(),
        gpu=ui_fakes.FakeGpu(),
        host_source=ui_fakes.FakeHost(),
        servers=ui_fakes.FakeServers(),
        target="demo",
        interval=0.2,
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("c")
        await pilot.pause(0.3)
        scr = app.screen
        assert isinstance(scr, CompareScreen)
        assert rep.id in str(scr.query_one("#ab-status").content)
        assert scr.query_one(CompareTable).get_cell("peak_output_tok_s", "verdict").plain == "B +18%"
        # no factory: g starts the A/B on the dashboard's own host (a host-side campaign)
        assert scr.start_campaign is None and app.host is not None
