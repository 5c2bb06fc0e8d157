"""Capacity at an SLO: the SLO terms, the level check and the search (tunedeck.ab.capacity)."""

from __future__ import annotations

import json
import math

import pytest

from tunedeck.ab.capacity import (
    CapacityResult,
    CapacityStep,
    SloTerm,
    find_capacity,
    parse_slo,
    slo_check,
    slo_excess,
)
from tunedeck.bench.metrics import calculate_metrics

# ---------------------------------------------------------------------- parse_slo


def test_parse_slo_reads_terms_given_apart_or_together():
    assert parse_slo(["ttft_p90:500", "tpot_p90:50 per_user_tok_s:20"]) == (
        SloTerm("ttft_p90", 500.0),
        SloTerm("tpot_p90", 50.0),
        SloTerm("per_user_tok_s", 20.0),
    )
    assert parse_slo(["e2el_p99:2.5e3"]) == (SloTerm("e2el_p99", 2500.0),)
    assert str(SloTerm("itl_p99", 12.5)) == "itl_p99:12.5"


@pytest.mark.parametrize(
    ("items", "words"),
    [
        (["ttft_p90"], "'ttft_p90': expected METRIC:BOUND"),
        (["ttft_p90:"], "'ttft_p90:': expected METRIC:BOUND"),
        (["ttft_p95:500"], "'ttft_p95:500': unknown metric 'ttft_p95'; expected one of ttft_p50,"),
        (["tpot_p90:fast"], "'tpot_p90:fast': 'fast' is not a number"),
        (["tpot_p90:0"], "'tpot_p90:0': the bound must be a finite number > 0"),
        (["tpot_p90:-5"], "'tpot_p90:-5': the bound must be a finite number > 0"),
        (["tpot_p90:inf"], "'tpot_p90:inf': the bound must be a finite number > 0"),
        (["tpot_p90:nan"], "'tpot_p90:nan': the bound must be a finite number > 0"),
        (["tpot_p90:50", "tpot_p90:40"], "'tpot_p90:40': tpot_p90 is already bounded by 'tpot_p90:50'"),
        (["  "], "SLO term '  ': empty"),
        ([], "SLO: no terms given"),
    ],
)
def test_parse_slo_names_the_bad_item_in_one_line(items, words):
    with pytest.raises(ValueError) as e:
        parse_slo(items)
    assert words in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------------- slo_check on real summaries


def level(ttft_s: float, itl_s: float, n: int = 20, out: int = 16, conc: int = 4, failed: int = 0) -> dict:
    """A level summary as the benchmark writes it (calculate_metrics over per-request samples)."""
    samples = []
    for i in range(n):
        ttft = ttft_s * (1 + i / n)  # spread, so percentiles differ from the median
        itl = [itl_s] * (out - 1)
        samples.append(
            {
                "index": i,
                "success": True,
                "start_time": float(i),
                "ttft": ttft,
                "itl": itl,
                "latency": ttft + sum(itl),
                "output_tokens": out,
                "prompt_len": 8,
                "usage_present": True,
            }
        )
    for i in range(failed):
        samples.append({"index": n + i, "success": False, "error_type": "HTTPError", "error": "500"})
    duration = max(s["start_time"] + s["latency"] for s in samples if s["success"]) / conc
    return calculate_metrics(samples, duration, max_concurrency=conc)


def test_slo_check_reads_the_summary_keys_the_benchmark_writes():
    s = level(ttft_s=0.2, itl_s=0.02)
    # p90 of TTFT 0.2 s x (1 + i/20) over i = 0..19 is 0.371 s; median 0.295 s; TPOT 20 ms
    assert s["p90_ttft_ms"] == pytest.approx(371.0)
    assert s["median_ttft_ms"] == pytest.approx(295.0)
    ok, why = slo_check(s, parse_slo(["ttft_p90:400", "tpot_p90:25", "ttft_p50:300", "itl_p99:21"]))
    assert ok and why == []
    ok, why = slo_check(s, parse_slo(["ttft_p90:350", "tpot_p99:19", "ttft_p50:300"]))
    assert not ok
    assert why == ["ttft_p90 371.0 ms > 350 ms", "tpot_p99 20.0 ms > 19 ms"]
    per_user = s["per_user_output_throughput"]
    assert per_user > 0
    ok, why = slo_check(s, parse_slo([f"per_user_tok_s:{per_user * 2:.3f}"]))
    assert not ok and why[0].startswith("per_user_tok_s ") and " < " in why[0]
    assert slo_check(s, parse_slo([f"per_user_tok_s:{per_user / 2:.3f}"])) == (True, [])


