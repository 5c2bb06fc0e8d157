"""The A/B's acceptance fallback reads the same figures as a benchmark level
(:func:`tunedeck.bench.counters.level_figures`): nothing where the server counts speculative decoding
(each level's summary has its own figures), SGLang's gauge only where it does not, labelled."""

from __future__ import annotations

import pytest

from tests.abfakes import FakeOps
from tests.unit.test_bench_counters_sglang import page
from tunedeck.ab.plans import load_plan
from tunedeck.ab.report import report_from_dict
from tunedeck.ab.runner import ABRunner
from tunedeck.bench.counters import parse_counters
from tunedeck.hostside.abops import gauge_acceptance


def test_a_server_with_counters_gives_no_gauge_to_mix_into_the_levels():
    # the gauge says 97 %: the last decode-log interval's, neither a level's nor the run's
    assert gauge_acceptance(parse_counters(page(2600, 26, 900))) == (None, None)
    vllm = "vllm:spec_decode_num_drafts_total 10.0\nvllm:spec_decode_num_accepted_tokens_total 4.0\n"
    assert gauge_acceptance(parse_counters(vllm)) == (None, None)


def test_a_server_without_counters_gives_its_gauge_labelled():
    rate, note = gauge_acceptance(parse_counters(page(2600, 26, None)))
    assert rate == pytest.approx(97.0)
    assert note is not None and "gauge sglang:spec_accept_length" in note and "not this level's" in note
    assert "prefix" not in note  # only what the acceptance figure is
    assert gauge_acceptance(parse_counters("sglang:num_requests_total 3.0\n")) == (None, None)


class GaugeOps(FakeOps):
    async def acceptance_rate(self, info, handle):
        return (41.0, "speculative acceptance is a gauge") if info.name == "tuned" else (None, None)


async def test_the_report_says_which_side_read_a_gauge_and_keeps_it():
    rep = await ABRunner(GaugeOps(), "base", "tuned", load_plan("quick")).run()
    assert rep.status == "completed"
    assert "B (tuned): speculative acceptance is a gauge" in rep.warnings
    assert rep.sides["A"].runs[0].acceptance_rate is None
    again = report_from_dict(rep.to_dict())
    run = again.sides["B"].runs[0]
    assert (run.acceptance_rate, run.acceptance_note) == (41.0, "speculative acceptance is a gauge")
