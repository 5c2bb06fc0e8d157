"""What the simulator's performance model (tui/sim/perf.py, docs/sim-model.md) predicts for
sglang-tuned over sglang-base, for the end-to-end A/B tests."""

from __future__ import annotations


def expected_gain_pct(concurrency: int) -> float:
    """Decode speed-up of the sglang-tuned profile over sglang-base at ``concurrency``, in %."""
    from tui.sim import perf

    pcie = (
        ("NCCL_ALGO", "Ring"),
        ("NCCL_BUFFSIZE", "16777216"),
        ("NCCL_MAX_NCHANNELS", "16"),
        ("NCCL_NTHREADS", "512"),
        ("NCCL_P2P_LEVEL", "SYS"),
        ("NCCL_PROTO", "LL"),
    )
    base = perf.PerfConfig("sglang", 8)
    tuned = perf.PerfConfig(
        "sglang", 8, attention_backend="flashinfer", decode_steps=4, disable_custom_all_reduce=True, nccl_env=pcie
    )
    return (perf.throughput(tuned, concurrency)[1] / perf.throughput(base, concurrency)[1] - 1.0) * 100.0
