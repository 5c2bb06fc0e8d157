"""The simulator's prefix cache (docs/sim-model.md, "Workload-dependent serving"): shared-prefix
prompts hit the cache as the engines' counters report it, TTFT falls with the hit rate, and the
engines' flags switch it off. Real simulator processes on loopback, real HTTP."""

from __future__ import annotations

import random
import re
import string

import httpx
import pytest

from tests.simfix import SimProc, free_port
from tunedeck.sim import perf
from tunedeck.sim.prefix import BLOCK, PrefixCache, block_hashes, chat_ids, text_ids

pytestmark = pytest.mark.timeout(240)

GROUPS, PER_GROUP, PREFIX, QUESTION = 8, 32, 2048, 128
#: the cached share when each group's first prompt fills the cache and the other 31 hit its prefix
THEORY = GROUPS * (PER_GROUP - 1) * PREFIX / (GROUPS * PER_GROUP * (PREFIX + QUESTION))


def ttft_saving(engine: str) -> float:
    """The mean TTFT the cache saves per prompt by the performance model: 31 of 32 prompts
    prefill their question instead of the whole prompt (requests sent one at a time)."""
    cfg = perf.PerfConfig(engine, 8)
    whole, question = perf.prefill_time(cfg, PREFIX + QUESTION), perf.prefill_time(cfg, QUESTION)
    return (PER_GROUP - 1) / PER_GROUP * (whole - question)


def _text(rng: random.Random, tokens: int) -> str:
    """ASCII text of exactly ``tokens`` simulator tokens (4 bytes each)."""
    return "".join(rng.choice(string.ascii_letters + " ") for _ in range(4 * tokens))


def workloads(seed: int) -> tuple[list[list[str]], list[list[str]]]:
    """(shared, random): GROUPS x PER_GROUP prompts of PREFIX + QUESTION tokens; in ``shared`` a
    group's prompts begin with one prefix, in ``random`` nothing is shared."""
    rng = random.Random(seed)
    shared = []
    for _ in range(GROUPS):
        prefix = _text(rng, PREFIX)
        shared.append([prefix + _text(rng, QUESTION) for _ in range(PER_GROUP)])
    rand = [[_text(rng, PREFIX + QUESTION) for _ in range(PER_GROUP)] for _ in range(GROUPS)]
    return shared, rand


