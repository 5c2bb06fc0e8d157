"""Results store: crash safety (kill -9), rebuild, list/show/export through the CLI."""

import csv
import functools
import json
import os
import signal
import time

import pytest

from tests.clifix import bench_load, json_lines, run_cli, running
from tests.fakesrv import FakeServer
from tests.waits import until
from tunedeck.bench import store
from tunedeck.util.paths import data_dir

_cli = functools.partial(run_cli, timeout=30)

#: one successful request's sample, as the benchmark's workers record it
SAMPLE = {
    "index": 0,
    "success": True,
    "ttft": 0.1,
    "itl": [0.01],
    "latency": 0.11,
    "output_tokens": 2,
    "prompt_len": 3,
    "start_time": 5.0,
}


def test_writer_meta_first_lock_and_torn_tail():
    meta = {
        "model": "m",
        "params": {"endpoint": "completions", "max_concurrency": 2, "request_rate": "inf"},
        "server": {"argv": ["vllm", "serve", "m"], "env": {"HF_TOKEN": "sekrit-123", "NCCL_DEBUG": "WARN"}},
    }
    w = store.RunWriter("r1", meta)
    d = data_dir() / "results" / "r1"
    m = json.loads((d / "meta.json").read_text())
    assert m["server"]["env"] == {"HF_TOKEN": "<redacted>", "NCCL_DEBUG": "WARN"} and m["run_id"] == "r1"
    assert store.is_live(d)
    with pytest.raises(store.StoreError, match="another process"):
        store.RunWriter("r1", meta)
    s = {**SAMPLE, "elapsed": 0.12, "_events": "dropped"}
    w.append(s)
    w.append({**s, "index": 1, "start_time": 5.2})
    w.close()
    assert not store.is_live(d)
    with open(d / "samples.jsonl", "ab") as f:
        f.write(b'{"index": 2, "succ')  # a torn line, as kill -9 mid-write would leave
    summary = store.rebuild_summary("r1")
    assert summary["completed"] == 2 and summary["partial"] is True
    w = store.RunWriter("r1", meta)  # reopening repairs the tail
    assert w.samples.repaired > 0
    w.close()
    assert (d / "samples.jsonl").read_bytes().endswith(b"}\n")
    assert "sekrit" not in "".join(p.read_text() for p in d.iterdir() if p.is_file())


