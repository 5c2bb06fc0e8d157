"""``tunedeck bench --dataset-name shared_prefix`` end to end against the simulated SGLang: with its
radix cache on, the level's prefix-cache hit rate (the server's counters, read before and after
the level and differenced by the bench) is the sharing the workload plans and TTFT falls; with
``--disable-radix-cache`` the hits and the TTFT difference are gone. The same effect with raw
HTTP is ``test_sim_workload_prefix.py``'s."""

from __future__ import annotations

import pytest

from tests.clifix import cli_json
from tests.simfix import SimProc, free_port
from tunedeck.sim import perf

pytestmark = pytest.mark.timeout(120)

GROUPS, PER_GROUP, SYSTEM, QUESTION = 4, 16, 2048, 128
#: each group's first prompt fills the cache with its system prompt; the other 15 hit it
PLANNED = GROUPS * (PER_GROUP - 1) * SYSTEM / (GROUPS * PER_GROUP * (SYSTEM + QUESTION))
OPTS = [
    "--dataset-name", "shared_prefix", "--gsp-num-groups", str(GROUPS), "--gsp-prompts-per-group", str(PER_GROUP),
    "--gsp-system-prompt-len", str(SYSTEM), "--gsp-question-len", str(QUESTION), "--gsp-output-len", "4",
    # one request at a time: each prompt's TTFT is its own prefill, and no prompt of a group arrives
    # before its first one has entered the cache; no warmup request fills a group's prefix early
    "--concurrency", "1", "--warmup", "0",
]  # fmt: skip


def bench(*flags: str) -> dict:
    port = free_port()
    with SimProc("sglang", "--model-path", "m", "--tp", "8", "--port", str(port), "--sim-load-seconds", "1",
                 "--enable-metrics", *flags) as p:  # fmt: skip
        p.wait_ready(60)
        s = cli_json("bench", "--url", f"http://127.0.0.1:{port}", *OPTS, "--json", "-", timeout=90)
    assert s["completed"] == GROUPS * PER_GROUP and s["failed"] == 0
    return s


def test_the_radix_cache_serves_the_planned_share_and_cuts_ttft_and_disabling_it_removes_both() -> None:
    (preview,) = cli_json("bench", "--preview", "--json", *OPTS, timeout=60)
    assert preview["prefix_shared_ratio"] == pytest.approx(PLANNED, abs=0.001)

    on, off = bench(), bench("--disable-radix-cache")
    assert on["workload"]["sha256"] == off["workload"]["sha256"] == preview["sha256"]  # one prompt set
    # the level's own counters (not the lifetime gauge)
    assert on["server_counters_note"] is None and off["server_counters_note"] is None
    assert on["prefix_cache_hit_rate"] == pytest.approx(PLANNED, abs=0.02), on["prefix_cache_hit_rate"]
    assert off["prefix_cache_hit_rate"] == pytest.approx(0.0, abs=0.005), off["prefix_cache_hit_rate"]
    # TTFT falls by the prefill the hits skip (the model's figure; the client's loop lag is in both runs)
    cfg = perf.PerfConfig("sglang", 8)
    saving_ms = (
        (PER_GROUP - 1)
        / PER_GROUP
        * (perf.prefill_time(cfg, SYSTEM + QUESTION) - perf.prefill_time(cfg, QUESTION))
        * 1000
    )
    assert off["mean_ttft_ms"] - on["mean_ttft_ms"] > 0.5 * saving_ms, (
        on["mean_ttft_ms"],
        off["mean_ttft_ms"],
        saving_ms,
    )