def counter(metrics: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([\d.e+-]+)$", metrics, re.M)
    assert m, f"{name} missing from /metrics"
    return float(m.group(1))


def run_groups(base: str, groups: list[list[str]]) -> None:
    """Every prompt in turn, one at a time: its TTFT is its own prefill, with no queueing that
    depends on how a loaded machine's client happens to bunch its sends."""
    with httpx.Client(base_url=base, timeout=120) as c:
        for group in groups:
            for prompt in group:
                body = {"model": "m", "prompt": prompt, "max_tokens": 1, "ignore_eos": True}
                r = c.post("/v1/completions", json=body)
                assert r.status_code == 200, r.text
                assert r.json()["usage"]["prompt_tokens"] == PREFIX + QUESTION


class Measured:
    """Per workload: (hit rate from the counters differenced, mean TTFT from the histogram
    differenced) and /metrics after it; the server's output."""

    def __init__(self) -> None:
        self.hit: dict[str, float] = {}
        self.ttft: dict[str, float] = {}
        self.metrics: dict[str, str] = {}
        self.raw = ""


def measure(engine: str, *flags: str) -> Measured:
    port = free_port()
    model = ["--model-path", "m", "--tp", "8", "--enable-metrics"] if engine == "sglang" else ["m", "-tp", "8"]
    hits, queries = (
        ("sglang:cached_tokens_total", "sglang:prompt_tokens_total")
        if engine == "sglang"
        else ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
    )
    ttft = f"{engine}:time_to_first_token_seconds"
    shared, rand = workloads(7)
    out = Measured()
    with SimProc(engine, *model, "--port", str(port), "--sim-load-seconds", "1", *flags) as p:
        p.wait_ready(60)
        base = f"http://127.0.0.1:{port}"
        for name, groups in (("shared", shared), ("random", rand)):
            before = httpx.get(f"{base}/metrics").text
            run_groups(base, groups)
            after = httpx.get(f"{base}/metrics").text
            d = {k: counter(after, k) - counter(before, k) for k in (hits, queries, f"{ttft}_sum", f"{ttft}_count")}
            if engine == "sglang" or "--disable-prefix-caching" not in flags:
                # every prompt token is looked up, cached or not
                assert d[queries] == GROUPS * PER_GROUP * (PREFIX + QUESTION)
            out.hit[name] = d[hits] / d[queries] if d[queries] else 0.0
            out.ttft[name] = d[f"{ttft}_sum"] / d[f"{ttft}_count"]
            out.metrics[name] = after
        p.stop()
        out.raw = p.raw
    return out


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_shared_prefixes_hit_the_cache_and_cut_ttft(engine):
    got = measure(engine)
    assert abs(got.hit["shared"] - THEORY) < 0.02, (got.hit, THEORY)
    assert got.hit["random"] < 0.01
    # the TTFTs differ by the prefill the hits skip (the event loop's lag on a loaded machine is in both)
    saved = got.ttft["random"] - got.ttft["shared"]
    assert 0.7 * ttft_saving(engine) < saved < 1.3 * ttft_saving(engine), (got.ttft, ttft_saving(engine))
    if engine == "sglang":
        cached = [int(x) for x in re.findall(r"Prefill batch, .*#cached-token: (\d+),", got.raw)]
        assert sum(cached) == GROUPS * (PER_GROUP - 1) * PREFIX
        # the gauge: the last prefill batch of the shared run was a cached prefix and its question
        assert counter(got.metrics["shared"], "sglang:cache_hit_rate") > 0.9
        assert counter(got.metrics["random"], "sglang:cache_hit_rate") == 0.0
    else:
        rates = [float(x) for x in re.findall(r"Prefix cache hit rate: ([\d.]+)%", got.raw)]
        assert rates and max(rates) > 50.0
        assert 'enable_prefix_caching="True"' in got.metrics["shared"]


@pytest.mark.parametrize("engine, flag", [("sglang", "--disable-radix-cache"), ("vllm", "--disable-prefix-caching")])
def test_the_flag_that_disables_the_cache_removes_the_difference(engine, flag):
    got = measure(engine, flag)
    assert got.hit["shared"] == 0.0
    assert abs(got.ttft["random"] - got.ttft["shared"]) < 0.3 * ttft_saving(engine), got.ttft
    if engine == "vllm":
        assert "Prefix cache hit rate" not in got.raw and "enable_prefix_caching=False" in got.raw
        assert 'enable_prefix_caching="False"' in got.metrics["shared"]
        assert counter(got.metrics["random"], "vllm:prefix_cache_queries_total") == 0
    else:
        assert not re.search(r"#cached-token: [1-9]", got.raw)


# ---------------------------------------------------------------------- the parts


def test_text_and_chat_ids_count_one_token_per_four_bytes():
    assert len(text_ids("")) == 1 and len(text_ids("abcd")) == 1 and len(text_ids("abcde")) == 2
    assert len(text_ids("é" * 10)) == 5  # 20 UTF-8 bytes
    assert text_ids("abcdabcd")[0] == text_ids("abcdabcd")[1]
    msgs = [{"role": "system", "content": "x" * 40}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert len(chat_ids(msgs)) == 3 + (4 + 10) + (4 + 1)
    # one system prompt, two questions: the leading blocks agree, so they hash alike
    a = block_hashes(chat_ids([{"role": "system", "content": "s" * 400}, {"role": "user", "content": "a" * 64}]))
    b = block_hashes(chat_ids([{"role": "system", "content": "s" * 400}, {"role": "user", "content": "b" * 64}]))
    shared = (4 + 100) // BLOCK
    assert len(a) == len(b) == shared + 1 and a[:shared] == b[:shared] and a[shared] != b[shared]


def test_prefix_cache_matches_leading_blocks_and_evicts_least_recent_tails_first():
    ids = list(range(64))
    h = block_hashes(ids)
    assert len(h) == 4 and block_hashes(ids[:63]) == h[:3]  # a partial block has no hash
    cache = PrefixCache(BLOCK, capacity=6)
    assert cache.match(h, 4) == 0
    cache.insert(h)
    assert cache.match(h, 4) == 4 and cache.match(h, 2) == 2
    other = block_hashes([1000 + i for i in range(48)])
    cache.insert(other)  # 7 blocks for 6 places: the first prompt's last block goes
    assert cache.evicted == 1 and cache.match(h, 4) == 3 and cache.match(other, 3) == 3
    # a block whose predecessor differs is another block, even with equal tokens
    assert cache.match(block_hashes([5] * 16 + ids[16:32]), 2) == 0
    cache.resize(2)
    assert len(cache.blocks) == 2
    cache.clear()
    assert cache.match(h, 4) == 0


def test_tokenize_ids_are_the_prompt_and_the_cache_resets():
    """vLLM's /tokenize gives the ids a text is served as (sent back, they hit the text's blocks);
    vLLM's /reset_prefix_cache (dev mode) and SGLang's /flush_cache empty the cache."""
    port = free_port()
    text = "All work and no play makes a dull server. " * 40
    with SimProc("vllm", "m", "-tp", "8", "--port", str(port), "--sim-load-seconds", "1") as p:
        p.wait_ready(60)
        base = f"http://127.0.0.1:{port}"
        tok = httpx.post(f"{base}/tokenize", json={"prompt": text}).json()
        assert tok["tokens"] == text_ids(text) and tok["count"] == len(tok["tokens"])
        body = {"model": "m", "max_tokens": 1}
        httpx.post(f"{base}/v1/completions", json={**body, "prompt": text}, timeout=30).raise_for_status()
        before = httpx.get(f"{base}/metrics").text
        httpx.post(f"{base}/v1/completions", json={**body, "prompt": tok["tokens"]}, timeout=30).raise_for_status()
        after = httpx.get(f"{base}/metrics").text
        assert httpx.post(f"{base}/reset_prefix_cache").status_code == 404  # only in vLLM's dev mode
    hits = counter(after, "vllm:prefix_cache_hits_total") - counter(before, "vllm:prefix_cache_hits_total")
    assert hits == (tok["count"] - 1) // BLOCK * BLOCK
    port = free_port()
    args = ["m", "-tp", "8", "--port", str(port), "--sim-load-seconds", "1"]
    with SimProc("vllm", *args, env={"VLLM_SERVER_DEV_MODE": "1"}) as p:
        p.wait_ready(60)
        base = f"http://127.0.0.1:{port}"
        seen = []
        for reset in (False, True):
            httpx.post(f"{base}/v1/completions", json={**body, "prompt": text}, timeout=30).raise_for_status()
            before = counter(httpx.get(f"{base}/metrics").text, "vllm:prefix_cache_hits_total")
            if reset:
                assert httpx.post(f"{base}/reset_prefix_cache").status_code == 200
            httpx.post(f"{base}/v1/completions", json={**body, "prompt": text}, timeout=30).raise_for_status()
            seen.append(counter(httpx.get(f"{base}/metrics").text, "vllm:prefix_cache_hits_total") - before)
    assert seen == [hits, 0]
    port = free_port()
    args = ["--model-path", "m", "--tp", "8", "--port", str(port), "--sim-load-seconds", "1", "--enable-metrics"]
    with SimProc("sglang", *args) as p:
        p.wait_ready(60)
        base = f"http://127.0.0.1:{port}"
        body = {"model": "m", "prompt": text, "max_tokens": 1}
        seen = []
        for flush in (False, True):
            httpx.post(f"{base}/v1/completions", json=body, timeout=30).raise_for_status()
            before = counter(httpx.get(f"{base}/metrics").text, "sglang:cached_tokens_total")
            if flush:
                assert httpx.post(f"{base}/flush_cache").status_code == 200
            httpx.post(f"{base}/v1/completions", json=body, timeout=30).raise_for_status()
            seen.append(counter(httpx.get(f"{base}/metrics").text, "sglang:cached_tokens_total") - before)
    assert seen == [(len(text_ids(text)) - 1) // BLOCK * BLOCK, 0]
