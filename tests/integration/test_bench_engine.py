"""The benchmark engine on its own: stdlib only, Python 3.9, no orphans, typed progress records."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.clifix import bench_load, json_lines, running
from tests.conftest import REPO
from tests.fakesrv import FakeServer
from tunedeck.bench.records import BenchEvent, LevelSummary, RecordError, Sample, parse_progress

PY39 = "/root/.pyenv/versions/3.9.18/bin/python3.9"


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.timeout(120)
def test_engine_runs_alone_on_python39_stdlib_only():
    """Only tunedeck.bench.ENGINE_MODULES, copied alone, under `python3.9 -I -S` (no site-packages) against the sim."""
    sys.path.insert(0, str(REPO / "scripts"))
    import bench_engine_portable

    python = PY39 if os.path.exists(PY39) else sys.executable
    rep = bench_engine_portable.run(python)
    if python == PY39:
        assert rep["python"].startswith("3.9.")
    assert rep["forbidden_loaded"] == []
    assert [lv["workers"] for lv in rep["levels"]] == [1, 2]
    for lv in rep["levels"]:
        assert lv["completed"] == 16 and lv["failed"] == 0
        assert lv["total_input_tokens"] == 16 * 64 and lv["input_len_mismatch"] == 0
        assert lv["total_output_tokens"] == 16 * 16
    assert {"connected", "level_done", "tick"} <= set(rep["event_types"])
    assert rep["files"] == [".lock", "meta.json", "samples.jsonl", "summary.json"]


def test_engine_imports_nothing_outside_the_standard_library():
    code = (
        "import sys\n"
        "import tunedeck.bench.runner, tunedeck.bench.worker, tunedeck.bench.store, tunedeck.bench.records\n"
        "bad = [m for m in ('httpx', 'psutil', 'platformdirs', 'textual', 'rich') if m in sys.modules]\n"
        "print(bad)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.timeout(60)
def test_kill_9_leaves_no_worker_behind():
    with FakeServer("--ttft-ms", "20", "--itl-ms", "50") as srv:
        load = bench_load(8, 400, 200, json_out=False)
        with running("bench", "--url", srv.url, *load, "--workers", "3", "--progress") as proc:
            next(msg for msg in json_lines(proc) if msg["type"] == "tick")
            workers = _children(proc.pid)
            assert len(workers) == 3 and all(_alive(p) for p in workers)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            t = time.monotonic()
            while any(_alive(p) for p in workers) and time.monotonic() - t < 1.5:
                time.sleep(0.05)
            orphans = [p for p in workers if _alive(p)]
        for p in orphans:
            os.kill(p, signal.SIGKILL)
        assert orphans == [], "workers outlived their benchmark by > 1.5 s"


def test_bench_event_is_the_one_progress_parser():
    ev = BenchEvent.from_json('{"type":"tick","level":0,"t":1.0,"completed":3,"tok_s":40,"ttft_p50_ms":null}\n')
    assert ev.type == "tick" and ev.level == 0 and ev["tok_s"] == 40 and ev.get("ttft_p50_ms") is None
    assert BenchEvent.from_json(ev.to_json()) == ev and json.loads(ev.to_json()) == ev.to_dict()
    done = BenchEvent.from_json(
        json.dumps(
            {
                "type": "level_done",
                "level": 1,
                "run_id": "r1",
                "summary": {
                    "run_id": "r1",
                    "completed": 9,
                    "failed": 1,
                    "duration": 2.5,
                    "output_throughput": 100.0,
                    "max_concurrency": 4,
                    "request_rate": "inf",
                    "partial": False,
                    "client_bound": False,
                    "mean_ttft_ms": 5,
                },
            }
        )
    )
    assert isinstance(done.summary, LevelSummary) and done.summary.completed == 9
    assert done.summary.get("mean_ttft_ms") == 5 and done.run_id == "r1"
    assert LevelSummary.from_json(done.summary.to_json()) == done.summary
    for bad, what in (
        ("not json", "not JSON"),
        ("[1]", "JSON object"),
        ('{"level":1}', "type"),
        ('{"type":"tick"}', "no level"),
        ('{"type":"tick","level":"x"}', "integer"),
        ('{"type":"level_done","level":0}', "summary"),
        ('{"type":"level_done","level":0,"summary":{"completed":"x"}}', "completed"),
    ):
        with pytest.raises(RecordError, match=what):
            BenchEvent.from_json(bad)
    assert BenchEvent.from_json('{"type":"future_kind","x":1}').type == "future_kind"
    evs = parse_progress('{"type":"waiting","url":"u","timeout":1}\nnoise\n\n{"type":"done","run_ids":[]}\n')
    assert [e.type for e in evs] == ["waiting", "done"]
    assert BenchEvent.make("error", kind="NOT_READY", message="m").to_dict() == {
        "type": "error",
        "kind": "NOT_READY",
        "message": "m",
    }


def test_sample_record_round_trip():
    line = json.dumps(
        {
            "index": 3,
            "success": True,
            "ttft": 0.1,
            "itl": [0.01, 0.02],
            "latency": 0.13,
            "prompt_len": 64,
            "prompt_len_sent": 64,
            "prompt_len_exact": True,
            "output_tokens": 3,
            "start_time": 1.0,
            "usage_present": True,
            "unknown_future_field": 1,
        }
    )
    s = Sample.from_json(line)
    assert s.itl == (0.01, 0.02) and s.prompt_len_exact and s.index == 3
    assert Sample.from_json(s.to_json()) == s
    with pytest.raises(RecordError, match="itl"):
        Sample.from_json('{"index": 1, "itl": 5}')


def test_client_bound_and_machine_busy_are_told_apart():
    from tunedeck.bench.health import client_health

    idle_machine = {"ncpu": 8, "load1_max": 1.0, "steal": 0.0, "busy": 0.2}
    calm = client_health([{"cpu": [0.2], "cpu_avg": 0.2, "lag_p99_ms": 0.5, "lag_max_ms": 2, "machine": idle_machine}])
    assert not calm["client_bound"] and not calm["machine_busy"]
    hot = client_health([{"cpu": [0.97], "cpu_avg": 0.95, "lag_p99_ms": 9, "lag_max_ms": 30, "machine": idle_machine}])
    assert hot["client_bound"] and "0.95 of a core" in hot["client_bound_reason"] and not hot["machine_busy"]
    # lag while the client itself was nearly idle: someone else had the CPU
    starved = client_health(
        [
            {
                "cpu": [0.1],
                "cpu_avg": 0.1,
                "lag_p99_ms": 12,
                "lag_max_ms": 80,
                "machine": {"ncpu": 2, "load1_max": 5.0, "steal": 0.12, "busy": 1.0},
            }
        ]
    )
    assert not starved["client_bound"] and starved["machine_busy"]
    assert "steal 12 %" in starved["machine_busy_reason"] and "load 5.0 on 2 cores" in starved["machine_busy_reason"]
    assert starved["loop_lag_max_ms"] == 80


async def test_monitor_measures_own_cpu_not_the_machines():
    import asyncio
    import time as _t

    from tunedeck.bench.health import ClientMonitor

    mon = ClientMonitor()
    mon.start()
    await asyncio.sleep(0.01)  # the lag probe is now asleep, waiting for its 50 ms tick
    t = _t.process_time()
    while (
        _t.process_time() - t < 0.3
    ):  # burn 0.3 s of this process's CPU on the loop (more wall time on a busy machine)
        pass
    await asyncio.sleep(0.3)
    rep = await mon.stop()
    assert 0.1 < rep["cpu_seconds"] < 1.0
    assert rep["lag_max_ms"] > 150  # the busy loop above stalled the event loop
    assert rep["machine"]["ncpu"] >= 1 and "steal" in rep["machine"]


async def test_bad_settings_are_one_clear_error_before_anything_is_sent():
    from tunedeck.bench.config import BenchConfig
    from tunedeck.bench.runner import run_benchmark

    for kw, what in (
        ({"url": "ftp://x"}, "BenchConfig.url"),
        ({"url": "http://h:99999"}, "BenchConfig.url"),
        ({"endpoint": "embed"}, "BenchConfig.endpoint"),
        ({"input_len": 0}, "BenchConfig.input_len"),
        ({"concurrency": [0]}, "BenchConfig.concurrency"),
        ({"request_rate": [-1.0]}, "request_rate"),
        ({"transport": "httpx"}, "transport"),
        ({"warmup": -1}, "BenchConfig.warmup"),
        ({"goodput": {"tbt": 5.0}}, "BenchConfig.goodput"),
        ({"goodput": {"ttft": -1.0}}, "BenchConfig.goodput"),
    ):
        cfg = BenchConfig(**{"url": "http://127.0.0.1:9", **kw})
        with pytest.raises(ValueError, match=what) as ei:
            await run_benchmark(cfg, save=False)
        assert "\n" not in str(ei.value)


async def test_the_start_event_carries_the_goodput_targets_and_the_summary_applies_them():
    """What the live view needs to know up front (the targets; {} for none) and the summary's count."""
    from tunedeck.bench.config import BenchConfig
    from tunedeck.bench.runner import run_benchmark

    with FakeServer("--ttft-ms", "5", "--itl-ms", "2") as srv:
        events: list = []
        cfg = BenchConfig(
            url=srv.url,
            concurrency=[4],
            num_prompts=24,
            input_len=8,
            output_len=12,
            warmup=0,
            goodput={"ttft": 60000.0, "tpot": 60000.0, "itl": 60000.0},
        )
        [summary] = await run_benchmark(cfg, emit=events.append, save=False)
        start = next(e for e in events if e["type"] == "start")
        assert start["goodput"] == {"ttft": 60000.0, "tpot": 60000.0, "itl": 60000.0}
        assert summary["request_goodput"] * summary["duration"] == pytest.approx(24)  # every one is good
        events.clear()
        cfg = BenchConfig(
            url=srv.url, concurrency=[4], num_prompts=24, input_len=8, output_len=12, warmup=0, goodput={"ttft": 0.0}
        )
        [summary] = await run_benchmark(cfg, emit=events.append, save=False)
        assert summary["request_goodput"] == 0.0  # no TTFT is 0
        events.clear()
        cfg = BenchConfig(url=srv.url, concurrency=[4], num_prompts=8, input_len=8, output_len=12, warmup=0)
        [summary] = await run_benchmark(cfg, emit=events.append, save=False)
        assert summary["request_goodput"] is None
        assert next(e for e in events if e["type"] == "start")["goodput"] == {}