def test_slo_check_unknown_statistic_failed_requests_and_partial_levels_do_not_meet():
    s = level(ttft_s=0.2, itl_s=0.02)
    del s["p99_e2el_ms"]  # a percentile the run was not asked for
    ok, why = slo_check(s, parse_slo(["e2el_p99:10000", "ttft_p90:1000"]))
    assert not ok and why == ["e2el_p99: unknown (p99_e2el_ms is not in the level summary)"]
    assert slo_excess(s, parse_slo(["e2el_p99:10000"])) == math.inf
    bad = level(ttft_s=0.2, itl_s=0.02, failed=2)
    ok, why = slo_check(bad, parse_slo(["ttft_p90:1000"]))
    assert not ok and why == ["2 of 22 requests failed"]
    cut = {**level(ttft_s=0.2, itl_s=0.02), "partial": True}
    assert slo_check(cut, parse_slo(["ttft_p90:1000"])) == (False, ["the level was cut short (partial)"])
    assert slo_check({"completed": 0, "failed": 0}, parse_slo(["ttft_p90:1000"]))[1][0] == "no request completed"


def test_slo_excess_is_the_worst_ratio_to_the_bound():
    s = level(ttft_s=0.2, itl_s=0.02)
    assert slo_excess(s, parse_slo(["ttft_p90:742", "tpot_p90:10"])) == pytest.approx(2.0)
    assert slo_excess(s, parse_slo(["ttft_p90:742"])) == pytest.approx(0.5)


# ---------------------------------------------------------------------- the search


class Curve:
    """A server whose TPOT grows linearly with concurrency: 10 ms + 0.5 ms per user (monotone)."""

    def __init__(self, base_ms: float = 10.0, per_user_ms: float = 0.5) -> None:
        self.base = base_ms
        self.slope = per_user_ms
        self.calls: list[int] = []

    def tpot_ms(self, c: int) -> float:
        return self.base + self.slope * c

    async def measure(self, c: int) -> dict:
        self.calls.append(c)
        return level(ttft_s=0.05, itl_s=self.tpot_ms(c) / 1000.0, conc=c)


async def test_find_capacity_brackets_then_bisects_to_within_the_gap():
    curve = Curve()  # TPOT 30 ms at C=40, 30.5 at 41: the true capacity under tpot_p90:30.25 is 40
    seen: list[int] = []
    r = await find_capacity(
        curve.measure, parse_slo(["tpot_p90:30.25"]), max_steps=12, on_step=lambda s: seen.append(s.concurrency)
    )
    assert curve.calls[:7] == [1, 2, 4, 8, 16, 32, 64]
    assert seen == curve.calls == [s.concurrency for s in r.steps]
    assert len(set(curve.calls)) == len(curve.calls)  # never the same concurrency twice
    assert r.capacity is not None and 40 * 0.9 <= r.capacity <= 40
    missed = min(s.concurrency for s in r.steps if not s.met)
    assert missed - r.capacity <= max(1, 0.1 * r.capacity)  # the gap rule
    assert all(s.met == (curve.tpot_ms(s.concurrency) <= 30.25) for s in r.steps)
    assert r.closest is None
    cap = next(s for s in r.steps if s.concurrency == r.capacity)
    assert r.throughput_at_capacity == cap.summary["output_throughput"]
    assert r.single_user_tok_s == r.steps[0].summary["per_user_output_throughput"] > 0
    # the bisection steps name the violated term
    assert any("tpot_p90" in why for s in r.steps if not s.met for why in s.reasons)


