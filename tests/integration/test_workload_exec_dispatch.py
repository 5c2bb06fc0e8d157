"""Scheduled dispatch: trace replay (``RequestSpec.at_s``) and Gamma arrivals on one path, with the
scheduled and actual send time of every request, checked against what a loopback server received."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.fakesrv import FakeServer
from tunedeck.bench import metrics
from tunedeck.bench.client import EndpointConfig, Live, RequestSpec, make_client
from tunedeck.bench.levels import LoadShape, drive, schedule_of
from tunedeck.bench.prompts import arrival_offsets
from tunedeck.util.aio import run_async


def _trace(n: int, span: float) -> list[RequestSpec]:
    """A bursty schedule: groups of 1-4 requests share one timestamp (like Mooncake rows), given out of order."""
    specs = []
    t = 0.0
    i = 0
    while i < n:
        for _ in range(min(1 + i % 4, n - i)):
            specs.append(RequestSpec([1, 2, 3, 4], 4, 3, i, True, at_s=round(t, 4)))
            i += 1
        t += span / n * 2.5
    specs.reverse()  # the dispatcher orders by at_s, not by position
    return specs


async def _drive(url: str, specs: list[RequestSpec], shape: LoadShape) -> tuple[float, list[dict]]:
    out: list[dict] = []
    ep = EndpointConfig(url, "fake-model")
    async with make_client() as client:
        start = await drive(
            client,
            ep,
            specs,
            shape,
            t0=None,
            live=Live(),
            on_sample=out.append,
        )
    return start, out


@pytest.mark.timeout(120)
def test_trace_replay_sends_each_request_at_its_time(tmp_path):
    rec = tmp_path / "received.jsonl"
    specs = _trace(240, 3.0)
    with FakeServer("--ttft-ms", "5", "--itl-ms", "1", "--record", str(rec)) as srv:
        start, samples = run_async(_drive(srv.url, specs, LoadShape()))
    assert len(samples) == 240 and all(s["success"] for s in samples), samples[:2]
    by_index = {sp.index: sp for sp in specs}
    for s in samples:
        sp = by_index[s["index"]]
        assert s["scheduled_at"] == pytest.approx(sp.at_s, abs=1e-9)
        assert s["sent_at"] >= sp.at_s - 1e-6  # never early
        assert s["dispatch_lag"] is not None and s["dispatch_lag"] >= 0
    # what the server saw: arrivals follow the schedule (same CLOCK_MONOTONIC in both processes);
    # the old dispatcher ignored at_s and sent all 240 at once
    arrivals = sorted(json.loads(line)["t"] - start for line in rec.read_text().splitlines())
    schedule = sorted(sp.at_s for sp in specs)
    assert len(arrivals) == 240
    late = sorted(a - s for a, s in zip(arrivals, schedule))
    assert late[0] > -0.001, "a request reached the server before its scheduled time"
    assert metrics.percentile_sorted(late, 99) < 0.25, late[-5:]
    assert arrivals[-1] >= schedule[-1] and arrivals[-1] - arrivals[0] > 0.8 * (schedule[-1] - schedule[0])
    summ = metrics.dispatch_lag(samples)
    # the typical request goes at its time; the tail is the machine's: a loaded 2-core machine
    # descheduled the client for ~100 ms (p99 104 ms beside a full suite), so the tail gets the
    # server-side bound above. The tight figures are benchmarks/trace_replay.py's and
    # workload_timing.py's, taken on a quiet machine
    assert summ["dispatch_lag_p50_ms"] is not None and summ["dispatch_lag_p50_ms"] <= 10.0, summ
    assert summ["dispatch_lag_p99_ms"] <= 250.0, summ
    assert summ["dispatch_lag_p50_ms"] <= summ["dispatch_lag_p99_ms"] <= summ["dispatch_lag_max_ms"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("uvloop", [True, False], ids=["uvloop", "asyncio"])
def test_a_due_send_goes_out_between_the_reads_of_a_burst(uvloop: bool) -> None:
    """An engine emits a decode step's tokens for every running request at once: here 100 streams
    get 400 tokens each at about the same moment, and parsing them holds the client's event loop
    for hundreds of milliseconds. Requests that fall due meanwhile are written between two
    streams' batches (the pool's gate), not after the whole burst: the dispatcher used to wake
    behind it, and the request's own task started one loop iteration later still."""
    holders = [RequestSpec([1, 2], 2, 400, i, True, at_s=0.0) for i in range(100)]
    # due every 10 ms around the burst (~0.4 s: the server's TTFT after the holders arrived)
    probes = [RequestSpec([1, 2], 2, 1, 100 + j, True, at_s=0.3 + 0.01 * j) for j in range(61)]
    # loop iterations that took 20 ms or more: (from, to, the share of it this thread ran)
    held: list[tuple[float, float, float]] = []

    async def go(url: str) -> tuple[float, list[dict]]:
        ep = EndpointConfig(url, "fake-model")
        out: list[dict] = []
        running = True

        async def watch() -> None:  # the loop's iterations, as gaps between two turns of this task
            while running:
                t, cpu = time.perf_counter(), time.thread_time()
                await asyncio.sleep(0)
                wall = time.perf_counter() - t
                if wall >= 0.02:
                    held.append((t, t + wall, (time.thread_time() - cpu) / wall))

        async with make_client() as client:
            await client.warm(ep.url, 170)  # connects are not what this is about
            w = asyncio.ensure_future(watch())
            start = await drive(
                client,
                ep,
                holders + probes,
                LoadShape(),
                t0=None,
                live=Live(),
                on_sample=out.append,
            )
            running = False
            await w
        return start, out

    with FakeServer("--ttft-ms", "400", "--itl-ms", "0", "--burst", "400") as srv:
        start, samples = run_async(go(srv.url), fast=uvloop)
    assert len(samples) == 161 and all(s["success"] for s in samples), [s["error"] for s in samples][:3]
    inside = []  # (sent before the held iteration ended, lag, share of it this thread ran) per probe due in one
    for s in samples:
        if s["index"] < 100:
            continue
        due = start + s["scheduled_at"]
        for a, b, ran in held:
            if a <= due < b:
                inside.append((due + s["dispatch_lag"] < b, s["dispatch_lag"], ran))
    longest = max((b - a for a, b, _ in held), default=0.0)
    assert len(inside) >= 5, f"the burst held the loop {longest * 1000:.0f} ms at most, over {len(inside)} probes"
    # An iteration the loop spent parsing the burst runs this thread most of its time; one the
    # process spent mostly descheduled (a loaded machine: other sessions' processes ran) sends
    # nothing while it waits. The gate is judged on the first kind.
    burst = [(ok, lag) for ok, lag, ran in inside if ran >= 0.5]
    early = sum(1 for ok, _ in burst if ok)
    # before: none went out before the iteration holding the loop ended (lags ~0.9 s at 100 x 400
    # tokens); now nearly all, a few ms after their time; half holds on a loaded machine
    shares = sorted(round(ran, 2) for *_, ran in held)
    assert early >= len(burst) / 2, (early, len(burst), sorted(round(lag * 1000, 1) for _, lag in burst), shares)


