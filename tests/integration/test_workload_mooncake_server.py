"""A Mooncake trace's shared blocks, checked on the server's side: equal ``hash_ids`` become equal
prompt prefixes, so the simulated vLLM's prefix cache hits exactly the tokens the trace shares,
and the hit rate `tunedeck bench` records over the level (the server's counters differenced)
equals the sharing the workload preview computes from the same prompt set."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.clifix import cli_json
from tests.simfix import SimProc, free_port
from tunedeck.bench.workloads import MOONCAKE_BLOCK

pytestmark = pytest.mark.timeout(240)


def write_trace(path: Path, rows: int, seed: int) -> None:
    """Rows 40 ms apart whose hash ids come from four "system prompts" of 1-3 blocks each, then
    fresh blocks: a chat service's shape, as Mooncake's traces record it."""
    rng = random.Random(seed)
    systems = [[100 + 10 * s + b for b in range(1 + s % 3)] for s in range(4)]
    fresh = 1000
    with path.open("w") as f:
        for i in range(rows):
            ids = list(rng.choice(systems))
            for _ in range(rng.randint(0, 2)):
                ids.append(fresh)
                fresh += 1
            tail = rng.randint(1, MOONCAKE_BLOCK)  # the last block is partly used
            n = (len(ids) - 1) * MOONCAKE_BLOCK + tail
            f.write(json.dumps({"timestamp": 40 * i, "input_length": n, "output_length": 4, "hash_ids": ids}) + "\n")


def test_equal_hash_ids_are_equal_prefixes_at_the_server(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    write_trace(trace, 60, seed=5)
    opts = ["--dataset-name", "mooncake", "--dataset-path", str(trace), "--concurrency", "1", "--warmup", "0"]
    (preview,) = cli_json("bench", "--preview", "--json", *opts, timeout=60)
    assert preview["requests"] == 60 and preview["prefix_shared_ratio"] > 0.3, preview
    port = free_port()
    with SimProc("vllm", "m", "-tp", "8", "--port", str(port), "--sim-load-seconds", "1") as p:
        p.wait_ready(60)
        s = cli_json("bench", "--url", f"http://127.0.0.1:{port}", *opts, "--json", timeout=180)
    assert s["completed"] == 60 and s["workload"]["sha256"] == preview["sha256"]
    # one request at a time: each finds in the cache exactly what earlier prompts shared with it
    assert s["prefix_cache_hit_rate"] == pytest.approx(preview["prefix_shared_ratio"], abs=0.01), (
        s["prefix_cache_hit_rate"],
        preview["prefix_shared_ratio"],
    )
