"""Chunked prefill and a full KV cache in the simulator (docs/sim-model.md, "Workload-dependent
serving"): a long prompt is prefilled chunk by chunk (SGLang pauses decode meanwhile, vLLM decodes
beside each chunk), and vLLM preempts when the KV cache runs out, counts it and still finishes
every request. Real simulator processes on loopback, real HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.simfix import SimProc, free_port

pytestmark = pytest.mark.timeout(180)

LONG = 8192  # tokens of the long prompt
CHUNK = 1024


def long_beside_stream(engine: str, tmp_path: Path, *flags: str) -> tuple[dict, dict, str]:
    """Stream A decodes while a LONG-token prompt B arrives; (A's record, B's record, output)."""
    port = free_port()
    rec = tmp_path / f"{engine}.jsonl"
    model = ["--model-path", "m", "--tp", "8"] if engine == "sglang" else ["m", "-tp", "8"]
    args = [*model, "--port", str(port), "--sim-load-seconds", "1", "--sim-record-timestamps", str(rec), *flags]
    with SimProc(engine, *args) as p:
        p.wait_ready(60)
        base = f"http://127.0.0.1:{port}"
        started = threading.Event()

        def stream_a() -> None:
            body = {"model": "m", "prompt": "x", "max_tokens": 300, "ignore_eos": True, "stream": True}
            with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=60) as r:
                for n, _line in enumerate(r.iter_lines()):
                    if n == 20:
                        started.set()

        t = threading.Thread(target=stream_a)
        t.start()
        assert started.wait(30)
        b = httpx.post(
            f"{base}/v1/completions", json={"model": "m", "prompt": "abcd" * LONG, "max_tokens": 1}, timeout=60
        )
        assert b.status_code == 200 and b.json()["usage"]["prompt_tokens"] == LONG
        t.join(60)
        p.stop()
        raw = p.raw
    recs = [json.loads(x) for x in rec.read_text().splitlines()]
    (a,) = [r for r in recs if r["prompt_tokens"] == 1]
    (bb,) = [r for r in recs if r["prompt_tokens"] == LONG]
    return a, bb, raw


def during(a: dict, b: dict) -> int:
    """A's chunks written while B was being prefilled (after its arrival, before its first token)."""
    return sum(1 for x in a["times"] if b["arrival"] < x < b["times"][0])


def test_sglang_chunks_a_long_prefill_and_decode_waits(tmp_path):
    a, b, raw = long_beside_stream("sglang", tmp_path, "--chunked-prefill-size", str(CHUNK))
    batches = re.findall(r"Prefill batch, #new-seq: 1, #new-token: (\d+), #cached-token: (\d+),", raw)
    assert [int(n) for n, _c in batches[-LONG // CHUNK :]] == [CHUNK] * (LONG // CHUNK)
    assert all(c == "0" for _n, c in batches[-LONG // CHUNK :])  # earlier chunks are not cache hits
    assert during(a, b) <= 2  # at most the decode step running when B arrived (and one at a k-step edge)
    assert a["completion_tokens"] == 300


def test_vllm_chunks_a_long_prefill_beside_decode(tmp_path):
    a, b, _raw = long_beside_stream("vllm", tmp_path, "--max-num-batched-tokens", str(CHUNK))
    # B needs LONG / (CHUNK - 1) steps (A's decode takes a token of each step's budget); A emits in each
    assert during(a, b) >= LONG // CHUNK
    assert a["completion_tokens"] == 300


def test_vllm_preempts_on_a_full_kv_cache_and_finishes_every_request():
    port = free_port()
    # TP8 of the model "m" on simulated H200s: 0.1334 of the memory leaves ~6,000 KV tokens
    args = ["m", "-tp", "8", "--port", str(port), "--sim-load-seconds", "1", "--sim-speed", "4"]
    args += ["--gpu-memory-utilization", "0.1334", "--max-model-len", "2048", "--sim-stats-interval", "0.5"]
    with SimProc("vllm", *args) as p:
        p.wait_ready(60)
        kv = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", p.raw).group(1).replace(",", ""))
        assert 2048 <= kv <= 8000
        base = f"http://127.0.0.1:{port}"

        async def run() -> list[dict]:
            async with httpx.AsyncClient(base_url=base, timeout=120) as c:

                async def one(i: int) -> dict:
                    body = {"model": "m", "prompt": f"{i:04d}" * 500, "max_tokens": 1000, "ignore_eos": True}
                    r = await c.post("/v1/completions", json=body)
                    assert r.status_code == 200, r.text
                    return r.json()["usage"]

                return await asyncio.gather(*(one(i) for i in range(8)))

        usages = asyncio.run(run())
        metrics = httpx.get(f"{base}/metrics").text
        pre = float(re.search(r"^vllm:num_preemptions_total\{[^}]*\} ([\d.]+)$", metrics, re.M).group(1))
        deadline = time.monotonic() + 10
        while logged(p.raw) < pre and time.monotonic() < deadline:
            time.sleep(0.1)  # the stat line of the last interval
    assert all(u["completion_tokens"] == 1000 for u in usages)  # nothing lost to a preemption
    assert pre >= 1
    assert logged(p.raw) == pre


def logged(raw: str) -> int:
    """Preemptions the vLLM stat lines report, all intervals together."""
    return sum(int(x) for x in re.findall(r"Running: \d+ reqs, Waiting: \d+ reqs, Preemptions: (\d+), GPU KV", raw))
