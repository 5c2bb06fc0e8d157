"""What the simulator's performance model (tui/sim/perf.py, docs/sim-model.md) predicts for
sglang-tuned over sglang-base, for the end-to-end A/B tests."""

from __future__ import annotations


def expected_gain_pct(concurrency: int) -> float:
    """Decode speed-up of the sglang-tuned profile over sglang-base at ``concurrency``, in %."""
    from tunedeck.sim import perf

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


def assert_b_wins_unless_busy(rep: dict) -> None:
    """The simulated tuned side wins, unless the test machine was busy: a level whose client
    machine was busy (or was the limit) carries no headline, and then the headline says so."""
    cmp = rep["comparison"]
    busy = {
        lv["concurrency"]
        for side in ("a", "b")
        for run in rep[side]["runs"]
        for lv in run["levels"]
        if lv["summary"].get("machine_busy") or lv["summary"].get("client_bound")
    }
    if cmp["winner"] is None:
        assert busy and "Not judged" in cmp["headline"], cmp["headline"]
    else:
        assert cmp["winner"] == "B", cmp["headline"]
