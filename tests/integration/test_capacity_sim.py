"""Capacity at an SLO against a running simulated SGLang: the search with the real benchmark engine
on loopback finds the capacity the simulator's model predicts (docs/sim-model.md "Capacity at an SLO")."""

from __future__ import annotations

import dataclasses

import pytest

from tests.simfix import SimProc, free_port
from tunedeck.ab.capacity import find_capacity, parse_slo
from tunedeck.bench.config import BenchConfig
from tunedeck.bench.runner import run_benchmark
from tunedeck.sim import capmodel

# short requests keep each level near a second: 16 output tokens, 3 cycles per level
INPUT_LEN, OUTPUT_LEN = 32, 16
SLO = parse_slo(["ttft_p90:200", "tpot_p90:25"])
#: the running-request cap queues the 17th and later users (TTFT-bound), the default cap does not
#: (TPOT-bound): two predictions that differ
SETTINGS = (["--max-running-requests", "16"], ["--attention-backend", "flashinfer"])


async def search(flags: list[str], tmp_path) -> tuple[int | None, int, list[int]]:
    argv = ["--model-path", "m", "--tp", "8", *flags]
    predicted = capmodel.predicted_capacity(
        capmodel.serve_config("sglang", argv), SLO, input_len=INPUT_LEN, output_len=OUTPUT_LEN
    )
    port = free_port()
    with SimProc("sglang", *argv, "--port", str(port), "--sim-load-seconds", "1") as sim:
        sim.wait_ready(60)
        base = BenchConfig(
            url=f"http://127.0.0.1:{port}",
            input_len=INPUT_LEN,
            output_len=OUTPUT_LEN,
            warmup=1,
            server_counters=False,
        )

        async def measure(c: int) -> dict:
            cfg = dataclasses.replace(base, concurrency=[c], num_prompts=max(3 * c, 4))
            [summary] = await run_benchmark(cfg, results_dir=tmp_path)
            return summary

        r = await find_capacity(measure, SLO, start=8, max_steps=8)
    assert r.single_user_tok_s is not None and r.single_user_tok_s > 0
    return r.capacity, predicted, [s.concurrency for s in r.steps]


@pytest.mark.timeout(180)
async def test_capacity_matches_the_model_for_two_flag_settings(tmp_path):
    found = []
    for flags in SETTINGS:
        cap, predicted, measured = await search(flags, tmp_path)
        assert len(set(measured)) == len(measured)
        assert cap is not None and abs(cap - predicted) <= 0.1 * predicted, (flags, cap, predicted, measured)
        found.append((cap, predicted))
    (cap_a, pred_a), (cap_b, pred_b) = found
    assert pred_a < pred_b and cap_a < cap_b


@pytest.mark.timeout(120)
def test_bench_capacity_cli_writes_the_search(tmp_path):
    """`tunedeck bench --url … --capacity --slo …`: one saved level per step, --json the search."""
    import json
    import subprocess

    from tests.conftest import tunedeck_cmd
    from tunedeck.bench import store

    port = free_port()
    flags = ["--model-path", "m", "--tp", "8", "--max-running-requests", "2"]
    with SimProc("sglang", *flags, "--port", str(port), "--sim-load-seconds", "1"):
        r = subprocess.run(
            [
                *tunedeck_cmd(),
                "bench",
                "--url",
                f"http://127.0.0.1:{port}",
                "--input-len",
                "16",
                "--output-len",
                "8",
                "--capacity",
                "--slo",
                "ttft_p90:100",
                "--json",
                "-",
            ],
            capture_output=True,
            text=True,
            timeout=100,
        )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    # two running requests at most: a third user waits a whole request for its first token
    assert (
        out["capacity"]
        == 2
        == capmodel.predicted_capacity(
            capmodel.serve_config("sglang", flags), parse_slo(["ttft_p90:100"]), input_len=16, output_len=8
        )
    )
    assert [(s["concurrency"], s["met"]) for s in out["steps"]] == [(1, True), (2, True), (4, False), (3, False)]
    assert out["steps"][2]["reasons"][0].startswith("ttft_p90 ")
    assert out["closest"] is None and out["single_user_tok_s"] > 0
    for s in out["steps"]:
        assert store.load_run(s["summary"]["run_id"]).summary["max_concurrency"] == s["concurrency"]
    assert "capacity step C=4: misses the SLO: ttft_p90 " in r.stderr
    assert "capacity at ttft_p90:100: 2 concurrent users" in r.stderr
