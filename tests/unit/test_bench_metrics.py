"""vLLM's calculate_metrics, checked against values computed by hand."""

import math

import pytest

from tunedeck.bench import metrics
from tunedeck.bench.prompts import arrival_offsets, make_prompts

A = {
    "success": True,
    "start_time": 0.0,
    "ttft": 0.1,
    "itl": [0.05, 0.05, 0.1],
    "latency": 0.3,
    "output_tokens": 4,
    "prompt_len": 10,
    "usage_present": True,
    "client_queue_time": 0.0,
}
B = {
    "success": True,
    "start_time": 0.5,
    "ttft": 0.2,
    "itl": [0.1],
    "latency": 0.3,
    "output_tokens": 2,
    "prompt_len": 20,
    "usage_present": True,
    "client_queue_time": 0.1,
}
C = {
    "success": False,
    "error_type": "HTTPStatus",
    "start_time": 0.6,
    "ttft": 0.0,
    "itl": [],
    "latency": 0.0,
    "output_tokens": 0,
    "prompt_len": 7,
}
D = {
    "success": True,
    "start_time": 1.0,
    "ttft": 0.4,
    "itl": [],
    "latency": 0.4,
    "output_tokens": 1,
    "prompt_len": 5,
    "usage_present": False,
    "client_queue_time": 0.2,
}


def approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-9)


def test_percentile_matches_numpy_linear():
    assert metrics.percentile([1, 2, 3, 4], 25) == approx(1.75)
    assert metrics.percentile([15, 20, 35, 40, 50], 40) == approx(29.0)
    assert metrics.percentile([3, 1, 2], 50) == approx(2.0)
    assert metrics.percentile([5.0], 99) == approx(5.0)
    assert metrics.percentile([], 99) == 0.0
    assert metrics.median([1, 2, 3, 10]) == approx(2.5)
    with pytest.raises(ValueError):
        metrics.percentile([1], 101)


def test_std_is_population():
    assert metrics.std([1, 2, 3, 4]) == approx(math.sqrt(1.25))
    assert metrics.std([]) == 0.0


def test_p_word():
    assert metrics.p_word(99.0) == "99" and metrics.p_word(99.9) == "99.9"


def test_calculate_metrics_hand_values():
    r = metrics.calculate_metrics([A, B, C, D], 2.0, percentiles=[90, 99])
    assert r["completed"] == 3 and r["failed"] == 1
    assert r["total_input_tokens"] == 35 and r["total_output_tokens"] == 7
    assert r["request_throughput"] == approx(1.5)
    assert r["output_throughput"] == approx(3.5)
    assert r["total_token_throughput"] == approx(21.0)
    assert r["request_goodput"] is None
    # TTFT over A, B, D: 0.1, 0.2, 0.4
    assert r["mean_ttft_ms"] == approx(700 / 3)
    assert r["median_ttft_ms"] == approx(200.0)
    assert r["std_ttft_ms"] == pytest.approx(124.7219128924647, rel=1e-9)
    assert r["p90_ttft_ms"] == approx(360.0)
    assert r["p99_ttft_ms"] == approx(396.0)
    # TPOT: A (0.3-0.1)/3, B (0.3-0.2)/1; D has one token and is left out
    assert r["mean_tpot_ms"] == approx((200 / 3 + 100) / 2)
    assert r["p99_tpot_ms"] == approx(200 / 3 + (100 - 200 / 3) * 0.99)
    # ITL pooled: 0.05, 0.05, 0.1, 0.1
    assert r["mean_itl_ms"] == approx(75.0)
    assert r["median_itl_ms"] == approx(75.0)
    assert r["std_itl_ms"] == approx(25.0)
    assert r["p90_itl_ms"] == approx(100.0)
    # E2EL: 0.3, 0.3, 0.4
    assert r["mean_e2el_ms"] == approx(1000 / 3)
    assert r["median_e2el_ms"] == approx(300.0)
    # events at 0.1 0.15 0.2 0.3 | 0.7 0.8 | 1.4 → 6 in the first second
    assert r["max_output_tokens_per_s"] == 6.0
    # vLLM's 1-s buckets: A and B are both active in second 0 (never at the same instant)
    assert r["max_concurrent_requests"] == 2 and r["max_overlap_requests"] == 1
    assert r["error_counts"] == {"HTTPStatus": 1}
    assert r["errors"] == ["", "", "HTTPStatus", ""]  # vLLM: one entry per request, in order
    assert r["mean_tokens_per_event"] == approx(7 / 7)
    assert r["usage_missing"] == 1
    assert r["mean_client_queue_time_ms"] == approx(100.0)
    assert r["decode_tok_s_per_user"] == approx(1000 / r["median_tpot_ms"])