def test_progress_good_count_follows_the_slo_rule():
    from tunedeck.bench.levels import Progress

    fast = {"success": True, "output_tokens": 3, "ttft": 0.05, "itl": [0.01, 0.02], "latency": 0.08}
    slow = {"success": True, "output_tokens": 3, "ttft": 0.5, "itl": [0.01, 0.02], "latency": 0.53}
    stall = {"success": True, "output_tokens": 3, "ttft": 0.05, "itl": [0.01, 0.3], "latency": 0.36}
    p = Progress(level=0, t0=0.0, total=10, goodput={"ttft": 100.0, "itl": 100.0})
    for s in (fast, slow, stall, {"success": False, "error_type": "HTTPStatus"}):
        p.add_sample(s)
    t = p.tick(2.0)
    assert (t["completed"], t["failed"], t["good"]) == (3, 1, 1)


def test_a_request_cut_by_a_stop_is_cancelled_not_failed():
    from tunedeck.bench import metrics
    from tunedeck.bench.levels import Progress

    ok = {"success": True, "start_time": 0.0, "output_tokens": 3, "ttft": 0.05, "itl": [0.01, 0.02], "latency": 0.08}
    cut = {"success": False, "error_type": "Cancelled", "error": "cancelled before the response ended"}
    bad = {"success": False, "error_type": "HTTPStatus"}
    p = Progress(level=0, t0=0.0, total=10)
    for s in (ok, cut, bad):
        p.add_sample(s)
    t = p.tick(2.0)
    assert (t["completed"], t["failed"], t["cancelled"]) == (1, 1, 1)
    r = metrics.calculate_metrics([ok, cut, bad], 1.0)
    assert (r["completed"], r["failed"], r["cancelled"]) == (1, 1, 1)
    assert "Cancelled requests (stopped):" in metrics.format_result({**r, "request_rate": "inf"})
    assert Progress(level=0, t0=0.0, total=1).tick(1.0)["good"] is None