def test_bad_run_ids_and_missing_runs():
    for bad in ("../x", "", "a/b", "-x"):
        with pytest.raises(store.StoreError):
            store.run_dir(bad)
    r = _cli("results", "show", "nope")
    assert r.returncode == 1 and "not found" in r.stderr and "Traceback" not in r.stderr
    r = _cli("results", "list", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == []


def test_cli_bad_input_is_one_line():
    for args, word in (
        (["bench", "--url", "http://127.0.0.1:9", "--goodput", "tbt:5"], "--goodput"),
        (["bench", "--url", "http://127.0.0.1:9", "--concurrency", "0"], "--concurrency"),
        (["bench"], "--url"),
        (["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1,2", "--request-rate", "1,2"], "not both"),
    ):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert word in r.stderr and "Traceback" not in r.stderr


@pytest.mark.timeout(90)
def test_kill_9_mid_run_keeps_every_sample_and_show_rebuilds(tmp_path):
    load = bench_load(32, 5000, 20, json_out=False)
    with (
        FakeServer("--ttft-ms", "20", "--itl-ms", "10") as srv,
        running("bench", "--url", srv.url, *load, "--progress") as proc,
    ):
        events = json_lines(proc)
        assert next(events)["type"] == "waiting"
        run_id = next(msg for msg in events if msg["type"] == "level_start")["run_id"]
        samples = data_dir() / "results" / run_id / "samples.jsonl"
        until(lambda: samples.exists() and samples.read_bytes().count(b"\n") >= 150, 30, what="150 samples stored")
        next(msg for msg in events if msg["type"] == "tick")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    raw = samples.read_bytes()
    lines = raw.split(b"\n")
    complete = lines[:-1]  # whatever follows the last newline is a torn tail
    assert len(complete) >= 150
    parsed = [json.loads(ln) for ln in complete]  # every complete line is intact
    assert all(p["success"] for p in parsed)
    d = samples.parent
    assert not (d / "summary.json").exists()
    assert json.loads((d / "meta.json").read_text())["params"]["max_concurrency"] == 32
    r = _cli("results", "show", run_id, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["partial"] is True and s["completed"] == len(parsed) and s["failed"] == 0
    assert s["total_output_tokens"] == 20 * len(parsed) and s["duration"] > 0
    assert json.loads((d / "summary.json").read_text())["partial"] is True
    r = _cli("results", "show", run_id[:12])
    assert r.returncode == 0 and "Serving Benchmark Result" in r.stdout and "PARTIAL" in r.stdout
    r = _cli("results", "list")
    assert run_id in r.stdout and "partial" in r.stdout
    out = tmp_path / "x.csv"
    r = _cli("results", "export", run_id, "--csv", str(out), "--vllm-json", str(tmp_path / "v.json"))
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == len(parsed) and float(rows[0]["ttft"]) > 0.015
    v = json.loads((tmp_path / "v.json").read_text())
    assert len(v["ttfts"]) == len(v["itls"]) == len(v["latencies"]) == len(parsed)
    assert v["completed"] == len(parsed) and len(v["itls"][0]) == 19


@pytest.mark.timeout(60)
def test_sigint_with_workers_keeps_partial_samples():
    with FakeServer("--ttft-ms", "20", "--itl-ms", "20") as srv:
        load = bench_load(8, 400, 40, warmup=2, json_out=False)
        with running("bench", "--url", srv.url, *load, "--workers", "2", "--progress") as proc:
            run_id = None
            for msg in json_lines(proc):
                if msg["type"] == "level_start":
                    run_id = msg["run_id"]
                if msg["type"] == "tick" and msg["completed"] >= 8:
                    break
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    done = [json.loads(ln) for ln in out.splitlines() if '"level_done"' in ln]
    assert done and done[0]["summary"]["partial"] is True
    samples = store.read_samples(run_id)
    cancelled = [s for s in samples if s["error_type"] == "Cancelled"]
    assert len(cancelled) >= 1 and {s["worker"] for s in samples} == {0, 1}
    s = json.loads((data_dir() / "results" / run_id / "summary.json").read_text())
    # a request the stop cut short is cancelled, not failed
    assert s["partial"] is True and s["completed"] + s["failed"] + s["cancelled"] == len(samples)
    assert s["cancelled"] == len(cancelled) and s["failed"] == 0, s
    assert s["error_counts"].get("Cancelled") == len(cancelled)


@pytest.mark.timeout(90)
def test_kill_9_loses_no_sample_handed_over_a_second_earlier():
    """Samples go to a writer thread; whatever it got > 1 s before a kill -9 is in samples.jsonl."""
    with FakeServer("--ttft-ms", "5", "--itl-ms", "2") as srv:
        seen: list[tuple[float, int]] = []  # (when this process read it, request index)
        run_id = None
        load = bench_load(16, 100000, 10, json_out=False)
        with running("bench", "--url", srv.url, *load, "--progress", "--progress-samples") as proc:
            start = None
            for msg in json_lines(proc):
                now = time.monotonic()
                if msg["type"] == "level_start":
                    run_id = msg["run_id"]
                elif msg["type"] == "sample":
                    seen.append((now, msg["index"]))
                    start = start or now
                    if now - start > 2.5:
                        break
            os.kill(proc.pid, signal.SIGKILL)
            killed = time.monotonic()
            proc.wait(10)
    # the sample event is emitted right after the hand-over, so this is a lower bound on its age
    old = {i for t, i in seen if killed - t > 1.0}
    assert len(old) > 100
    on_disk = {s["index"] for s in store.read_samples(run_id)}
    assert old <= on_disk, sorted(old - on_disk)[:10]


def test_results_list_names_each_runs_host_and_profile():
    for run_id, meta in (
        ("r-host", {"target": "gpuop@gpu-box:2222", "profile": "sglang-tuned", "model": "m"}),
        ("r-bare", {"model": "m"}),
        ("r-evil", {"target": "h\x1b]0;pwned\x07", "profile": "a-very-long-profile-name-indeed", "model": "m"}),
    ):
        w = store.RunWriter(run_id, {**meta, "params": {"max_concurrency": 4}})
        w.close()
    r = _cli("results", "list")
    assert r.returncode == 0, r.stderr
    head, *lines = r.stdout.splitlines()
    assert head.split()[:4] == ["RUN", "STATUS", "HOST", "PROFILE"], head
    row = {ln.split()[0]: ln.split() for ln in lines if ln.startswith("r-")}
    assert row["r-host"][2:4] == ["gpuop@gpu-box:2222", "sglang-tuned"]
    assert row["r-bare"][2:4] == ["-", "-"]
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout  # a host's text never reaches the terminal raw
    assert row["r-evil"][3] == "a-very-long-pro…"
    listed = {x["run_id"]: x for x in json.loads(_cli("results", "list", "--json").stdout)}
    assert listed["r-host"]["profile"] == "sglang-tuned" and listed["r-host"]["target"] == "gpuop@gpu-box:2222"
