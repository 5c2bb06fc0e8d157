"""The streaming client and the runner against the fake SSE server (real HTTP on loopback)."""

import asyncio
import json
import math
import subprocess
import time

import pytest

from tests.conftest import tunedeck_cmd
from tests.fakesrv import FakeServer
from tunedeck.bench import store
from tunedeck.bench.client import EndpointConfig, RequestSpec, make_client, stream_request
from tunedeck.bench.config import BenchConfig, NotReady
from tunedeck.bench.runner import run_benchmark, wait_ready
from tunedeck.bench.sse import SSEParser as _SSE
from tunedeck.util.http import Dechunk


def test_dechunk_split_anywhere():
    wire = b"5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\n\r\n"
    for cut in range(1, len(wire)):
        d = Dechunk()
        out = d.feed(wire[:cut]) + d.feed(wire[cut:])
        assert out == b"hello world" and d.done


def test_sse_split_keeps_arrival_time():
    s = _SSE(keep=True)
    s.feed(1.0, b'data: {"choices":[{"text":"a"}]}\n\nda')
    s.feed(2.0, b'ta: {"choices":[{"text":"b"}]}\n')
    s.feed(3.0, b'\n: comment\n\ndata: {"choices":[],"usage":{"completion_tokens":2}}\n\ndata: [DONE]\n\n')
    assert [e[0] for e in s.events] == [1.0, 3.0, 3.0, 3.0, 3.0]
    assert s.times == [1.0, 3.0] and s.usage == {"completion_tokens": 2} and s.done and s.bad == 0
    s = _SSE()
    s.feed(1.0, b"data: {bad\n\nnonsense line\n\n")
    assert s.bad == 2 and s.times == []


async def _one(url, mode, *, chat=False, n=8, read_timeout=600.0, deadline=None):
    async with make_client(read_timeout=read_timeout) as c:
        ep = EndpointConfig(url, "fake-model", endpoint="chat" if chat else "completions", request_deadline=deadline)
        c.headers["x-fake-mode"] = mode
        return await stream_request(c, ep, RequestSpec("a b c", 3, n, 0))


@pytest.mark.timeout(60)
async def test_each_failure_has_its_type():
    with FakeServer("--ttft-ms", "20", "--itl-ms", "2", "--slowfirst-s", "1.5") as srv:
        ok = await _one(srv.url, "ok")
        assert ok["success"] and ok["error_type"] == "" and ok["output_tokens"] == 8 and ok["usage_present"]
        assert len(ok["itl"]) == 7 and ok["prompt_len"] == 3 and ok["finish_reason"] == "length"
        assert 0.015 < ok["ttft"] < 0.5 and ok["send_time"] < ok["ttft"]
        e = await _one(srv.url, "e500")
        assert not e["success"] and e["error_type"] == "HTTPStatus" and "500" in e["error"]
        assert "injected failure" in e["error"] and len(e["error"]) <= 2048 + 64
        cut = await _one(srv.url, "cut")
        assert not cut["success"] and cut["error_type"] == "IncompleteStream" and len(cut["itl"]) == 3
        bad = await _one(srv.url, "malformed")
        assert not bad["success"] and bad["error_type"] == "MalformedSSE" and bad["bad_lines"] == 1
        slow = await _one(srv.url, "slowfirst", read_timeout=0.5)
        assert not slow["success"] and slow["error_type"] == "ReadTimeout"
        slow_ok = await _one(srv.url, "slowfirst")
        assert slow_ok["success"] and slow_ok["ttft"] > 1.4
        late = await _one(srv.url, "slowfirst", deadline=0.3)
        assert not late["success"] and late["error_type"] == "DeadlineExceeded" and late["elapsed"] < 1.0


@pytest.mark.timeout(30)
async def test_chat_skips_role_only_opening_chunk():
    with FakeServer("--ttft-ms", "80", "--itl-ms", "2") as srv:
        r = await _one(srv.url, "ok", chat=True, n=5)
        assert r["success"], r
        assert r["ttft"] > 0.07 and len(r["itl"]) == 4 and r["output_tokens"] == 5