async def test_find_capacity_respects_max_steps_and_start():
    curve = Curve()
    r = await find_capacity(curve.measure, parse_slo(["tpot_p90:30"]), max_steps=5)
    assert curve.calls == [1, 2, 4, 8, 16] and r.capacity == 16 and len(r.steps) == 5
    curve = Curve()
    r = await find_capacity(curve.measure, parse_slo(["tpot_p90:30"]), start=24, max_steps=5)
    # C=1 first (the single-user speed), then from start: 24 met, 48 missed, 36, 42
    assert curve.calls == [1, 24, 48, 36, 42] and r.capacity == 36


async def test_find_capacity_stops_at_max_concurrency():
    curve = Curve()
    r = await find_capacity(curve.measure, parse_slo(["tpot_p90:1000"]), max_concurrency=50, max_steps=20)
    assert curve.calls == [1, 2, 4, 8, 16, 32, 50] and r.capacity == 50
    curve = Curve()
    r = await find_capacity(curve.measure, parse_slo(["tpot_p90:1000"]), max_concurrency=1)
    assert curve.calls == [1] and r.capacity == 1


async def test_nothing_met_gives_no_capacity_and_the_closest_step():
    curve = Curve(base_ms=40.0)
    r = await find_capacity(curve.measure, parse_slo(["tpot_p90:30", "ttft_p90:1000"]))
    assert curve.calls == [1]  # more users only add latency
    assert r.capacity is None and r.throughput_at_capacity is None
    assert r.closest is not None and r.closest.concurrency == 1 and not r.closest.met
    assert r.closest.reasons == ["tpot_p90 40.5 ms > 30 ms"]
    assert r.single_user_tok_s is not None


async def test_find_capacity_rejects_bad_settings():
    with pytest.raises(ValueError, match="max_steps=0"):
        await find_capacity(Curve().measure, parse_slo(["tpot_p90:30"]), max_steps=0)


async def test_result_round_trips_through_json():
    r = await find_capacity(Curve(base_ms=40.0).measure, parse_slo(["tpot_p90:30"]))
    back = CapacityResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r
    r = await find_capacity(Curve().measure, parse_slo(["tpot_p90:30"]))
    d = json.loads(json.dumps(r.to_dict()))
    assert set(d) == {"capacity", "single_user_tok_s", "throughput_at_capacity", "steps", "closest"}
    assert CapacityResult.from_dict(d) == r


@pytest.mark.parametrize(
    ("patch", "words"),
    [
        ({"capacity": 0}, "capacity result.capacity: expected a whole number >= 1 or null"),
        ({"single_user_tok_s": "fast"}, "capacity result.single_user_tok_s: expected a number or null"),
        ({"steps": [{"concurrency": 2, "met": "yes"}]}, "capacity result.steps[0].met: expected true or false"),
        ({"closest": {"concurrency": -1, "met": False}}, "capacity result.closest.concurrency"),
    ],
)
def test_from_dict_names_the_bad_field(patch, words):
    d = {**CapacityResult(4, 60.0, [CapacityStep(4, True, [], {})]).to_dict(), **patch}
    with pytest.raises(ValueError) as e:
        CapacityResult.from_dict(d)
    assert words in str(e.value)


# ---------------------------------------------------------------------- tunedeck bench --capacity: bad input


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--slo", "ttft_p90:500"], "--slo is the target of --capacity: add --capacity"),
        (["--capacity"], "--capacity needs --slo METRIC:BOUND"),
        (["--capacity", "--slo", "ttft_p90:500", "--concurrency", "4"], "drop --concurrency/--request-rate"),
        (["--capacity", "--slo", "ttft_p9:500"], "--slo: SLO term 'ttft_p9:500': unknown metric 'ttft_p9'"),
    ],
)
def test_bench_capacity_bad_input_is_one_line_and_exit_2(argv, words, capsys):
    from tunedeck.cli import main

    assert main(["bench", "--url", "http://127.0.0.1:9", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tunedeck bench: ") and words in err and "\n" not in err


def test_bench_capacity_needs_the_url(capsys):
    from tunedeck.cli import main

    assert main(["bench", "--demo", "--port", "9", "--capacity", "--slo", "tpot_p90:50"]) == 2
    assert "--capacity runs the client here, against --url" in capsys.readouterr().err
