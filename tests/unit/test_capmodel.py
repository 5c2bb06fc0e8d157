"""The simulator's capacity model (tunedeck.sim.capmodel): configuration from the flags, one level's
figures, and the capacity at an SLO that campaigns rank by."""

from __future__ import annotations

import pytest

from tunedeck.ab.capacity import parse_slo
from tunedeck.sim import capmodel, perf


def sglang(*flags: str) -> capmodel.ServeConfig:
    return capmodel.serve_config("sglang", ["--model-path", "m", "--tp", "8", *flags])


def test_serve_config_reads_the_flags_the_scheduler_serves_with():
    d = sglang()
    assert (d.max_running, d.prefill_budget, d.chunk_size) == (2048, 16384, 8192)
    assert d.perf == perf.PerfConfig("sglang", 8)
    t = sglang(
        "--attention-backend", "flashinfer", "--max-running-requests", "32", "--chunked-prefill-size", "-1",
        "--num-continuous-decode-steps", "4",
    )  # fmt: skip
    assert (t.max_running, t.chunk_size, t.perf.attention_backend, t.perf.decode_steps) == (32, None, "flashinfer", 4)
    s = sglang("--speculative-algorithm", "EAGLE3")
    assert s.max_running == 48 and s.perf.spec == perf.SpecConfig("EAGLE3", 3, 1, 4)
    v = capmodel.serve_config("vllm", ["serve", "m", "-tp", "4", "--max-num-seqs", "64"], {"NCCL_PROTO": "LL"})
    assert (v.max_running, v.prefill_budget, v.chunk_size, v.perf.tp) == (64, 8192, 8192, 4)
    assert v.perf.nccl_env == (("NCCL_PROTO", "LL"),)
    with pytest.raises(ValueError, match="engine 'trt'"):
        capmodel.serve_config("trt", [])


def test_one_level_follows_the_performance_model():
    sc = sglang()
    one = capmodel.predict_level(sc, 128, 256, 1)
    # the calibration target: 64 tok/s for one stream
    assert one["per_user_output_throughput"] == pytest.approx(64.0, rel=0.01)
    assert one["median_tpot_ms"] == pytest.approx(1000 * perf.decode_step_time(sc.perf, 1), rel=0.01)
    lv = capmodel.predict_level(sc, 32, 32, 48)
    step = perf.decode_step_time(sc.perf, 48)
    prefill = perf.prefill_time(sc.perf, 48 * 32)
    assert lv["p90_tpot_ms"] == pytest.approx(1000 * (step + prefill / 31))
    assert lv["p90_ttft_ms"] == pytest.approx(1000 * prefill)
    # prompts over the chunk are prefilled chunk by chunk
    assert capmodel.cycle_prefill(sc, 8192 * 2 + 10) == pytest.approx(
        2 * perf.prefill_time(sc.perf, 8192) + perf.prefill_time(sc.perf, 10)
    )


def test_a_running_request_cap_queues_and_ttft_jumps_past_it():
    sc = sglang("--max-running-requests", "16")
    short = capmodel.predict_level(sc, 32, 32, 16)["p90_ttft_ms"]
    assert capmodel.predict_level(sc, 32, 32, 17)["p90_ttft_ms"] == pytest.approx(short)  # 1 in 16 waits
    long = capmodel.predict_level(sc, 32, 32, 18)["p90_ttft_ms"]  # 2 in 16 wait: p90 is a queued request
    assert long > 10 * short
    assert capmodel.predict_level(sc, 32, 32, 32)["median_ttft_ms"] == pytest.approx(long)
    # the decode batch stays at the cap: TPOT does not grow past it
    assert capmodel.predict_level(sc, 32, 32, 64)["p90_tpot_ms"] == pytest.approx(
        capmodel.predict_level(sc, 32, 32, 16)["p90_tpot_ms"]
    )


def test_the_demo_campaign_grid_has_one_best_candidate():
    """SGLang: attention backend x --max-running-requests under a TTFT/TPOT SLO (docs/sim-model.md)."""
    slo = parse_slo(["ttft_p90:500", "tpot_p90:30"])
    caps = {
        (be, r): capmodel.predicted_capacity(
            sglang("--attention-backend", be, "--max-running-requests", str(r)), slo, input_len=128, output_len=256
        )
        for be in ("fa3", "flashinfer", "triton")
        for r in (32, 128)
    }
    assert caps == {
        ("fa3", 32): 35,
        ("flashinfer", 32): 35,
        ("triton", 32): 35,
        ("fa3", 128): 48,
        ("flashinfer", 128): 51,
        ("triton", 128): 41,
    }
    best = max(caps.values())
    assert [k for k, v in caps.items() if v == best] == [("flashinfer", 128)]
    assert capmodel.predicted_single_user_tok_s(
        sglang("--attention-backend", "flashinfer"), input_len=128, output_len=256
    ) > (capmodel.predicted_single_user_tok_s(sglang(), input_len=128, output_len=256))


def test_capacity_is_zero_when_one_user_misses():
    assert capmodel.predicted_capacity(sglang(), parse_slo(["tpot_p90:10"]), input_len=32, output_len=32) == 0
    # and max_concurrency caps a search that never misses
    assert (
        capmodel.predicted_capacity(
            sglang(), parse_slo(["tpot_p90:10000"]), input_len=8, output_len=8, max_concurrency=40
        )
        == 40
    )
