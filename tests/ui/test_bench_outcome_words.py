"""The Bench screen names a finished benchmark's outcome by its exit status, in the words of
`tunedeck bench` (docs/exit-codes.md): partial results, lost, complete."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from tests.screenapp import ScreenApp
from tests.ui.test_ui_charts import ScriptedBench
from tests.waits import until_async
from tunedeck.bench.plan import BenchPlan
from tunedeck.commands._benchjob import EXIT_LOST, EXIT_OK, EXIT_PARTIAL
from tunedeck.ui.screens.bench import BenchScreen

pytestmark = pytest.mark.timeout(60)

SUMMARY = {"run_id": "r0", "completed": 7, "failed": 0, "max_concurrency": 4, "partial": True}


@pytest.mark.parametrize(
    ("rc", "summaries", "words"),
    [
        (EXIT_PARTIAL, [SUMMARY], "partial results (read from the job folder)"),
        (EXIT_LOST, [], "outcome unknown: the host could not be read; the job and its results are kept there"),
        (EXIT_OK, [{**SUMMARY, "partial": False}], "finished"),
    ],
)
async def test_the_state_line_names_the_outcome(rc, summaries, words):
    scr = ScriptedBench(BenchPlan(url="http://x"))
    async with ScreenApp(scr).run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        scr.post_message(BenchScreen.Finished(rc, summaries, ""))
        status = scr.query_one("#bench-status", Static)
        await until_async(lambda: scr.rc == rc, 10, pilot=pilot)
        await pilot.pause()
        assert scr.state == words
        assert words in str(status.render())
        assert [s["run_id"] for s in scr.summaries] == [s["run_id"] for s in summaries]


async def test_the_compare_screen_names_a_partial_ab_in_the_same_words():
    from tests.abfakes import FakeOps
    from tunedeck.ab.plans import load_plan
    from tunedeck.ab.runner import ABRunner
    from tunedeck.ui.screens.campaign import CampaignEnded
    from tunedeck.ui.screens.compare import CompareScreen

    rep = await ABRunner(FakeOps(), "base", "tuned", load_plan("quick")).run()
    rep.status, rep.error = "partial", "the ab job ended without a final report (rc 137); 2 level(s) read"
    scr = CompareScreen(profiles=["base", "tuned"], plan="quick")

    async with ScreenApp(scr).run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        scr.post_message(CampaignEnded(rep))
        status = scr.query_one("#ab-status", Static)
        await until_async(lambda: scr.report is rep, 10, pilot=pilot)
        await pilot.pause()
        assert f"A/B {rep.id} partial results (read from the job folder): the ab job ended" in str(status.content)