@pytest.mark.timeout(120)
def test_trace_replay_honours_a_concurrency_cap_given_with_it():
    specs = [RequestSpec([1, 2], 2, 20, i, True, at_s=0.0) for i in range(12)]
    with FakeServer("--ttft-ms", "5", "--itl-ms", "10") as srv:
        _start, samples = run_async(_drive(srv.url, specs, LoadShape(concurrency=3)))
    assert all(s["success"] for s in samples)
    assert metrics.max_overlap(samples) == 3
    # the slot wait is queue time, not dispatch lag: the dispatcher itself was on time
    assert max(s["client_queue_time"] for s in samples) > 0.1
    assert metrics.dispatch_lag(samples)["dispatch_lag_p99_ms"] < 50.0


@pytest.mark.timeout(120)
def test_request_rate_records_the_gamma_schedule_on_the_same_path():
    specs = [RequestSpec([1, 2], 2, 2, i, True) for i in range(40)]
    with FakeServer("--ttft-ms", "2", "--itl-ms", "1") as srv:
        _start, samples = run_async(_drive(srv.url, specs, LoadShape(rate=40.0, seed=5)))
    want = arrival_offsets(40, 40.0, 1.0, 5)
    got = {s["index"]: s for s in samples}
    for i, off in enumerate(want):
        assert got[i]["scheduled_at"] == pytest.approx(off, abs=1e-9)
        assert got[i]["sent_at"] >= off - 1e-6
    assert metrics.dispatch_lag(samples)["dispatch_lag_p99_ms"] is not None