def test_goodput():
    r = metrics.calculate_metrics([A, B, C, D], 2.0, goodput={"ttft": 250})
    assert r["request_goodput"] == approx(1.0)  # A and B
    r = metrics.calculate_metrics([A, B, C, D], 2.0, goodput={"ttft": 250, "tpot": 70})
    assert r["request_goodput"] == approx(0.5)  # A only (B's TPOT is 100 ms)
    r = metrics.calculate_metrics([A, B, C, D], 2.0, goodput={"tpot": 70})
    assert r["request_goodput"] == approx(1.0)  # A, and D counts as TPOT 0
    r = metrics.calculate_metrics([A, B, C, D], 2.0, goodput={"e2el": 300})
    assert r["request_goodput"] == approx(1.0)  # value <= SLO is good


def test_goodput_itl_target_is_the_largest_gap_of_a_request():
    # A's gaps 50, 50, 100 ms; B's 100 ms; D has a single event (no gap: counts as 0)
    r = metrics.calculate_metrics([A, B, C, D], 2.0, goodput={"itl": 99})
    assert r["request_goodput"] == approx(0.5)  # D only
    r = metrics.calculate_metrics([A, B, C, D], 2.0, goodput={"itl": 100})
    assert r["request_goodput"] == approx(1.5)  # A, B and D: value <= SLO is good
    r = metrics.calculate_metrics([A, B, C, D], 2.0, goodput={"itl": 100, "ttft": 150})
    assert r["request_goodput"] == approx(0.5)  # A only: every target at once


def test_meets_slo_is_the_summary_rule():
    slo = metrics.slo_seconds({"ttft": 250, "tpot": 70})
    assert [metrics.meets_slo(s, slo) for s in (A, B, D)] == [True, False, False]
    assert metrics.slo_value(D, "tpot") == 0.0 and metrics.slo_value(A, "itl") == 0.1
    with pytest.raises(ValueError):
        metrics.slo_value(A, "tbt")


def test_max_concurrent_is_vllms_per_second_count_and_overlap_is_sweep_line():
    def s(start, lat):
        return {"success": True, "start_time": start, "ttft": lat, "itl": [], "latency": lat, "output_tokens": 1}

    # vLLM: a request counts in every 1-s bin from int(start - t0) to int(end - t0), inclusive
    assert metrics.max_concurrent([s(0, 1), s(1, 1)]) == 2  # both touch second 1
    assert metrics.max_overlap([s(0, 1), s(1, 1)]) == 1  # departure before arrival at t=1
    assert metrics.max_concurrent([s(0, 0.4), s(0.5, 0.4)]) == 2 and metrics.max_overlap([s(0, 0.4), s(0.5, 0.4)]) == 1
    assert metrics.max_concurrent([s(0, 3), s(0.5, 1), s(1, 1), s(2.5, 1)]) == 3
    assert metrics.max_overlap([s(0, 3), s(0.5, 0.5), s(1, 1), s(2.5, 1)]) == 2
    assert metrics.max_concurrent([s(0, 3), s(0.5, 0.5), s(1, 1), s(2.5, 1)]) == 3
    assert metrics.max_concurrent([s(0, 0.2), s(5, 0.2)]) == 1
    assert metrics.max_concurrent([]) == 0


