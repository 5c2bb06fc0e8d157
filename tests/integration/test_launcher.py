"""Detached launch, startup tracking, follow, stop on a LocalHost with a fake server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import sys
import time
from pathlib import Path

import pytest

from tests.clifix import FAKE
from tests.ports import free_port
from tunedeck.hostops import hostruns, logfollow, runstore
from tunedeck.hostops import launcher as L
from tunedeck.hostops.localhost import LocalHost
from tunedeck.hostops.startupeta import load_history
from tunedeck.hostops.startupstate import format_progress
from tunedeck.hostops.tracker import StartupTracker, wait_ready

pytestmark = pytest.mark.timeout(60)


def fake(engine: str = "sglang", port: int | None = None, *extra: str) -> tuple[list[str], int]:
    port = port or free_port()
    return [sys.executable, FAKE, "--engine", engine, "--port", str(port), *extra], port


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not alive
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.fixture
async def host():
    h = LocalHost()
    yield h
    # never leave a server behind
    for run in await L.list_host_runs(h):
        if run.alive:
            rec = runstore.RunStore().load(run.run_id) or runstore.RunRecord(
                run.run_id, "local", [], run_dir=run.run_dir
            )
            rec.run_dir = run.run_dir
            await L.stop_run(h, rec, grace=1, gpu_wait=1)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
async def test_launch_ready_stop(host, engine):
    argv, port = fake(engine, None, "--load-seconds", "1.5")
    rec = await L.launch(host, argv, {"HF_TOKEN": "sekrit-123", "FOO": "a b"}, engine=engine, port=port, profile="p1")
    assert rec.status == runstore.STARTING and rec.pid and rec.run_dir
    run_dir = Path(rec.run_dir)
    for name in ("pid", "starttime", "argv.json", "env.json", "meta.json", "run.sh", "log"):
        assert (run_dir / name).exists(), name
    assert "sekrit" not in (run_dir / "env.json").read_text()
    snaps = []
    final = await wait_ready(host, rec, timeout=30, stall_after=20, on_update=snaps.append, poll_gpu=False)
    assert final.state == "ready", final
    assert final.fraction == 1.0
    if engine == "vllm":  # the vLLM ready line is confirmed with /health
        assert final.health == "ok"
    phases = [e.get("phase") for e in runstore.RunStore().load(rec.run_id).timeline if e.get("phase")]
    assert phases[:1] == ["process-start"] and "weight-loading" in phases and "graph-capture" in phases
    assert any(s.phase == "weight-loading" and s.phase_total == 8 for s in snaps) or "weight-loading" in phases
    stored = runstore.RunStore().load(rec.run_id)
    assert stored.status == "ready"
    # history for the ETA of the next load of the same profile
    assert load_history("local|p1")
    # a second launch is refused while this run lives
    with pytest.raises(L.LaunchRefused, match=rec.run_id):
        await L.launch(host, argv, engine=engine, port=port)
    runs = await L.list_host_runs(host)
    assert [r.run_id for r in runs if r.alive] == [rec.run_id]
    assert runs[0].meta["profile"] == "p1"
    res = await L.stop_run(host, rec, grace=5)
    assert res.state == "stopped" and not res.escalated
    assert not any(pid_alive(p) for p in res.pids)
    assert (run_dir / "rc").read_text().strip() == "143"
    assert runstore.RunStore().load(rec.run_id).status == "stopped"
    # no secret in local app dirs
    for d in ("XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        for p in Path(os.environ[d]).rglob("*"):
            if p.is_file():
                assert "sekrit-123" not in p.read_text(errors="replace"), p


@pytest.mark.parametrize(
    "fault,cause",
    [
        ("oom", r"CUDA out of memory"),
        ("nccl", r"NCCL error"),
        ("port", r"port \d+ already in use"),
        ("argparse", r"unknown flag or invalid value"),
        ("exit", r"process exited with rc 3"),
    ],
)
async def test_fault_diagnosis(host, fault, cause):
    port = free_port()
    blocker = None
    if fault == "port":
        blocker = socket.socket()
        blocker.bind(("127.0.0.1", port))
        blocker.listen(1)
    try:
        argv, port = fake("sglang", port, "--load-seconds", "0.5", "--fault", fault)
        rec = await L.launch(host, argv, engine="sglang", port=port)
        final = await wait_ready(host, rec, timeout=30, stall_after=20, poll_gpu=False, probe_health=fault != "port")
    finally:
        if blocker:
            blocker.close()
    assert final.state == "failed", final
    assert re.search(cause, final.diagnosis), final.diagnosis
    assert final.proof
    stored = runstore.RunStore().load(rec.run_id)
    assert stored.status == "failed" and stored.diagnosis == final.diagnosis


async def test_hang_is_stalled(host):
    argv, port = fake("sglang", None, "--load-seconds", "0.3", "--fault", "hang")
    rec = await L.launch(host, argv, engine="sglang", port=port)
    t0 = time.monotonic()
    final = await wait_ready(host, rec, timeout=30, stall_after=2.0, poll_gpu=False)
    # alive and not moving: stalled, never "failed"; the record says the same
    assert final.state == "stalled" and final.diagnosis.startswith("stalled"), final
    assert final.stalled and time.monotonic() - t0 < 15
    assert "8/8" in final.diagnosis or "loading weights" in final.diagnosis
    stored = runstore.RunStore().load(rec.run_id)
    assert stored.status == "stalled" and not stored.ended_ and stored.diagnosis == final.diagnosis
    res = await L.stop_run(host, rec, grace=2)
    assert res.state == "stopped"


async def test_stall_action_stop_stops_the_run(host):
    argv, port = fake("sglang", None, "--load-seconds", "0.3", "--fault", "hang")
    rec = await L.launch(host, argv, engine="sglang", port=port)
    final = await wait_ready(host, rec, timeout=30, stall_after=2.0, stall_action="stop", poll_gpu=False)
    assert final.state == "stopped" and "stalled" in final.diagnosis and "stopped" in final.diagnosis, final
    assert not pid_alive(rec.pid)
    assert runstore.RunStore().load(rec.run_id).status == "stopped"


def test_gpu_memory_description():
    from tunedeck.hostops.startupstate import describe_gpu_memory

    assert describe_gpu_memory([61440.0, 61000.0]) == "GPU 0: 60.0 GiB, GPU 1: 59.6 GiB"
    assert describe_gpu_memory([1024.0] * 8) == "GPU 0-7: 1.0 GiB each"


def test_stall_after_values():
    from tunedeck.hostops.startupstate import parse_stall_after

    assert parse_stall_after("300") == (300.0, "warn")
    assert parse_stall_after("stop") == (300.0, "stop")
    assert parse_stall_after("120:stop") == (120.0, "stop")
    assert parse_stall_after("90s:warn") == (90.0, "warn")
    for bad in ("-1", "0", "soon", "10:kill", "nan"):
        with pytest.raises(ValueError):
            parse_stall_after(bad)


async def test_fatal_line_while_alive_is_not_failed(host):
    """The log says the engine crashed but the process hangs on: starting (with the cause),
    then stalled, never failed; once the process ends it is failed with the root cause."""
    from tunedeck.hostops.runstore import RunRecord

    clock = [1000.0]
    rec = RunRecord("abcdef01", "local", ["x"], engine="sglang", pid=12345, started=1000.0, created=1000.0)
    tr = StartupTracker(host, rec, stall_after=60, probe_health=False, poll_gpu=False, clock=lambda: clock[0])
    tr.set_alive(True)
    tr.feed(
        b"[2025-01-01 00:00:00 TP0] Load weight begin. avail mem=70.00 GB\n"
        b"[2025-01-01 00:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        b'  File "/x.py", line 1, in f\n'
        b"ValueError: Unsupported fp8 type\n"
        b"[2025-01-01 00:00:01] Received sigquit from a child process. It usually means the child failed.\n"
    )
    tr.set_gpu([61000.0, 60500.0])
    snap = tr.snapshot()
    assert snap.state == "starting" and "ValueError: Unsupported fp8 type" in snap.diagnosis
    assert snap.proof == "ValueError: Unsupported fp8 type"
    clock[0] += 61
    snap = tr.snapshot()
    assert snap.state == "stalled" and "GPU 0: 59.6 GiB, GPU 1: 59.1 GiB" in snap.diagnosis
    assert snap.proof == "ValueError: Unsupported fp8 type"
    tr.set_alive(False, 1)
    snap = tr.snapshot()
    assert snap.state == "failed" and snap.diagnosis.startswith("ValueError: Unsupported fp8 type")
    tr.mark_stopping()
    assert tr.snapshot().state == "stopped" and tr.snapshot().diagnosis == "stopped (by you)"


async def test_stop_escalates_to_kill_and_finds_setsid_escapees(host):
    # the server ignores TERM and a helper escapes the process group with setsid()
    script = "; ".join(
        [
            "import os, signal, subprocess, sys, time",
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)",
            "subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); time.sleep(600)'])",
            "print('up', flush=True)",
            "time.sleep(600)",
        ]
    )
    rec = await L.launch(host, [sys.executable, "-c", script])
    for _ in range(50):
        if "up" in Path(rec.run_dir, "log").read_text():
            break
        await asyncio.sleep(0.1)
    t0 = time.monotonic()
    res = await L.stop_run(host, rec, grace=1)
    assert res.state == "stopped" and res.escalated, res
    assert len(res.pids) >= 3  # wrapper, server, escapee
    assert time.monotonic() - t0 < 10
    await asyncio.sleep(0.2)
    assert not any(pid_alive(p) for p in res.pids)


async def test_pid_reuse_guard_kills_nothing(host):
    rec = await L.launch(host, ["sleep", "30"])
    Path(rec.run_dir, "starttime").write_text("1\n")  # as if the pid now belonged to another process
    res = await L.stop_run(host, rec, grace=1)
    assert res.state == "stale" and "nothing was killed" in res.message
    assert pid_alive(rec.pid)
    Path(rec.run_dir, "starttime").write_text(
        Path(f"/proc/{rec.pid}/stat").read_text().rsplit(") ", 1)[1].split()[19] + "\n"
    )
    res = await L.stop_run(host, rec, grace=2)
    assert res.state == "stopped"


async def test_follow_resumes_from_offset_without_gaps(host):
    argv, port = fake("sglang", None, "--numbered", "400", "--load-seconds", "0.2")
    rec = await L.launch(host, argv, engine="sglang", port=port)
    log = f"{rec.run_dir}/log"
    got = b""
    f = logfollow.LogFollower(host, log, 0, run_id=rec.run_id, persist=True)
    async with contextlib.aclosing(f.chunks()) as chunks:
        async for chunk in chunks:
            got += chunk
            if got.count(b"\n") > 50:
                break
    # the follower stopped (as on a lost link or an app restart): resume from the persisted offset
    assert runstore.RunStore().load(rec.run_id).log_offset == f.offset == len(got)
    f2 = logfollow.LogFollower(
        host, log, runstore.RunStore().load(rec.run_id).log_offset, run_id=rec.run_id, persist=True
    )
    async with contextlib.aclosing(f2.chunks()) as chunks:
        async for chunk in chunks:
            got += chunk
            if b"line 400\n" in got:
                break
    nums = [int(m) for m in re.findall(rb"^line (\d+)$", got, re.M)]
    assert nums == list(range(1, 401))
    assert got == Path(log).read_bytes()[: len(got)]


async def test_reattach_finds_runs(host, monkeypatch):
    import threading

    rec = await L.launch(host, ["sleep", "30"], engine="other", profile="x")
    os.unlink(runstore.RunStore().path(rec.run_id))  # the local record is gone (another machine, or lost)
    readers: list[bool] = []
    load = runstore.RunStore.load

    def watched(self: runstore.RunStore, run_id: str) -> runstore.RunRecord | None:
        readers.append(threading.current_thread() is threading.main_thread())
        return load(self, run_id)

    monkeypatch.setattr(runstore.RunStore, "load", watched)
    alive = await hostruns.reattach(host)
    assert readers == [False]  # the records are read off the event loop (a dashboard re-reads every 3 s)
    monkeypatch.setattr(runstore.RunStore, "load", load)
    assert [r.run_id for r in alive] == [rec.run_id]
    again = runstore.RunStore().load(rec.run_id)
    assert again.profile == "x" and again.pid == rec.pid
    await L.stop_run(host, again, grace=2)
    assert await hostruns.reattach(host) == []


async def test_refuses_unknown_gpu_process(host, tmp_path, monkeypatch):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho '4242, GPU-abc, 1234'\n")
    smi.chmod(0o755)
    h = LocalHost(env_overlay={"PATH": f"{smi.parent}:{os.environ['PATH']}"})
    with pytest.raises(L.LaunchRefused, match="4242"):
        await L.launch(h, ["sleep", "1"])
    assert runstore.RunStore().all() == []


def test_format_progress_line():
    from tunedeck.model import StartupProgress

    s = format_progress(
        StartupProgress(
            "r", "sglang", "starting", "weight-loading", phase_n=3, phase_total=8, fraction=0.3, elapsed=65, eta=90
        )
    )
    assert "3/8" in s and "1m05s" in s and "ETA 1m30s" in s


async def test_eta_from_history(host):
    from tunedeck.hostops.startupeta import save_history

    for _ in range(2):
        save_history("local|prof", {"process-start": 1, "weight-loading": 10, "kv-cache": 1, "graph-capture": 4})
    rec = runstore.RunRecord("abcdef01", "local", ["x"], engine="sglang", profile="prof", started=time.time())
    now = [time.time()]
    tr = StartupTracker(host, rec, clock=lambda: now[0])
    tr.feed(b"[2026-01-01 00:00:00] Load weight begin. avail mem=1.00 GB\n")
    snap = tr.snapshot()
    assert snap.eta_source == "history" and 14 <= snap.eta <= 16
    now[0] += 5
    tr.feed(b"Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]\n")
    now[0] += 2
    tr.feed(b"Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:00<?, ?it/s]\n")
    snap = tr.snapshot()
    assert snap.phase_n == 2 and snap.phase_total == 4
    # rate: 2 shards in 2 s -> 2 s left, then 1 + 4 s of later phases
    assert 6 <= snap.eta <= 8, snap
    assert 0.05 < snap.fraction < 0.9


async def test_restart_is_stop_then_launch(host):
    argv, port = fake("sglang", None, "--load-seconds", "0.5")
    rec = await L.launch(host, argv, {"FOO": "1"}, engine="sglang", port=port, profile="rs")
    first = await wait_ready(host, rec, timeout=30, poll_gpu=False)
    assert first.state == "ready"
    new = await L.restart_run(host, rec, grace=5)
    assert new.run_id != rec.run_id and new.argv == rec.argv and new.env == {"FOO": "1"}
    assert runstore.RunStore().load(rec.run_id).status == "stopped"
    assert not pid_alive(rec.pid)
    second = await wait_ready(host, new, timeout=30, poll_gpu=False)
    assert second.state == "ready"
    # a run whose stored env holds a redacted secret cannot be restarted from the record
    await L.stop_run(host, new, grace=5)
    secret = await L.launch(host, ["sleep", "30"], {"HF_TOKEN": "x"})
    with pytest.raises(L.LaunchRefused, match="redacted"):
        await L.restart_run(host, secret, grace=2)
    assert pid_alive(secret.pid)  # refused before anything was stopped
    await L.stop_run(host, secret, grace=2)
