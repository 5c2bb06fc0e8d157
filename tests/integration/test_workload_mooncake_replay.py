"""A Mooncake trace file replayed as an operator runs it: ``tunedeck bench --host local --port P
--dataset-name mooncake --dataset-path FILE`` (the client a host-side job next to the simulated
vLLM): every row is sent once, at its timestamp and in its order, and rows that share ``hash_ids``
blocks hit the simulator's prefix cache. The tight dispatch-lag figure (p99 <= 2 ms over 2,000
rows) is ``benchmarks/trace_replay.py``'s; this bound holds on a loaded 2-core machine."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.simfix import SimProc, free_port
from tests.traces import mooncake_rows, write_jsonl
from tunedeck.bench import metrics, store
from tunedeck.bench.workloads import MOONCAKE_BLOCK

pytestmark = pytest.mark.timeout(120)

ROWS, SPEED = 300, 2.0


def counter(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([\d.e+-]+)$", text, re.M)
    assert m, f"{name} missing from /metrics"
    return float(m.group(1))


def file_shared_ratio(rows: list[dict]) -> float:
    """The share of prompt tokens in leading ``hash_ids`` blocks an earlier row already had: what
    equal ids as equal prefixes give a prefix cache, read from the file alone."""
    seen: set[tuple[int, ...]] = set()
    shared = 0
    for row in rows:
        ids = row["hash_ids"]
        k = max((i for i in range(1, len(ids) + 1) if tuple(ids[:i]) in seen), default=0)
        shared += min(k * MOONCAKE_BLOCK, row["input_length"])
        seen.update(tuple(ids[:i]) for i in range(1, len(ids) + 1))
    return shared / sum(row["input_length"] for row in rows)


def test_a_mooncake_file_replays_on_the_host_in_order_with_its_shared_blocks_cached(tmp_path: Path) -> None:
    # ~12 s of trace at 2x: short prompts and answers, so the simulator keeps up on a loaded machine
    rows = mooncake_rows(ROWS, 10.0, 3, input_median=600, input_max=2048, output_median=8, output_max=32)
    assert sum(1 for r in rows if len(r["hash_ids"]) > 1) > ROWS // 2  # most rows share a leading block
    trace = write_jsonl(tmp_path / "trace.jsonl", rows)
    opts = ["--dataset-name", "mooncake", "--dataset-path", str(trace), "--trace-speed", str(SPEED)]
    opts += ["--request-rate", "inf", "--warmup", "0"]  # a trace replays uncapped, as it was recorded
    r = subprocess.run(
        [*tunedeck_cmd(), "bench", "--preview", "--json", *opts], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert r.returncode == 0, r.stderr
    (preview,) = json.loads(r.stdout)
    planned = file_shared_ratio(rows)
    assert planned > 0.3 and preview["prefix_shared_ratio"] == pytest.approx(planned, abs=0.02), preview
    rec = tmp_path / "received.jsonl"
    port = free_port()
    with SimProc(
        "vllm", "m", "-tp", "8", "--port", str(port), "--sim-load-seconds", "1", "--sim-record-timestamps", str(rec)
    ) as p:
        p.wait_ready(60)
        r = subprocess.run(
            [*tunedeck_cmd(), "bench", "--host", "local", "--port", str(port), *opts, "--json", "-"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=90,
        )
        after = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        p.stop()
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout)
    assert s["completed"] == ROWS and s["failed"] == 0 and s["workload"]["sha256"] == preview["sha256"]
    assert s["client"]["where"] == "host" and s["client"]["via"] == "host loopback", s["client"]

    # every row once, at its own timestamp (index = the row's place in the file)
    samples = store.read_samples(s["run_id"])
    assert sorted(x["index"] for x in samples) == list(range(ROWS))
    for x in samples:
        want = (rows[x["index"]]["timestamp"] - rows[0]["timestamp"]) / 1000.0 / SPEED
        assert x["scheduled_at"] == pytest.approx(want, abs=1e-6), x
        assert x["prompt_len"] == rows[x["index"]]["input_length"]
        assert x["sent_at"] >= x["scheduled_at"] - 1e-6  # never early
    # in timestamp order: sent in the order the trace schedules them
    by_sent = sorted(samples, key=lambda x: x["sent_at"])
    assert all(a["scheduled_at"] <= b["scheduled_at"] for a, b in zip(by_sent, by_sent[1:]))
    # the simulator received each row once: the same prompt lengths, nothing more
    got = [json.loads(line) for line in rec.read_text().splitlines()]
    assert Counter(g["prompt_tokens"] for g in got) == Counter(row["input_length"] for row in rows)

    lag = metrics.dispatch_lag(samples)
    assert lag["dispatch_lag_p99_ms"] == pytest.approx(s["dispatch_lag_p99_ms"])
    assert lag["dispatch_lag_p99_ms"] < 50.0, lag

    # shared hash_ids blocks hit the prefix cache; the level's figure is the server's counters
    # (the simulator served nothing else, so its lifetime totals are the level's differences)
    hits, queries = counter(after, "vllm:prefix_cache_hits_total"), counter(after, "vllm:prefix_cache_queries_total")
    assert queries == sum(row["input_length"] for row in rows)
    assert s["prefix_cache_hit_rate"] == pytest.approx(hits / queries, abs=1e-6)
    # requests in flight together may miss a block still being prefilled, never hit more than is shared
    assert 0.5 * planned < s["prefix_cache_hit_rate"] <= planned + 0.01, (s["prefix_cache_hit_rate"], planned)