def test_peak_counts_events_not_tokens():
    s = {
        "success": True,
        "start_time": 10.0,
        "ttft": 0.5,
        "itl": [0.2, 0.2, 0.2, 0.2],
        "latency": 1.3,
        "output_tokens": 40,
    }
    # events at 10.5 10.7 10.9 | 11.1 11.3 → bins from t0=10: [3, 2]
    assert metrics.peak_output_per_s([s]) == 3.0


def test_empty_gives_zero_like_vllm():
    r = metrics.calculate_metrics([C], 1.0)
    assert r["completed"] == 0 and r["mean_ttft_ms"] == 0.0 and r["p99_itl_ms"] == 0.0
    assert r["max_output_tokens_per_s"] == 0.0


def test_parse_goodput_errors():
    assert metrics.parse_goodput(["ttft:200", "tpot:50 e2el:1000"]) == {"ttft": 200, "tpot": 50, "e2el": 1000}
    assert metrics.parse_goodput(["itl:80"]) == {"itl": 80.0}
    for bad in ("ttft", "tbt:5", "ttft:abc", "ttft:-1", "e2el:inf"):
        with pytest.raises(ValueError) as ei:
            metrics.parse_goodput([bad])
        assert bad in str(ei.value)


def test_format_result_vllm_layout():
    r = metrics.calculate_metrics([A, B, D], 2.0)
    r.update(max_concurrency=4, request_rate="inf")
    text = metrics.format_result(r, [99])
    lines = text.splitlines()
    assert lines[0] == "{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")
    assert "Successful requests:                     3         " in lines
    assert "Maximum request concurrency:             4         " in lines
    assert any(ln.startswith("Mean TTFT (ms):") and ln.split()[-1] == "233.33" for ln in lines)
    assert any(ln.startswith("P99 ITL (ms):") for ln in lines)
    assert "Time per Output Token (excl. 1st token)" in text
    assert lines[-1] == "=" * 50


def test_prompts_and_arrivals_are_seeded():
    a = make_prompts(5, 12, 7, seed=3)
    b = make_prompts(5, 12, 7, seed=3)
    assert [p.prompt for p in a] == [p.prompt for p in b]
    assert all(len(p.prompt.split()) == 12 == p.prompt_len for p in a)
    assert len({p.prompt for p in a}) == 5
    assert make_prompts(1, 12, 7, seed=4)[0].prompt != a[0].prompt
    off = arrival_offsets(4000, 10.0, 1.0, seed=1)
    assert off == arrival_offsets(4000, 10.0, 1.0, seed=1)
    assert off[0] == 0.0
    gaps = [b - a for a, b in zip(off, off[1:])]
    assert metrics.mean(gaps) == pytest.approx(0.1, rel=0.05)
    assert metrics.std(gaps) == pytest.approx(0.1, rel=0.1)  # exponential: std = mean
    bursty = [b - a for a, b in zip(*(lambda o: (o, o[1:]))(arrival_offsets(4000, 10.0, 0.25, seed=1)))]
    assert metrics.std(bursty) > 1.5 * metrics.std(gaps)  # shape 0.25: cv = 2
    assert arrival_offsets(3, math.inf, 1.0, 0) == [0.0, 0.0, 0.0]


def test_token_id_prompts_have_the_exact_length():
    a = make_prompts(4, 37, 5, seed=2, token_ids=True)
    assert all(len(p.prompt) == 37 == p.prompt_len and p.exact for p in a)
    assert all(isinstance(t, int) and 1000 <= t < 30000 for p in a for t in p.prompt)
    assert a[0].prompt == make_prompts(1, 37, 5, seed=2, token_ids=True)[0].prompt
    assert len({tuple(p.prompt) for p in a}) == 4