@pytest.mark.timeout(30)
async def test_refused_connection_and_cancel_keeps_partial():
    async with make_client() as c:
        ep = EndpointConfig("http://127.0.0.1:9", "m")
        r = await stream_request(c, ep, RequestSpec("a", 1, 4, 0))
        assert not r["success"] and r["error_type"] == "ConnectError"
    with FakeServer("--ttft-ms", "10", "--itl-ms", "50") as srv:
        got = []
        async with make_client() as c:
            ep = EndpointConfig(srv.url, "fake-model")
            t = asyncio.create_task(stream_request(c, ep, RequestSpec("a", 1, 100, 0), on_partial=got.append))
            await asyncio.sleep(0.4)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
        assert len(got) == 1 and got[0]["error_type"] == "Cancelled" and not got[0]["success"]
        assert len(got[0]["itl"]) >= 3


@pytest.mark.timeout(60)
async def test_r19_one_failure_never_aborts_the_run():
    pattern = "ok,e500,ok,cut,ok,malformed,ok,slowfirst,ok,ok"
    with FakeServer("--ttft-ms", "10", "--itl-ms", "3", "--slowfirst-s", "2", "--pattern", pattern) as srv:
        cfg = BenchConfig(
            url=srv.url, concurrency=[8], num_prompts=40, input_len=4, output_len=10, warmup=0, read_timeout=0.6
        )
        [s] = await run_benchmark(cfg)
    assert s["completed"] == 24 and s["failed"] == 16
    assert s["error_counts"] == {"HTTPStatus": 4, "IncompleteStream": 4, "MalformedSSE": 4, "ReadTimeout": 4}
    assert len(s["errors"]) == 40 and sum(1 for e in s["errors"] if e) == 16  # vLLM: one entry per request
    assert s["total_output_tokens"] == 240 and not s["partial"]
    samples = store.read_samples(s["run_id"])
    assert len(samples) == 40 and sum(x["success"] for x in samples) == 24


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_r20_c128_eight_second_streams():
    with FakeServer("--ttft-ms", "1000", "--itl-ms", "100") as srv:
        cfg = BenchConfig(url=srv.url, concurrency=[128], num_prompts=128, input_len=4, output_len=71, warmup=0)
        [s] = await run_benchmark(cfg)
    assert s["completed"] == 128 and s["failed"] == 0, s["error_counts"]
    assert s["max_concurrent_requests"] == 128
    assert 7.5 < s["mean_e2el_ms"] / 1000 < 9.0


@pytest.mark.timeout(30)
async def test_r21_readiness_wait_is_bounded():
    with FakeServer("--refuse-until", "2") as srv:
        t = time.monotonic()
        async with make_client() as c:
            assert [m["id"] for m in await wait_ready(c, srv.url, 10)] == ["fake-model"]
        assert 1.5 < time.monotonic() - t < 5
    with FakeServer("--refuse-until", "5") as srv:
        t = time.monotonic()
        async with make_client() as c:
            with pytest.raises(NotReady) as ei:
                await wait_ready(c, srv.url, 1.0)
        assert time.monotonic() - t < 2.5
        assert "not ready after 1 s" in str(ei.value) and "ConnectError" in str(ei.value)


