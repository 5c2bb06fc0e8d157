"""Prometheus text parser and histogram maths on texts in the engines' formats."""

from __future__ import annotations

import math

import pytest

from tests.fake_engines import SGLANG_METRICS, VLLM_METRICS, fill
from tunedeck.collectors import prom

DOC_EXAMPLE = 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 97.0\n'


def test_doc_example_line() -> None:
    m = prom.parse(DOC_EXAMPLE)
    (s,) = m.samples
    assert s.name == "vllm:time_to_first_token_seconds_bucket"
    assert dict(s.labels) == {"engine": "0", "le": "0.5", "model_name": "m"}
    assert s.value == 97.0 and m.bad_lines == 0


def test_types_created_and_totals() -> None:
    text = fill(VLLM_METRICS, gen=1000, draft=400, acc=300, b1=1, b2=5, b3=10, s=3.2)
    m = prom.parse(text)
    assert m.types["vllm:num_requests_running"] == "gauge"
    assert m.types["vllm:time_to_first_token_seconds"] == "histogram"
    assert not any(s.name.endswith("_created") for s in m.samples)
    assert m.sum("vllm:generation_tokens_total") == 1000
    assert m.sum("vllm:num_requests_running") == 7
    assert m.sum("vllm:absent") is None
    assert m.first("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", agg="mean") == 0.25


def test_label_escapes_and_special_values() -> None:
    text = (
        'x{path="C:\\\\dir",q="say \\"hi\\"",nl="a\\nb",e=""} 1\n'
        "y +Inf\n"
        "z NaN 1700000000000\n"
        'w{a="1",} -2.5e-3\n'
        'broken{a="1" 3\n'
        "novalue\n"
    )
    m = prom.parse(text)
    x = m.get("x")[0]
    # escapes are decoded; a control character a host put in a label is shown, never sent raw to the terminal
    assert dict(x.labels) == {"path": "C:\\dir", "q": 'say "hi"', "nl": "a\\nb", "e": ""}
    assert m.get("y")[0].value == math.inf
    assert math.isnan(m.get("z")[0].value)
    assert m.get("w")[0].value == pytest.approx(-0.0025) and dict(m.get("w")[0].labels) == {"a": "1"}
    assert m.bad_lines == 2


def test_histogram_sums_label_sets_and_quantile() -> None:
    text = (
        'h_bucket{engine="0",le="0.1"} 2\nh_bucket{engine="0",le="1"} 6\nh_bucket{engine="0",le="+Inf"} 8\n'
        'h_sum{engine="0"} 4\nh_count{engine="0"} 8\n'
        'h_bucket{engine="1",le="0.1"} 2\nh_bucket{engine="1",le="1"} 2\nh_bucket{engine="1",le="+Inf"} 2\n'
        'h_sum{engine="1"} 0.1\nh_count{engine="1"} 2\n'
    )
    h = prom.parse(text).histogram("h")
    assert h is not None
    assert h.buckets == ((0.1, 4.0), (1.0, 8.0), (math.inf, 10.0))
    assert h.count == 10 and h.sum == pytest.approx(4.1)
    # rank 5 of 10 lies in (0.1, 1]: 0.1 + 0.9 * (5 - 4) / (8 - 4)
    assert h.quantile(0.5) == pytest.approx(0.325)
    # in the +Inf bucket: the highest finite bound
    assert h.quantile(0.95) == 1.0
    assert prom.parse("").histogram("h") is None


def test_histogram_window_and_reset() -> None:
    t1 = fill(SGLANG_METRICS, b1=10, b2=10, b3=10, s=0.5)
    t2 = fill(SGLANG_METRICS, b1=10, b2=10, b3=20, s=4.5)
    h1 = prom.parse(t1).histogram("sglang:time_to_first_token_seconds")
    h2 = prom.parse(t2).histogram("sglang:time_to_first_token_seconds")
    w = h2.minus(h1)
    assert w.count == 10 and w.sum == pytest.approx(4.0)
    assert 0.25 < w.quantile(0.5) <= 0.5  # all new observations are in (0.25, 0.5]
    assert w.mean() == pytest.approx(0.4)
    assert h1.quantile(0.5) <= 0.1  # cumulative view: the old fast requests dominate
    # a restarted server (counts went down): the window is the new histogram
    assert h1.minus(h2) is h1
    assert math.isnan(prom.Histogram(((math.inf, 0.0),), 0.0, 0.0).quantile(0.5))
