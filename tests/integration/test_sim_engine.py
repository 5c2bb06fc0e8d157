"""The simulated engines against serving-engines.md: start-up lines, readiness, SSE, metrics, faults."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time

import httpx
import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.simfix import SimProc, free_port, sse_events
from tests.waits import until

pytestmark = pytest.mark.timeout(90)

# serving-engines.md §4.5 (verbatim)
R = {
    "sg.prefix": r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)((?: [A-Z_]+\d+)*)\] (.*)$",
    "vl.prefix": r"\((\S+) pid=(\d+)\) ([A-Z]+) (\d\d-\d\d \d\d:\d\d:\d\d) \[([^\]]+)\] (.*)$",
    "any.tqdm": r"(\d+)%\|[^|]*\| (\d+)/(\d+) \[",
    "any.shards": r"Loading safetensors checkpoint shards(?: \(eager\))?:\s+(\d+)% Completed \| (\d+)/(\d+) \[([^<]*)<([^,]*), ([^\]]*)\]",
    "sg.init": r"Init (?:parallel|torch distributed) (begin|ends)\.",
    "sg.weights_begin": r"Load weight begin\. avail mem=([\d.]+) GB",
    "sg.weights_end": r"Load weight end\. .*?avail mem=([\d.]+) GB, mem usage=([\d.]+) GB",
    "sg.kv_alloc": r"KV Cache is allocated\. (?:dtype: [\w.]+, )?#tokens: (\d+), (?:KV size: ([\d.]+) GB|K size: ([\d.]+) GB, V size: ([\d.]+) GB)",
    "sg.graph_begin": r"Capture (?:(\w+) (\w+) CUDA|cuda) graph begin\.",
    "sg.graph_prog": r"Capturing batches \(bs=(\d+) avail_mem=([\d.]+) GB\):\s+(\d+)%\|[^|]*\| (\d+)/(\d+)",
    "sg.graph_end": r"Capture (?:(\w+) (\w+) CUDA|cuda) graph end\.(?: bs=\[[^\]]*\],)? (?:elapsed=|Time elapsed: )([\d.]+) s[.,] mem usage=([\d.]+) GB[.,] avail mem=([\d.]+) GB\.",
    "sg.limits": r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), max_running_requests=(\d+), context_len=(\d+)",
    "sg.http_up": r"Uvicorn running on (\S+)",
    "sg.ready": r"The server is fired up and ready to roll!",
    "sg.gen_tput": r"gen throughput \(token/s\): ([\d.]+)",
    "sg.running": r"#running-req: (\d+)",
    "sg.queue": r"#queue-req: (\d+)",
    "sg.token_usage": r"token usage: ([\d.]+)",
    "vl.engine": r"Initializing a V1 LLM engine \(v([^)]+)\) with config:",
    "vl.nccl": r"vLLM is using nccl==([\w.+-]+)",
    "vl.attn": r"Using (\S+) attention backend out of potential backends: \[(.*)\]|Using AttentionBackendEnum\.(\w+) backend\.",
    "vl.weights_done": r"Loading weights took ([\d.]+) seconds",
    "vl.model_loaded": r"Model loading took ([\d.]+) GiB (?:memory )?and ([\d.]+) seconds",
    "vl.compile_done": r"torch\.compile took ([\d.]+) s in total",
    "vl.kv_mem": r"Available KV cache memory: ([\d.]+) GiB",
    "vl.kv_tokens": r"GPU KV cache size: ([\d,]+) tokens",
    "vl.max_conc": r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x",
    "vl.graph_prog": r"Capturing CUDA graphs(?: \(([^)]*)\))?:\s+(\d+)%\|[^|]*\| (\d+)/(\d+)",
    "vl.graph_done": r"Graph capturing finished in (\d+) secs, took ([\d.]+) GiB",
    "vl.engine_init": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s",
    "vl.ready": r"Application startup complete\.",
    "vl.stats": r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, Running: (\d+) reqs, Waiting: (\d+) reqs",
    "vl.kv_usage": r"GPU KV cache usage: ([\d.]+)%",
}
CLASSIFIER = {
    "oom": r"CUDA out of memory|OutOfMemoryError|Not enough memory\. Please try to increase --mem-fraction-static|No available memory for the cache blocks|larger than the available KV cache memory|less than desired GPU memory utilization|Failed to load model - not enough GPU memory",
    "nccl": r"NCCL error|NCCL WARN|DistBackendError",
    "port": r"[Aa]ddress already in use|is not available in \d+ seconds|port \d+ is in use",
    "crash": r"Scheduler hit an exception|TokenizerManager hit an exception|Received sigquit from a child process|Engine core initialization failed|Initialization failed\. warmup error|Capture cuda graph failed",
}
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def first_index(lines: list[str], key: str) -> int:
    rx = re.compile(R[key])
    for i, line in enumerate(lines):
        if rx.search(line):
            return i
    raise AssertionError(f"{key} not found")


def sim(engine: str, *args: str, load: float = 1.5, port: int | None = None, **kw) -> tuple[SimProc, int]:
    port = port or free_port()
    model = ["--model-path", "m", "--tp", "8"] if engine == "sglang" else ["m", "-tp", "8"]
    p = SimProc(engine, *model, "--port", str(port), "--sim-load-seconds", str(load), *args, **kw)
    return p, port


# ---------------------------------------------------------------------- start-up


def test_sglang_startup_lines_in_order_and_format():
    p, port = sim("sglang", "--enable-metrics")
    with p:
        p.wait_ready()
        raw = p.raw
    lines = [x for x in re.split(r"[\r\n]+", ANSI.sub("", raw)) if x]
    order = [
        "sg.init",
        "sg.weights_begin",
        "any.shards",
        "sg.weights_end",
        "sg.kv_alloc",
        "sg.graph_begin",
        "sg.graph_prog",
        "sg.graph_end",
        "sg.limits",
        "sg.http_up",
        "sg.ready",
    ]
    idx = [first_index(lines, k) for k in order]
    assert idx == sorted(idx), dict(zip(order, idx))
    # every logger line carries the real prefix; (all)-rank lines appear for TP0..TP7
    prefixed = [x for x in lines if x.startswith("[")]
    assert prefixed and all(re.match(R["sg.prefix"], x) for x in prefixed)
    ranks = {re.match(R["sg.prefix"], x).group(2) for x in prefixed if "Load weight end." in x}
    assert ranks == {f" TP{i}" for i in range(8)}
    # the weight bar: \r frames, no newline until the end; last 100 % frame twice
    shard_frames = re.findall(R["any.shards"], raw)
    assert shard_frames[-1][0] == "100" and shard_frames[-1][1] == shard_frames[-1][2]
    assert sum(1 for f in shard_frames if f[0] == "100") == 2
    bar_line = next(x for x in raw.split("\n") if "Loading safetensors" in x)
    assert bar_line.count("\r") == len(shard_frames)
    # graph capture reaches n/n, bs descending, and the first frame has no description
    prog = re.findall(R["sg.graph_prog"], raw)
    assert int(prog[-1][3]) == int(prog[-1][4]) == 52
    assert int(prog[0][0]) == 512 and int(prog[-1][0]) == 1
    assert "\r  0%|          | 0/52 [00:00<?, ?it/s]\rCapturing batches (bs=512" in raw
    m = re.search(R["sg.limits"], raw)
    assert int(m.group(1)) > 100000 and m.group(5) == "131072"
    assert re.search(R["sg.http_up"], raw).group(1) == f"http://127.0.0.1:{port}"
    # warmup requests come before the ready line
    assert (
        raw.index('"GET /model_info HTTP/1.1" 200 OK')
        < raw.index('"POST /generate HTTP/1.1" 200 OK')
        < raw.index("The server is fired up")
    )


def test_vllm_startup_lines_in_order_and_format():
    p, port = sim("vllm", "--attention-backend", "flashinfer")
    with p:
        p.wait_ready()
        raw = p.raw
    lines = [x for x in re.split(r"[\r\n]+", raw) if x]
    order = [
        "vl.engine",
        "vl.nccl",
        "vl.attn",
        "any.shards",
        "vl.weights_done",
        "vl.model_loaded",
        "vl.compile_done",
        "vl.kv_mem",
        "vl.kv_tokens",
        "vl.max_conc",
        "vl.graph_prog",
        "vl.graph_done",
        "vl.engine_init",
        "vl.ready",
    ]
    idx = [first_index(lines, k) for k in order]
    assert idx == sorted(idx), dict(zip(order, idx))
    assert re.search(R["vl.engine"], raw).group(1) == "0.33.0"
    assert re.search(R["vl.attn"], raw).group(3) == "FLASHINFER"
    logger = [x for x in lines if x.startswith("(") and " INFO " in x[:40]]
    assert logger and all(re.search(R["vl.prefix"], x) for x in logger)
    procs = {re.search(R["vl.prefix"], x).group(1) for x in logger}
    assert {"APIServer", "EngineCore", "Worker_TP0"} <= procs
    assert "Uvicorn running on" not in raw
    assert f"Starting vLLM server on http://0.0.0.0:{port}" in raw
    kv = int(re.search(R["vl.kv_tokens"], raw).group(1).replace(",", ""))
    assert kv > 100000
    caps = re.findall(R["vl.graph_prog"], raw)
    assert ("mixed prefill-decode, PIECEWISE", "100", "51", "51") in caps and (
        "decode, FULL",
        "100",
        "35",
        "35",
    ) in caps


# ---------------------------------------------------------------------- readiness


def test_sglang_port_bound_only_after_capture_and_health_503_until_ready():
    p, port = sim("sglang", load=2.5)
    seen = []
    with p:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                seen.append(r.status_code)
                if r.status_code == 200:
                    break
            except httpx.ConnectError:
                seen.append("refused")
                assert "Uvicorn running on" not in p.raw
            time.sleep(0.05)
        assert seen[0] == "refused" and seen[-1] == 200
        # the ready line is written before the first 200, but may still be in the pipe to the reader
        until(lambda: "The server is fired up" in p.raw, 10, what="the ready line after the first 200")
        if 503 in seen:
            assert seen.index(503) > seen.index("refused")


def test_vllm_port_bound_before_loading_probes_hang():
    p, port = sim("vllm", load=3)
    with p:
        assert p.wait_for("Initializing a V1 LLM engine", 10)
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # connect works: the socket is bound and listening
        with pytest.raises(httpx.TimeoutException):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.3)
        p.wait_ready()
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200


# ---------------------------------------------------------------------- serving


def _stream(port: int, path: str, body: dict) -> tuple[int, dict, str]:
    with httpx.Client(timeout=20) as c, c.stream("POST", f"http://127.0.0.1:{port}{path}", json=body) as r:
        text = "".join(r.iter_text())
        return r.status_code, dict(r.headers), text


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_chat_stream_exact_sse_and_metrics_count_it(engine):
    p, port = sim(engine, "--enable-metrics") if engine == "sglang" else sim(engine)
    with p:
        p.wait_ready()
        base = f"http://127.0.0.1:{port}"
        before = httpx.get(f"{base}/metrics").text
        status, headers, text = _stream(
            port,
            "/v1/chat/completions",
            {
                "model": "m",
                "messages": [{"role": "user", "content": "Say hello to the simulator"}],
                "max_tokens": 12,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
        after = httpx.get(f"{base}/metrics").text
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert text.endswith("data: [DONE]\n\n")
    assert all(b.startswith("data: ") for b in text.split("\n\n") if b)
    events = list(sse_events(text))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1
    assert all(
        c["object"] == "chat.completion.chunk" and c["model"] == "m" and isinstance(c["created"], int) for c in chunks
    )
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 12
    token_chunks = chunks[:-1]
    assert token_chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert token_chunks[0]["choices"][0]["delta"]["content"] == ""
    content = [c["choices"][0]["delta"].get("content") for c in token_chunks[1:]]
    content = [x for x in content if x]
    assert len(content) == 12
    finals = [c["choices"][0]["finish_reason"] for c in token_chunks]
    assert finals[-1] == "length" and all(f is None for f in finals[:-1])
    if engine == "vllm":
        assert chunks[0]["id"].startswith("chatcmpl-")
        assert all("usage" not in c for c in token_chunks)  # vLLM omits unset keys
        assert set(token_chunks[1]["choices"][0]["delta"]) == {"content"}
        assert token_chunks[-1]["choices"][0]["delta"]["content"]  # finish rides on the last token
    else:
        assert all("usage" in c and c["usage"] is None for c in token_chunks)
        assert token_chunks[-1]["choices"][0]["delta"]["content"] is None  # separate finish chunk

    def val(text: str, name: str) -> float:
        m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([\d.e+-]+)$", text, re.M)
        assert m, name
        return float(m.group(1))

    if engine == "sglang":
        assert val(after, "sglang:num_requests_total") - val(before, "sglang:num_requests_total") == 1
        assert val(after, "sglang:generation_tokens_total") - val(before, "sglang:generation_tokens_total") == 12
        assert (
            val(after, "sglang:time_to_first_token_seconds_count")
            - val(before, "sglang:time_to_first_token_seconds_count")
            == 1
        )
        assert "# TYPE sglang:e2e_request_latency_seconds histogram" in after
        assert "# TYPE sglang:prompt_tokens_total counter" in after
        assert "_created" not in after
    else:
        succ = r'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"}'
        assert succ in after
        assert val(after.replace(succ, "X_SUCC"), "X_SUCC") == 1
        assert val(after, "vllm:generation_tokens_total") == 12
        assert "# TYPE vllm:iteration_tokens_total histogram" in after
        assert 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"}' in after
        assert "vllm:kv_cache_usage_perc" in after


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_completions_stream_nonstream_and_limits(engine):
    p, port = sim(engine)
    with p:
        p.wait_ready()
        base = f"http://127.0.0.1:{port}"
        _st, _h, text = _stream(
            port,
            "/v1/completions",
            {
                "model": "m",
                "prompt": [1, 2, 3, 4, 5],
                "max_tokens": 4,
                "stream": True,
                "ignore_eos": True,
                "stream_options": {"include_usage": True},
            },
        )
        chunks = [json.loads(e) for e in sse_events(text) if e != "[DONE]"]
        assert chunks[-1]["usage"] == {"prompt_tokens": 5, "total_tokens": 9, "completion_tokens": 4} or (
            chunks[-1]["usage"]["prompt_tokens"] == 5 and chunks[-1]["usage"]["completion_tokens"] == 4
        )
        assert [c["object"] for c in chunks] == ["text_completion"] * 5
        assert chunks[-2]["choices"][0]["finish_reason"] == "length"
        r = httpx.post(
            f"{base}/v1/completions",
            json={"model": "m", "prompt": "hi", "max_tokens": 7, "ignore_eos": True},
            timeout=20,
        )
        body = r.json()
        assert (
            r.status_code == 200
            and body["usage"]["completion_tokens"] == 7
            and body["choices"][0]["finish_reason"] == "length"
        )
        # without ignore_eos a seeded pseudo-EOS can end it early (never later than max_tokens)
        lens = []
        for _ in range(6):
            b = httpx.post(
                f"{base}/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 150},
                timeout=30,
            ).json()
            lens.append((b["usage"]["completion_tokens"], b["choices"][0]["finish_reason"]))
        assert all(n <= 150 for n, _ in lens)
        assert all((fr == "length") == (n == 150) for n, fr in lens)
        assert any(fr == "stop" for _, fr in lens)
        bad = httpx.post(f"{base}/v1/completions", json={"prompt": "x", "max_tokens": 3, "n": 2})
        assert bad.status_code == 400
        models = httpx.get(f"{base}/v1/models").json()
        assert (
            models["object"] == "list"
            and models["data"][0]["id"] == "m"
            and models["data"][0]["max_model_len"] == 131072
        )


@pytest.mark.parametrize(("engine", "keys"), [("vllm", ["k-one", "k-two"]), ("sglang", ["k-one"])])
def test_the_api_key_lets_in_each_of_the_keys_the_engine_takes_and_nothing_else(engine: str, keys: list[str]):
    """vLLM's ``--api-key`` takes one or more keys and lets in any of them; SGLang's takes one."""
    p, port = sim(engine, "--api-key", *keys, load=0.3)
    with p:
        p.wait_ready()
        url = f"http://127.0.0.1:{port}/v1/models"
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer k-other"}).status_code == 401
        for k in keys:
            assert httpx.get(url, headers={"Authorization": f"Bearer {k}"}).status_code == 200, k


def test_sglang_info_flush_cache_and_metrics_off():
    p, port = sim("sglang")
    with p:
        p.wait_ready()
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/metrics").status_code == 404
        info = httpx.get(f"{base}/server_info").json()
        assert (
            info["version"] == "0.5.23" and info["tp_size"] == 8 and "last_gen_throughput" in info["internal_states"][0]
        )
        assert httpx.get(f"{base}/model_info").json()["architectures"] == ["LlamaForCausalLM"]
        assert httpx.post(f"{base}/flush_cache").status_code == 200
        with (
            httpx.Client(timeout=30) as c,
            c.stream(
                "POST",
                f"{base}/v1/completions",
                json={"prompt": "x", "max_tokens": 100, "ignore_eos": True, "stream": True},
            ) as r,
        ):
            it = r.iter_lines()
            next(it)
            assert httpx.post(f"{base}/flush_cache").status_code == 400
            for _ in it:
                pass
        assert httpx.post(f"{base}/flush_cache").status_code == 200
        assert "Cache not flushed because there are pending requests" in p.raw


def test_decode_stat_lines_and_vllm_engine_stats():
    p, port = sim("sglang", "--decode-log-interval", "5")
    v, vport = sim("vllm", "--sim-stats-interval", "0.5")
    with p, v:
        p.wait_ready()
        v.wait_ready()
        for prt in (port, vport):
            httpx.post(
                f"http://127.0.0.1:{prt}/v1/completions",
                json={"prompt": "x", "max_tokens": 30, "ignore_eos": True},
                timeout=30,
            )
        # the first stats line after the request that shows its tokens (one comes every 0.5 s)
        until(lambda: "Decode batch" in p.raw and _busy_engine_stats(v.raw), 15, what="the stat lines")
        sg, vl = p.raw, v.raw
    decode = [x for x in sg.splitlines() if "Decode batch" in x]
    assert decode and re.search(R["sg.gen_tput"], decode[0]) and re.search(R["sg.running"], decode[0])
    assert re.search(
        r"Decode batch, #running-req: \d+, #token: \d+, token usage: [\d.]+, cuda graph: True, gen throughput \(token/s\): [\d.]+, #queue-req: \d+$",
        decode[0],
    )
    assert re.search(
        r"Prefill batch, #new-seq: 1, #new-token: \d+, #cached-token: 0, token usage: [\d.]+, #running-req: \d+, #queue-req: \d+, #pending-token: 0, cuda graph: \w+, input throughput \(token/s\): [\d.]+",
        sg,
    )
    stats = _busy_engine_stats(vl)
    assert stats and re.search(R["vl.stats"], stats[0]) and re.search(R["vl.kv_usage"], stats[0])


def _busy_engine_stats(log: str) -> list[str]:
    """vLLM's periodic stats lines that count generated tokens."""
    out = []
    for x in log.splitlines():
        m = re.search(R["vl.stats"], x) if "Engine 000:" in x else None
        if m and float(m.group(2)) > 0:
            out.append(x)
    return out


