"""A tuning campaign's pace (tunedeck.ab.tuneeta): the estimate of a candidate's parts from the plan
and the SLO, each part replaced by its measured mean, and the rest of a round from where each
candidate is."""

from __future__ import annotations

import pytest

from tunedeck.ab.plan import Plan, PlanLevel
from tunedeck.ab.tune import Workload
from tunedeck.ab.tuneeta import (
    DEFAULT_LEVEL_S,
    DEFAULT_SIM_LEVEL_S,
    LEVEL_OVERHEAD_S,
    SIM_STOP_S,
    STOP_S,
    Doing,
    Pace,
    candidate_left_s,
    level_s,
    measured,
    prior,
    request_s,
    round_left_s,
)
from tunedeck.services.tunerun import estimate


def workload(output_len: int = 16, prompts_per_c: int = 2, min_prompts: int = 6, warmup: int = 1) -> Workload:
    return Workload(Plan("tune", (PlanLevel(1, min_prompts, 64, output_len, warmup),)), prompts_per_c, min_prompts)


def test_a_request_at_the_slos_bounds():
    assert request_s(["ttft_p90:200", "tpot_p90:30"], 16) == pytest.approx(0.2 + 15 * 0.03)
    assert request_s(["itl_p99:20"], 101) == pytest.approx(100 * 0.02)  # no TTFT bound: none counted
    assert request_s(["ttft_p90:500", "per_user_tok_s:25"], 11) == pytest.approx(0.5 + 10 / 25)
    assert request_s(["tpot_p90:50", "per_user_tok_s:25"], 11) == pytest.approx(10 * 0.04)  # the tighter
    assert request_s(["ttft_p90:200", "tpot_p90:30", "e2el_p90:300"], 16) == pytest.approx(0.3)
    assert request_s(["e2el_p99:2000"], 16) == pytest.approx(2.0)
    assert request_s(["ttft_p90:200"], 16) is None  # no token time, no whole request: unknown


def test_a_level_is_its_waves_of_requests_and_its_own_cost():
    w = workload()  # 6 prompts at least, 2 per user, 1 warmup; a request 0.65 s
    slo = ["ttft_p90:200", "tpot_p90:30"]
    assert level_s(w, slo, 1) == pytest.approx(LEVEL_OVERHEAD_S + (6 + 1) * 0.65)
    assert level_s(w, slo, 16) == pytest.approx(LEVEL_OVERHEAD_S + (2 + 1) * 0.65)  # 32 requests, 16 at once
    assert level_s(w, slo, 4) == pytest.approx(LEVEL_OVERHEAD_S + (2 + 1) * 0.65)  # 8 requests
    assert level_s(w, slo, 2) == pytest.approx(LEVEL_OVERHEAD_S + (3 + 1) * 0.65)  # 6 (the least), 2 at once
    assert level_s(w, ["ttft_p90:200"], 4) is None


def test_the_prior_from_the_plan_and_its_defaults():
    p = prior(workload(), ["ttft_p90:200", "tpot_p90:30"], startup_s=20.0, max_steps=10, start=16, sim=True)
    assert (p.startup_s, p.levels, p.stop_s) == (20.0, 9.0, SIM_STOP_S)
    assert (p.single_s, p.level_s) == pytest.approx((LEVEL_OVERHEAD_S + 7 * 0.65, LEVEL_OVERHEAD_S + 3 * 0.65))
    assert p.candidate_s == pytest.approx(20.0 + 5.55 + 9 * 2.95 + SIM_STOP_S)
    # an SLO without a token time, or no workload: the default level
    q = prior(workload(), ["ttft_p90:200"], startup_s=600.0, max_steps=8, start=1, sim=False)
    assert q == Pace(600.0, DEFAULT_LEVEL_S, DEFAULT_LEVEL_S, 7.0, STOP_S)
    assert prior(None, (), startup_s=20.0, max_steps=4, start=1, sim=True).level_s == DEFAULT_SIM_LEVEL_S


def test_the_estimate_of_a_short_campaign_is_its_plans():
    """The field's case: 2 simulated candidates of 6-32 requests of 16 tokens a level, each level
    about 2-3 s, 25-45 s in all; the old estimate said 10 s a level and a 15 s stop (4m30s)."""
    slo = ["ttft_p90:200", "tpot_p90:30"]
    est = estimate(["a", "b"], "a", max_steps=10, sim=True, workload=workload(), slo=slo, start=16)
    assert est.total_s == pytest.approx(2 * (20.0 + 5.55 + 9 * 2.95 + SIM_STOP_S))
    assert est.total_s < 120.0 and "levels x ~3 s" in est.text and est.pace.level_s == pytest.approx(2.95)
    plain = estimate(["a", "b"], "a", max_steps=10, sim=True)  # no plan given: the defaults
    assert plain.total_s == pytest.approx(2 * (20.0 + 10 * DEFAULT_SIM_LEVEL_S + SIM_STOP_S))