@pytest.mark.timeout(30)
def test_r21_cli_not_ready_exit_code():
    with FakeServer("--refuse-until", "5") as srv:
        r = subprocess.run(
            [*tunedeck_cmd(), "bench", "--url", srv.url, "--ready-timeout", "1", "--num-prompts", "2"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    assert r.returncode == 3 and "NOT_READY" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.timeout(90)
@pytest.mark.parametrize("conc", [1, 64])
def test_timing_agrees_with_the_server(conc):
    """`tunedeck bench` (its own process) reports the server's known TTFT and gap.

    Generous margins (a loaded 2-core machine); benchmarks/client_truth.py measures the precision.
    """
    ttft_ms, itl_ms, n_out = 200.0, 20.0, 16
    n = max(6, conc)
    with FakeServer("--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms)) as srv:
        r = subprocess.run(
            [
                *tunedeck_cmd(),
                "bench",
                "--url",
                srv.url,
                "--concurrency",
                str(conc),
                "--num-prompts",
                str(n),
                "--input-len",
                "8",
                "--output-len",
                str(n_out),
                "--warmup",
                str(conc),
                "--json",
                "-",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        served = srv.stats()
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["completed"] == n and s["failed"] == 0
    # close to what the server actually did ...
    assert abs(s["mean_ttft_ms"] - served["mean_ttft_ms"]) < 0.15 * ttft_ms
    assert abs(s["mean_itl_ms"] - served["mean_itl_ms"]) < 0.15 * itl_ms
    assert abs(s["mean_tpot_ms"] - served["mean_itl_ms"]) < 0.15 * itl_ms
    # ... and to the nominal timing
    assert s["mean_ttft_ms"] == pytest.approx(ttft_ms, rel=0.15)
    assert s["mean_itl_ms"] == pytest.approx(itl_ms, rel=0.15)
    # the server's own token count (warmups included) matches what the client counted
    assert served["tokens"] == (n + conc) * n_out
    assert s["total_output_tokens"] == n * n_out
    assert s["output_throughput"] == pytest.approx(s["total_output_tokens"] / s["duration"])
    assert "Serving Benchmark Result" in r.stderr


@pytest.mark.timeout(60)
async def test_open_loop_and_workers():
    with FakeServer("--ttft-ms", "10", "--itl-ms", "2") as srv:
        cfg = BenchConfig(
            url=srv.url, concurrency=[], request_rate=[40.0], num_prompts=20, input_len=4, output_len=5, warmup=0
        )
        [s] = await run_benchmark(cfg)
        assert s["completed"] == 20 and s["request_rate"] == 40.0 and s["max_concurrency"] is None
        assert "mean_e2el_including_client_queue_ms" in s
        cfg = BenchConfig(url=srv.url, concurrency=[4], num_prompts=16, input_len=4, output_len=5, warmup=2, workers=2)
        [s] = await run_benchmark(cfg)
        assert s["completed"] == 16 and s["client"]["workers"] == 2
        samples = store.read_samples(s["run_id"])
        assert sorted(x["worker"] for x in samples) == [0] * 8 + [1] * 8
        assert sorted(x["index"] for x in samples) == list(range(16))


@pytest.mark.timeout(60)
async def test_sweep_emits_progress_and_one_run_per_level():
    msgs = []
    with FakeServer("--ttft-ms", "10", "--itl-ms", "50") as srv:
        cfg = BenchConfig(url=srv.url, concurrency=[1, 4], num_prompts=8, input_len=4, output_len=30, warmup=0)
        out = await run_benchmark(cfg, emit=msgs.append)
    assert [s["max_concurrency"] for s in out] == [1, 4]
    assert out[0]["sweep_id"] and out[0]["sweep_id"] == out[1]["sweep_id"]
    ticks = [m for m in msgs if m["type"] == "tick"]
    assert len(ticks) >= 3 and any(t["tok_s"] > 0 for t in ticks)
    assert any(t["in_flight"] > 0 for t in ticks)
    assert [m["type"] for m in msgs if m["type"] != "tick"] == [
        "waiting",
        "start",
        "level_start",
        "connected",
        "level_done",
        "level_start",
        "connected",
        "level_done",
        "done",
    ]
    # connections are opened before t0 (one per concurrent request) and none during the timed phase
    conn = [m for m in msgs if m["type"] == "connected"]
    assert [c["connections"] for c in conn] == [0, 3]  # the readiness probe's connection is reused
    assert out[1]["client"]["connections_opened_timed"] == 0
    json.dumps(msgs, allow_nan=False)
    # every emitted event parses with the one progress-line parser
    from tunedeck.bench.records import BenchEvent

    evs = [BenchEvent.from_json(json.dumps(m, allow_nan=False)) for m in msgs]
    assert [e.summary.completed for e in evs if e.type == "level_done"] == [8, 8]
    assert all(e.level is not None for e in evs if e.type in ("tick", "level_start", "connected"))
    runs = store.list_runs()
    assert len(runs) == 2 and all(not r.partial for r in runs)
    meta = runs[0].meta
    assert meta["params"]["ignore_eos"] is True and meta["params"]["seed"] == 0
    assert meta["client"]["hostname"] and meta["client"]["where"] == "same-host"
    assert isinstance(meta["bench_start"], float)
    assert math.isclose(out[1]["per_user_output_throughput"], out[1]["output_throughput"] / 4)