def test_sigterm_clean_shutdown():
    p, _port = sim("vllm")
    p.wait_ready()
    rc = p.stop()
    assert rc == 0
    assert p.raw.rstrip().endswith(f"INFO:     Finished server process [{p.proc.pid}]")


def test_fixed_timing_and_recorded_timestamps(tmp_path):
    rec = tmp_path / "t.jsonl"
    p, port = sim("vllm", "--sim-fixed-ttft-ms", "150", "--sim-fixed-itl-ms", "40", "--sim-record-timestamps", str(rec))
    with p:
        p.wait_ready()
        t0 = time.time()
        st, _h, text = _stream(
            port, "/v1/completions", {"prompt": "x", "max_tokens": 10, "ignore_eos": True, "stream": True}
        )
        assert st == 200
        time.sleep(0.2)
    line = json.loads(rec.read_text().splitlines()[-1])
    ids = {json.loads(e)["id"] for e in sse_events(text) if e != "[DONE]"}
    assert line["id"] in ids and line["completion_tokens"] == 10 and sum(line["tokens"]) == 10
    # timers on a shared, loaded box fire a little late; the schedule is absolute so lateness never adds up
    assert 0.148 <= line["ttft"] < 0.19
    gaps = [b - a for a, b in zip(line["times"], line["times"][1:])]
    assert all(0.0 <= g < 0.08 for g in gaps), gaps
    assert abs(sum(gaps) / len(gaps) - 0.040) < 0.005, gaps
    assert abs((line["times"][-1] - line["times"][0]) - 0.36) < 0.04
    assert t0 <= line["arrival"] <= line["times"][0]