def test_measured_parts_replace_the_prior_one_by_one():
    before = Pace(100.0, 50.0, 40.0, 7.0, 15.0)
    assert measured(before) == before
    assert measured(before, startups=[10.0, 20.0]) == Pace(15.0, 50.0, 40.0, 7.0, 15.0)
    assert measured(before, singles=[5.0], levels=[3.0, 5.0], counts=[3, 4], stops=[2.0]) == Pace(
        100.0, 5.0, 4.0, 3.5, 2.0
    )
    assert measured(None, startups=[10.0]) is None  # a part neither estimated nor measured
    full = measured(None, startups=[10.0], singles=[5.0], levels=[4.0], counts=[3], stops=[2.0])
    assert full == Pace(10.0, 5.0, 4.0, 3.0, 2.0)
    # every candidate missed at C=1: no later level, whose length then does not matter
    assert measured(None, startups=[10.0], singles=[5.0], counts=[0], stops=[2.0]) == Pace(10.0, 5.0, 0.0, 0.0, 2.0)


def test_what_is_left_of_a_candidate_by_where_it_is():
    p = Pace(startup_s=10.0, single_s=5.0, level_s=4.0, levels=3.0, stop_s=2.0)  # 29 s in all
    assert candidate_left_s(p, None, 100.0) == 29.0
    assert candidate_left_s(p, Doing(100.0), 104.0) == 25.0  # starting
    assert candidate_left_s(p, Doing(100.0), 130.0) == 19.0  # a slow start: the rest, never less
    assert candidate_left_s(p, Doing(100.0, ready=110.0), 110.0) == 19.0  # ready, C=1 to come
    assert candidate_left_s(p, Doing(100.0, 110.0, 0, level_since=110.0), 112.0) == 3.0 + 12.0 + 2.0
    assert candidate_left_s(p, Doing(100.0, 110.0, 1), 115.0) == 12.0 + 2.0  # between levels
    assert candidate_left_s(p, Doing(100.0, 110.0, 2, level_since=119.0), 120.0) == 3.0 + 4.0 + 2.0
    assert candidate_left_s(p, Doing(100.0, 110.0, 4), 127.0) == 2.0  # its levels done
    assert candidate_left_s(p, Doing(100.0, 110.0, 6, level_since=130.0), 131.0) == 3.0 + 2.0  # more than said
    assert candidate_left_s(p, Doing(100.0, 110.0, 2, stop_since=118.0), 119.0) == 1.0  # stopping early
    assert candidate_left_s(p, Doing(100.0, 110.0, 2, stop_since=118.0), 150.0) == 0.0
    assert round_left_s(p, [Doing(100.0, 110.0, 1), None, None], 115.0) == 14.0 + 2 * 29.0


def test_the_rest_of_a_round_converges_once_a_candidate_is_measured():
    """Candidates all at one true pace, an estimate 10 times too slow: from the first candidate's
    end on, the round's rest is what is really left, whatever the estimate said."""
    true = Pace(startup_s=3.0, single_s=3.0, level_s=2.5, levels=6.0, stop_s=1.5)
    est = Pace(startup_s=30.0, single_s=30.0, level_s=25.0, levels=6.0, stop_s=15.0)
    n = 5
    assert round_left_s(est, [None] * n, 0.0) == pytest.approx(10 * n * true.candidate_s)
    pace = measured(
        est, startups=[3.0], singles=[3.0], levels=[2.5] * 6, counts=[6], stops=[1.5]
    )  # the first candidate's parts
    assert pace is not None
    assert round_left_s(pace, [None] * (n - 1), true.candidate_s) == pytest.approx((n - 1) * true.candidate_s)
    # and within the second one: what is left of it, then the others
    t0 = true.candidate_s
    mid = Doing(t0, t0 + 3.0, 2, level_since=t0 + 3.0 + 3.0 + 2.5)
    now = t0 + 3.0 + 3.0 + 2.5 + 1.0
    assert round_left_s(pace, [mid] + [None] * (n - 2), now) == pytest.approx(
        (t0 + true.candidate_s - now) + (n - 2) * true.candidate_s
    )


def test_a_pace_travels_as_json():
    p = Pace(2.0, 3.0, 2.5, 7.0, 1.5)
    assert Pace.from_json(p.to_json()) == p
    for bad in (None, "x", {}, {**p.to_json(), "levels": -1}, {**p.to_json(), "stop_s": True}):
        assert Pace.from_json(bad) is None
