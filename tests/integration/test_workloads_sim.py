"""`tunedeck bench` with workload sources against the simulator (a real process on loopback)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.clifix import run_cli
from tests.simfix import SimProc, free_port, vllm_sim
from tunedeck.bench import store
from tunedeck.bench.workloads.base import estimate_tokens


def _sim(port: int) -> SimProc:
    return vllm_sim(port, ttft_ms=20, itl_ms=2, load_s=1)


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("bench", "--ready-timeout", "30", "--warmup", "0", "--json", "-", *args, timeout=150)


def _summary(r: subprocess.CompletedProcess[str]) -> dict:
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def _bench_url(*args: str) -> dict:
    """``bench --url`` with ``args`` against a simulator of its own: the summary."""
    port = free_port()
    with _sim(port):
        return _summary(_bench("--url", f"http://127.0.0.1:{port}", *args))


@pytest.mark.timeout(200)
def test_shared_prefix_run_completes_with_the_workload_recorded():
    s = _bench_url(
        "--dataset-name", "shared_prefix", "--gsp-num-groups", "3", "--gsp-prompts-per-group", "4",
        "--gsp-system-prompt-len", "64", "--gsp-question-len", "8", "--gsp-output-len", "5", "--concurrency", "4",
    )  # fmt: skip
    assert s["completed"] == 12 == s["num_prompts"] and s["failed"] == 0
    wl = s["workload"]
    assert wl["name"] == "shared_prefix" and len(wl["sha256"]) == 64
    assert wl["params"] == {
        "num_groups": 3,
        "prompts_per_group": 4,
        "system_prompt_len": 64,
        "question_len": 8,
        "output_len": 5,
    }
    assert s["workload_lengths"]["input"]["min"] == s["workload_lengths"]["input"]["max"] == 72
    assert s["params"]["ignore_eos"] is True and s["input_len_mismatch"] == 0
    assert store.load_run(s["run_id"]).meta["workload"] == wl
    samples = store.read_samples(s["run_id"])
    assert sorted(x["prompt_len"] for x in samples) == [72] * 12  # the server counted what was sent
    assert all(x["output_tokens"] == 5 for x in samples)


@pytest.mark.timeout(240)
def test_sharegpt_on_the_host_sends_the_files_prompts_and_lengths(tmp_path):
    pairs = [(f"question {i}: " + "why " * (5 + 7 * i), "because " * (3 + 5 * i)) for i in range(8)]
    data = json.dumps(
        [
            {"id": str(i), "conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]}
            for i, (q, a) in enumerate(pairs)
        ]
    ).encode()
    f = tmp_path / "sharegpt.json"
    f.write_bytes(data)
    port = free_port()
    with _sim(port):
        # --demo: the client runs as a host-side job, reading the file placed there
        r = _bench(
            "--demo", "--port", str(port), "--dataset-name", "sharegpt", "--dataset-path", str(f),
            "--num-prompts", "8", "--concurrency", "2", "--ignore-eos",
        )  # fmt: skip
    s = _summary(r)
    assert s["completed"] == 8 and s["workload"]["name"] == "sharegpt"
    assert s["workload"]["params"]["file_sha256"] == hashlib.sha256(data).hexdigest()
    placed = Path(os.environ["TUNEDECK_HOME"]) / "data" / hashlib.sha256(data).hexdigest()
    assert placed.read_bytes() == data
    # the simulator counts a text prompt as one token per 4 bytes and, with ignore_eos, answers max_tokens
    want = sorted((estimate_tokens(q), estimate_tokens(a)) for q, a in pairs)
    samples = store.read_samples(s["run_id"])
    assert sorted((x["prompt_len"], x["output_tokens"]) for x in samples) == want
    assert s["workload_lengths"]["output"]["max"] == max(o for _, o in want)


@pytest.mark.timeout(200)
def test_text_prompts_are_fitted_to_exact_lengths_with_the_servers_tokenize():
    s = _bench_url(
        "--dataset-name", "text", "--input-len", "60", "--output-len", "3", "--num-prompts", "6", "--concurrency", "3"
    )
    assert s["completed"] == 6 and s["params"]["prompt_lengths"] == "server-tokenizer"
    assert s["workload"]["name"] == "text" and s["params"]["input_len"] == 60
    samples = store.read_samples(s["run_id"])
    assert [x["prompt_len"] for x in samples] == [60] * 6 and all(x["prompt_len_exact"] for x in samples)


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("engine", "flags"),
    [
        ("vllm", ("m", "-tp", "8", "--max-model-len", "300")),
        ("sglang", ("--model-path", "m", "--tp-size", "8", "--context-length", "300")),
    ],
)
def test_a_prompt_over_the_servers_context_is_skipped_and_counted_without_the_option(tmp_path, engine, flags):
    """The server's own context length (its /v1/models max_model_len) skips the one prompt that
    would not fit; --context-limit still wins, and then the server refuses that prompt."""
    rows = [{"prompt": f"question {i}: " + "why " * 20, "output_len": 8} for i in range(5)]
    rows.insert(2, {"prompt": "x" * 1200, "output_len": 8})  # 300 prompt tokens + 8 > 300 (one per 4 bytes)
    f = tmp_path / "c.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    port = free_port()
    common = ("--url", f"http://127.0.0.1:{port}", "--dataset-name", "custom", "--dataset-path", str(f))
    common += ("--num-prompts", "6", "--concurrency", "2")
    with SimProc(engine, *flags, "--port", str(port), "--sim-load-seconds", "0.3") as sim:
        sim.wait_ready(60)
        r = _bench(*common)
        forced = _bench(*common, "--context-limit", "100000")
    s = _summary(r)
    assert s["context_limit"] == {"tokens": 300, "source": "server"}
    assert s["workload_skipped"] == {"over_context_limit": 1}
    assert s["completed"] == 6 and s["failed"] == 0
    assert s["workload_lengths"]["input"]["max"] < 300
    assert "context_limit" not in s["workload"]["params"]
    assert "Context limit: 300 tokens (the server's max_model_len)" in r.stderr
    assert store.load_run(s["run_id"]).meta["context_limit"] == {"tokens": 300, "source": "server"}
    # the operator's limit wins: the long prompt is sent, and the server refuses it
    o = _summary(forced)
    assert o["context_limit"] == {"tokens": 100000, "source": "option"}
    assert o["workload_skipped"] == {} and o["workload"]["params"]["context_limit"] == 100000
    assert o["completed"] == 5 and o["failed"] == 1


@pytest.mark.timeout(200)
def test_measured_lengths_are_the_servers_not_the_plans():
    """A conversation's later turns carry the whole conversation: the server counts more prompt
    tokens than the plan's new messages. Without ignore_eos answers end at EOS: fewer output tokens
    than max_tokens asked. Each level reports both, named apart."""
    port = free_port()
    with _sim(port):
        conv = _bench(
            "--url", f"http://127.0.0.1:{port}", "--endpoint", "chat", "--dataset-name", "conversation",
            "--conversation-turns", "3", "--conversation-sessions", "4", "--conversation-think-s", "0",
            "--num-prompts", "12", "--input-len", "16", "--output-len", "8", "--ignore-eos", "--concurrency", "4",
        )  # fmt: skip
        eos = _bench(
            "--url", f"http://127.0.0.1:{port}", "--num-prompts", "24", "--input-len", "16",
            "--output-len", "400", "--no-ignore-eos", "--concurrency", "8",
        )  # fmt: skip
    s = _summary(conv)
    assert s["completed"] == 12 and s["failed"] == 0
    planned, measured = s["workload_lengths"], s["measured_lengths"]
    samples = store.read_samples(s["run_id"])
    assert measured["input"]["count"] == 12 and measured["usage_reported"] == 12
    assert measured["input"]["max"] == max(x["prompt_len"] for x in samples)
    # turn 3 carries two questions and two 8-token answers more than its own new message
    assert measured["input"]["max"] >= planned["input"]["max"] + 2 * 8
    assert measured["input"]["p50"] > planned["input"]["p50"]
    assert measured["output"]["min"] == measured["output"]["max"] == 8 == planned["output"]["max"]
    assert "Lengths planned" in conv.stderr and "Lengths measured" in conv.stderr
    shown = run_cli("results", "show", s["run_id"], timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "Lengths measured (server's token counts): input" in shown.stdout

    e = _summary(eos)
    assert e["workload_lengths"]["output"]["min"] == e["workload_lengths"]["output"]["max"] == 400
    out = e["measured_lengths"]["output"]
    assert out["count"] == 24 and out["p50"] < 400 and out["max"] <= 400
    assert out["mean"] == pytest.approx(e["total_output_tokens"] / 24, abs=0.01)
