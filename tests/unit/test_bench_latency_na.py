"""Live bench latency: a level with no finished request shows N/A, never 0 ms."""

from __future__ import annotations

from tunedeck.bench.levels import Progress
from tunedeck.ui.screens.bench import latency_line


def test_tick_before_first_sample_has_no_latency_numbers():
    p = Progress(level=0, t0=0.0, total=10)
    t = p.tick(1.5)
    assert t["ttft_p50_ms"] is None and t["ttft_p99_ms"] is None
    assert t["itl_p50_ms"] is None and t["itl_p99_ms"] is None
    assert latency_line(t) == "TTFT p50 N/A  p99 N/A    ITL p50 N/A  p99 N/A"


def test_tick_after_samples_has_real_numbers():
    p = Progress(level=0, t0=0.0, total=10)
    p.add_sample({"success": True, "output_tokens": 3, "ttft": 0.006, "itl": [0.015, 0.016]})
    t = p.tick(2.0)
    assert abs(t["ttft_p50_ms"] - 6.0) < 1e-9
    assert abs(t["itl_p99_ms"] - 15.99) < 1e-6
    assert latency_line(t) == "TTFT p50 6.0 ms  p99 6.0 ms    ITL p50 15.50 ms  p99 15.99 ms"
