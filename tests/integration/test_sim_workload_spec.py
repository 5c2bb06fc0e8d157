"""Speculative acceptance that depends on the request's content (docs/sim-model.md,
"Workload-dependent serving"): the same EAGLE server accepts more on natural text than on random
token ids, by the margin the documented rule predicts, in vLLM's counters and SGLang's log and
gauge. Real simulator processes on loopback, real HTTP."""

from __future__ import annotations

import asyncio
import random
import re
from pydoc_data.topics import topics

import httpx
import pytest

from tests.simfix import SimProc, free_port
from tests.waits import until
from tunedeck.sim import perf
from tunedeck.sim.prefix import VOCAB, repetition, text_ids

pytestmark = pytest.mark.timeout(240)

STEPS, REQUESTS, PROMPT, OUT = 3, 16, 1024, 200


def natural_prompts() -> list[str]:
    """Prompts of exactly PROMPT tokens of natural text (the standard library's pydoc topics)."""
    text = "\n".join(topics[k] for k in sorted(topics)).encode("ascii", "ignore").decode("ascii")
    n = 4 * PROMPT
    return [text[i * 7919 : i * 7919 + n] for i in range(REQUESTS)]


def random_prompts() -> list[list[int]]:
    rng = random.Random(11)
    return [[rng.randrange(VOCAB) for _ in range(PROMPT)] for _ in range(REQUESTS)]


def predicted(prompts: list) -> float:
    """The rule's mean acceptance length over ``prompts`` (EAGLE, STEPS draft tokens)."""
    spec = perf.SpecConfig("EAGLE", STEPS, 1, STEPS + 1)
    lens = []
    for p in prompts:
        ids = text_ids(p) if isinstance(p, str) else p
        assert len(ids) == PROMPT
        lens.append(perf.accept_length(perf.content_alpha(spec.alpha, *repetition(ids)), STEPS))
    return sum(lens) / len(lens)


async def send(base: str, prompts: list) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=120) as c:

        async def one(prompt: object) -> None:
            body = {"model": "m", "prompt": prompt, "max_tokens": OUT, "ignore_eos": True}
            r = await c.post("/v1/completions", json=body)
            assert r.status_code == 200, r.text

        await asyncio.gather(*(one(p) for p in prompts))


def value(metrics: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}\{{[^}}]*{re.escape(labels)}[^}}]*\}} ([\d.e+-]+)$", metrics, re.M)
    assert m, f"{name} {labels} missing from /metrics"
    return float(m.group(1))


def test_the_rule_separates_natural_text_from_random_ids():
    nat, rnd = predicted(natural_prompts()), predicted(random_prompts())
    # EAGLE's alpha 0.70: text at (or near) it, random ids at half of it
    assert 2.3 < nat <= perf.accept_length(0.70, STEPS) and rnd < 1.75
    assert nat - rnd > 0.7
    # a short prompt carries too little evidence to move far from the method's rate
    short = perf.content_alpha(0.70, *repetition(text_ids("Tell me a story.")))
    assert 0.6 < short < 0.70


def test_vllm_eagle_acceptance_follows_the_content():
    port = free_port()
    sc = f'{{"method":"eagle","model":"d","num_speculative_tokens":{STEPS}}}'
    got = {}
    with SimProc("vllm", "m", "-tp", "8", "--port", str(port), "--sim-load-seconds", "1", "-sc", sc) as p:
        p.wait_ready(60)
        base = f"http://127.0.0.1:{port}"
        for name, prompts in (("natural", natural_prompts()), ("random", random_prompts())):
            names = (
                "vllm:spec_decode_num_drafts_total",
                "vllm:spec_decode_num_draft_tokens_total",
                "vllm:spec_decode_num_accepted_tokens_total",
            )
            before = httpx.get(f"{base}/metrics").text
            asyncio.run(send(base, prompts))
            after = httpx.get(f"{base}/metrics").text
            drafts, draft_tokens, acc = (value(after, n) - value(before, n) for n in names)
            per_pos = [
                value(after, "vllm:spec_decode_num_accepted_tokens_per_pos_total", f'position="{i}"')
                - value(before, "vllm:spec_decode_num_accepted_tokens_per_pos_total", f'position="{i}"')
                for i in range(STEPS)
            ]
            assert drafts > 1000 and draft_tokens == STEPS * drafts
            assert sum(per_pos) == acc and per_pos == sorted(per_pos, reverse=True)
            got[name] = (1 + acc / drafts, prompts)
    for name, (length, prompts) in got.items():
        assert abs(length - predicted(prompts)) < 0.12, (name, length, predicted(prompts))
    assert got["natural"][0] - got["random"][0] > 0.6


def test_sglang_eagle_accept_len_follows_the_content():
    port = free_port()
    flags = [
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-num-steps",
        str(STEPS),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(STEPS + 1),
        "--decode-log-interval",
        "10",
        "--enable-metrics",
    ]
    args = ["--model-path", "m", "--tp", "8", "--port", str(port), "--sim-load-seconds", "1", *flags]
    lines: dict[str, list[float]] = {}
    gauges = {}
    with SimProc("sglang", *args) as p:
        p.wait_ready(60)
        base = f"http://127.0.0.1:{port}"
        for name, prompts in (("natural", natural_prompts()), ("random", random_prompts())):
            start = len(p.raw)
            asyncio.run(send(base, prompts))
            gauge = value(httpx.get(f"{base}/metrics").text, "sglang:spec_accept_length")
            # the last decode line can still be in the pipe when the last response has ended: the
            # one with the gauge's figure is awaited (the simulator sets both in the same step)
            line = f"accept len: {gauge:.2f}, accept rate"
            until(lambda line=line, start=start: line in p.raw[start:], 10, what=f"a decode line with {line!r}")
            out = p.raw[start:]
            seen = [float(x) for x in re.findall(r"Decode batch, .*accept len: ([\d.]+), accept rate", out)]
            lines[name] = seen[1:]  # the first line may average in the steps before this run
            gauges[name] = (gauge, seen[-1])
    for name, prompts in (("natural", natural_prompts()), ("random", random_prompts())):
        mean = sum(lines[name]) / len(lines[name])
        assert len(lines[name]) >= 5 and abs(mean - predicted(prompts)) < 0.15, (name, mean, predicted(prompts))
        gauge, last_line = gauges[name]
        assert gauge == pytest.approx(last_line, abs=0.006)  # the gauge is the last decode line's figure
    assert sum(lines["natural"]) / len(lines["natural"]) - sum(lines["random"]) / len(lines["random"]) > 0.6