# ---------------------------------------------------------------------- faults


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("fault", ["oom", "nccl"])
def test_fault_oom_nccl(engine, fault):
    p, _port = sim(engine, "--sim-fault", fault, load=1.0)
    with p:
        rc = p.wait_exit(20)
        raw = p.raw
    assert rc != 0
    assert re.search(CLASSIFIER[fault], raw)
    assert re.search(CLASSIFIER["crash"], raw)
    assert "ready to roll" not in raw and "Application startup complete" not in raw
    if fault == "oom":
        assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in raw
        assert raw.index("Load weight end." if engine == "sglang" else "Model loading took") < raw.index(
            "OutOfMemoryError"
        )
    else:
        assert "Load weight begin" not in raw and "Loading safetensors" not in raw
    if engine == "sglang":
        assert rc == -9  # SGLang kills its own process tree ("Killed" in a shell)
    # the GPUs are free again
    smi = subprocess.run(
        [*tunedeck_cmd(), "sim", "smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=20,
    )
    assert set(smi.stdout.split()) == {"0"}


def test_fault_port_sglang_after_loading_vllm_at_once():
    s, sport = sim("sglang", "--sim-fault", "port", load=1.0)
    with s:
        assert s.wait_exit(20) == 1
        raw = s.raw
    assert raw.index("Load weight end.") < raw.index("address already in use")
    assert f"[Errno 98] error while attempting to bind on address ('127.0.0.1', {sport}): address already in use" in raw
    # a real conflict: the port is taken by someone else
    blocker = socket.socket()
    blocker.bind(("0.0.0.0", 0))
    blocker.listen(1)
    busy = blocker.getsockname()[1]
    try:
        v, _ = sim("vllm", port=busy, load=5)
        with v:
            assert v.wait_exit(15) == 1
            raw = v.raw
    finally:
        blocker.close()
    assert "OSError: [Errno 98] Address already in use" in raw
    assert "Loading safetensors" not in raw and "Initializing a V1 LLM engine" not in raw


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_fault_hang_in_graph_capture(engine):
    p, _port = sim(engine, "--sim-fault", "hang", load=1.0)
    with p:
        assert p.wait_for("Capturing", 10)
        time.sleep(1.5)
        assert p.proc.poll() is None
        raw = p.raw
        assert "ready to roll" not in raw and "Application startup complete" not in raw
        frames = re.findall(R["sg.graph_prog"] if engine == "sglang" else R["vl.graph_prog"], raw)
        last = frames[-1]
        n, total = (int(last[3]), int(last[4])) if engine == "sglang" else (int(last[2]), int(last[3]))
        assert 0 < n < total
        assert p.stop() == 0


# ---------------------------------------------------------------------- GPU state


def test_smi_memory_follows_the_server():
    def mem() -> list[int]:
        r = subprocess.run(
            [*tunedeck_cmd(), "sim", "smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=20,
        )
        rows = r.stdout.splitlines()
        assert len(rows) == 8
        return [int(x.split(", ")[1]) for x in rows]

    assert mem() == [0] * 8
    p, _port = sim("sglang", load=4)
    with p:
        assert p.wait_for("Loading safetensors", 10)
        samples = []
        while "ready to roll" not in p.raw and len(samples) < 40:
            samples.append(mem()[0])
            time.sleep(0.15)
        p.wait_ready()
        ready = mem()
        apps = subprocess.run(
            [
                *tunedeck_cmd(),
                "sim",
                "smi",
                "--query-compute-apps=pid,gpu_uuid,used_memory,process_name",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=20,
        ).stdout
    assert all(m > 100000 for m in ready)
    assert samples == sorted(samples) and samples[0] < ready[0] and len(set(samples)) >= 3
    names = sorted(line.split(", ")[3] for line in apps.splitlines())
    assert names == [f"sglang::scheduler_TP{i}" for i in range(8)]
    assert all(line.split(", ")[0] == str(p.proc.pid) for line in apps.splitlines())
    assert mem() == [0] * 8


def test_cuda_visible_devices_picks_gpus():
    p, _port = sim("vllm", "--tensor-parallel-size", "2", load=1.0, env={"CUDA_VISIBLE_DEVICES": "4,5"})
    with p:
        p.wait_ready()
        r = subprocess.run(
            [*tunedeck_cmd(), "sim", "smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=20,
        )
    used = [int(x.split(", ")[1]) for x in r.stdout.splitlines()]
    assert [i for i, u in enumerate(used) if u > 0] == [4, 5]


# ---------------------------------------------------------------------- load, speculative decoding, aborts


def test_util_and_power_rise_under_load_and_speculative_metrics():
    import threading

    p, port = sim("sglang", "--enable-metrics", "--speculative-algorithm", "EAGLE3", "--decode-log-interval", "10")
    ts: list[threading.Thread] = []
    with p:
        p.wait_ready()

        def load() -> None:
            # long enough to still run while nvidia-smi is read on a loaded machine; the server's
            # exit at the end of the block ends them
            try:
                httpx.post(
                    f"http://127.0.0.1:{port}/v1/completions",
                    json={"prompt": "x", "max_tokens": 20000, "ignore_eos": True},
                    timeout=120,
                )
            except httpx.HTTPError:
                pass

        ts = [threading.Thread(target=load, daemon=True) for _ in range(8)]
        for t in ts:
            t.start()
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = subprocess.run(
                [
                    *tunedeck_cmd(),
                    "sim",
                    "smi",
                    "--query-gpu=utilization.gpu,power.draw,clocks.sm",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=20,
            )
            util, power, clock = r.stdout.splitlines()[0].split(", ")
            seen.append((util, power, clock))
            if int(util) >= 60 and float(power) > 300:
                break
            time.sleep(0.5)
        deadline = time.monotonic() + 30
        while "accept len" not in p.raw and time.monotonic() < deadline:
            time.sleep(0.2)  # a decode batch was logged: the acceptance gauge has a value
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        raw = p.raw
    for t in ts:
        t.join(timeout=30)
    util, power, clock = seen[-1]
    assert int(util) >= 60 and float(power) > 300 and clock == "1980", seen
    al = float(re.search(r"^sglang:spec_accept_length\{[^}]*\} ([\d.]+)$", metrics, re.M).group(1))
    assert 2.0 < al < 3.5
    assert re.search(r"Decode batch, .*accept len: [\d.]+, accept rate: [\d.]+, cuda graph", raw)
    assert "Max running requests is reset to 48 for speculative decoding." in raw


def test_vllm_spec_counters_and_client_abort():
    p, port = sim("vllm", "-sc", '{"method":"eagle3","model":"d","num_speculative_tokens":3}')
    with p:
        p.wait_ready()
        base = f"http://127.0.0.1:{port}"
        httpx.post(f"{base}/v1/completions", json={"prompt": "x", "max_tokens": 60, "ignore_eos": True}, timeout=30)
        with (
            httpx.Client(timeout=10) as c,
            c.stream(
                "POST",
                f"{base}/v1/completions",
                json={"prompt": "x", "max_tokens": 2000, "ignore_eos": True, "stream": True},
            ) as r,
        ):
            next(r.iter_lines())
        time.sleep(0.5)
        m = httpx.get(f"{base}/metrics").text
    acc = float(re.search(r"^vllm:spec_decode_num_accepted_tokens_total\{[^}]*\} ([\d.]+)$", m, re.M).group(1))
    drafts = float(re.search(r"^vllm:spec_decode_num_drafts_total\{[^}]*\} ([\d.]+)$", m, re.M).group(1))
    assert drafts > 0 and 1.0 < 1 + acc / drafts < 3.5
    assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"}' in m
    aborted = float(
        re.search(
            r'^vllm:request_success_total\{engine="0",finished_reason="abort",model_name="m"\} ([\d.]+)$', m, re.M
        ).group(1)
    )
    assert aborted == 1


def test_sim_speed_scales_startup():
    p, _port = sim("sglang", "--sim-speed", "10", load=20)
    with p:
        t0 = time.monotonic()
        p.wait_ready(15)
        assert time.monotonic() - t0 < 8
        m = re.search(R["sg.weights_end"], p.raw)
        assert m


def test_second_server_on_the_same_gpus_runs_out_of_memory():
    a, _ = sim("sglang", load=1.0)
    with a:
        a.wait_ready()
        v, _ = sim("vllm", load=1.0)
        with v:
            assert v.wait_exit(20) == 1
        assert "is less than desired GPU memory utilization (0.92" in v.raw
        s, _ = sim("sglang", load=1.0)
        with s:
            assert s.wait_exit(20) != 0
        assert re.search(CLASSIFIER["oom"], s.raw)  # the weights no longer fit: OOM while loading
        # on other GPUs it fits
        ok = SimProc(
            "vllm",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--port",
            str(free_port()),
            "--sim-gpu-start",
            "8",
            "--sim-load-seconds",
            "1",
            env={"TUNEDECK_SIM_GPUS": "9"},
        )
        with ok:
            ok.wait_ready()
            # the first server still runs undisturbed
            assert a.proc.poll() is None


def test_fixed_timing_sglang_always_gets_through_its_warm_up(tmp_path):
    """With fixed timing the clock serves every request; a scheduler started beside it found the
    warm-up request in its running list with nothing to batch and spun without yielding: the
    server hung in its warm-up (7 of 12 starts on a loaded machine), deaf to SIGTERM."""
    args = (
        "--model-path",
        "m",
        "--tp",
        "8",
        "--sim-load-seconds",
        "0.2",
        "--sim-fixed-ttft-ms",
        "5",
        "--sim-fixed-itl-ms",
        "2",
    )
    # each on GPUs of its own (a simulated host each): four TP-8 servers on one host's 8 GPUs
    # would count each other's memory, and one that starts late would rightly run out
    procs = [
        SimProc("sglang", *args, "--port", str(free_port()), env={"TUNEDECK_SIM_STATE": str(tmp_path / f"host{i}")})
        for i in range(4)
    ]
    try:
        for p in procs:
            p.wait_ready(60)
            assert "The server is fired up and ready to roll!" in p.raw
    finally:
        for p in procs:
            p.stop()