@pytest.mark.timeout(60)
def test_closed_loop_has_no_dispatch_lag_figure():
    specs = [RequestSpec([1, 2], 2, 2, i, True) for i in range(6)]
    with FakeServer("--ttft-ms", "2", "--itl-ms", "1") as srv:
        _start, samples = run_async(_drive(srv.url, specs, LoadShape(concurrency=2)))
    d = metrics.dispatch_lag(samples)
    assert d["dispatch_lag_p99_ms"] is None and d["dispatch_behind"] is False
    assert all(s["scheduled_at"] is None for s in samples)


def test_dispatch_behind_is_a_warning_line():
    late = [{"dispatch_lag": 0.001}] * 98 + [{"dispatch_lag": 0.004}, {"dispatch_lag": 0.150}]
    d = metrics.dispatch_lag(late)
    assert d["dispatch_behind"] and d["dispatch_late_requests"] == 1
    line = metrics.dispatch_warning(d)
    assert line is not None and line.startswith("DISPATCH BEHIND") and "max 150.0 ms" in line
    ok = metrics.dispatch_lag([{"dispatch_lag": 0.001}] * 100)
    assert not ok["dispatch_behind"] and metrics.dispatch_warning(ok) is None
    # p99 over 10 ms also counts, even with nothing over 100 ms
    assert metrics.dispatch_lag([{"dispatch_lag": 0.02}] * 100)["dispatch_behind"]


def test_a_schedule_on_only_some_requests_is_refused():
    specs = [RequestSpec("a", 1, 1, 0, at_s=0.5), RequestSpec("b", 1, 1, 1)]
    with pytest.raises(ValueError, match=r"at_s: set on 1 of 2 requests"):
        schedule_of(specs)
    with pytest.raises(ValueError, match=r"at_s -1"):
        schedule_of([RequestSpec("a", 1, 1, 0, at_s=-1.0)])
    assert schedule_of([RequestSpec("a", 1, 1, 0)]) is None


@pytest.mark.timeout(120)
def test_trace_replay_with_worker_processes_keeps_the_schedule():
    from tunedeck.bench.config import BenchConfig
    from tunedeck.bench.fanout import run_level_workers
    from tunedeck.bench.levels import Level, Progress

    specs = _trace(60, 1.5)
    samples: list[dict] = []
    with FakeServer("--ttft-ms", "3", "--itl-ms", "1") as srv:
        cfg = BenchConfig(url=srv.url, workers=2, warmup=0, preconnect=False)
        _d, _h, finished = run_async(
            run_level_workers(
                cfg,
                EndpointConfig(srv.url, "fake-model"),
                Level(
                    specs,
                    LoadShape(preopen=False),
                    Progress(0, 0.0, 60),
                    samples.append,
                    lambda m: None,
                    lambda t: None,
                ),
            )
        )
    assert finished and len(samples) == 60 and {s["worker"] for s in samples} == {0, 1}
    by_index = {sp.index: sp for sp in specs}
    for s in samples:
        assert s["scheduled_at"] == pytest.approx(by_index[s["index"]].at_s, abs=1e-9)
        assert s["sent_at"] >= s["scheduled_at"] - 1e-6
    assert (
        metrics.dispatch_lag(samples)["dispatch_lag_p99_ms"] <= 100.0
    )  # loaded 2 cores read 51 ms; quiet: benchmarks/
