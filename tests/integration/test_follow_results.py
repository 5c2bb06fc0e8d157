"""A result is never reported lost while it exists: host-side benchmarks against the simulator
whose follow misses its events, whose job is killed, or whose link fails with exceptions of
any kind. The outcome is what the job folder holds (its rc, summaries and samples), and the exit
status says which (docs/exit-codes.md)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, AsyncIterator, Mapping, Sequence

import asyncssh
import pytest

from tests.clifix import run_cli
from tests.conftest import REPO, tunedeck_cmd
from tests.simfix import free_port, vllm_sim
from tunedeck.bench import store
from tunedeck.bench.config import BenchConfig
from tunedeck.commands._benchjob import EXIT_OK, EXIT_PARTIAL
from tunedeck.hostops.hosts import ByteStream, Command, RunResult
from tunedeck.hostops.localhost import LocalHost
from tunedeck.services import jobs
from tunedeck.services.benchrun import COMPLETE, HOST, BenchRun
from tunedeck.sim.demo import demo_env, demo_host


def _job_id(stderr: str) -> str:
    m = re.search(r"job (\w+) runs on", stderr)
    assert m, stderr
    return m.group(1)


def _ok_lines(path: Path) -> int:
    n = 0
    for line in path.read_text().splitlines():
        s = json.loads(line)
        n += bool(s.get("success"))
    return n


@pytest.mark.timeout(300)
def test_missed_events_report_the_results_from_the_job_folder(tmp_path: Path) -> None:
    port = free_port()
    args = ["--concurrency", "2", "--num-prompts", "20", "--output-len", "20", "--input-len", "8"]
    with vllm_sim(port):
        r = run_cli("bench", "--demo", "--port", str(port), *args, "--json", str(tmp_path / "first.json"))
    assert r.returncode == EXIT_OK, r.stderr[-2000:]
    first = json.loads((tmp_path / "first.json").read_text())
    jid = _job_id(r.stderr)
    job = asyncio.run(jobs.find(demo_host(), "bench", jid))
    # the follow missed every event after the first (its level_done and exit), and the laptop's
    # mirror is gone: only the job folder on the host has the result
    events = Path(job.dir) / "events.jsonl"
    events.write_bytes(events.read_bytes().splitlines(keepends=True)[0])
    shutil.rmtree(store.results_dir() / first["run_id"])
    r2 = run_cli("bench", "--demo", "--attach", jid, "--json", str(tmp_path / "second.json"))
    assert r2.returncode == EXIT_OK, r2.stderr[-2000:]
    second = json.loads((tmp_path / "second.json").read_text())
    assert second["run_id"] == first["run_id"]
    assert second["completed"] == first["completed"] == 20 and not second["partial"]
    assert f"run {first['run_id']}" in r2.stdout and "Successful requests:" in r2.stdout  # the result block
    assert "link to the host lost" not in r2.stderr


@pytest.mark.timeout(300)
def test_a_killed_job_reports_its_partial_results_and_exit_5(tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "out.json"
    with vllm_sim(port):
        p = subprocess.Popen(
            [*tunedeck_cmd(), "bench", "--demo", "--port", str(port), "--concurrency", "2", "--num-prompts", "2000"]
            + ["--output-len", "30", "--input-len", "8", "--json", str(out)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert p.stderr is not None
        jid = _job_id(p.stderr.readline())
        job = asyncio.run(jobs.find(demo_host(), "bench", jid))
        results = Path(job.dir) / "data" / "results"
        end = time.monotonic() + 120
        samples: list[Path] = []
        while time.monotonic() < end:
            samples = list(results.glob("*/samples.jsonl"))
            if samples and _ok_lines(samples[0]) >= 10:
                break
            time.sleep(0.2)
        assert samples, "no sample written within 120 s"
        assert job.pid is not None
        kids = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True).stdout.split()
        assert kids, "the job's process is not running"
        for k in kids:  # the benchmark itself, under its wrapper: no exit event, no final summary
            os.kill(int(k), signal.SIGKILL)
        _, err = p.communicate(timeout=200)
    assert p.returncode == EXIT_PARTIAL, err[-2000:]
    got = json.loads(out.read_text())
    assert got != [] and got["partial"]
    host_ok = _ok_lines(samples[0])
    assert 10 <= got["completed"] == host_ok < 2000
    local = store.results_dir() / got["run_id"] / "samples.jsonl"
    assert local.read_bytes() == samples[0].read_bytes()  # every sample copied
    assert "partial" in err


class _CutStream(ByteStream):
    """A real stream that fails with asyncssh's ``ConnectionLost`` after ``after`` chunks."""

    def __init__(self, inner: ByteStream, after: int) -> None:
        self.inner = inner
        self.after = after

    @property  # type: ignore[override]
    def last_heard(self) -> float:
        return self.inner.last_heard

    async def _chunks(self) -> AsyncIterator[bytes]:
        n = 0
        async for chunk in self.inner:
            yield chunk
            n += 1
            if n >= self.after:
                raise asyncssh.ConnectionLost("Connection lost")

    async def aclose(self) -> None:
        await self.inner.aclose()


class _FlakyHost(LocalHost):
    """The demo host, whose link fails with exceptions the follower has no list of: every tenth
    command raises ``asyncssh.ConnectionLost`` or ``RuntimeError``, every stream is cut."""

    def __init__(self) -> None:
        super().__init__("demo", env_overlay=demo_env())
        self.calls = 0
        self.raised = 0

    async def _run(self, cmd: Command) -> RunResult:
        self.calls += 1
        if self.calls % 10 == 0:
            self.raised += 1
            if self.calls % 20:
                raise asyncssh.ConnectionLost("Connection lost")
            raise RuntimeError("the link broke in a way nobody listed")
        return await super()._run(cmd)

    def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, heartbeat: float | None = None
    ) -> ByteStream:
        self.raised += 1
        return _CutStream(super().stream(argv, env=env, heartbeat=heartbeat), after=3)


@pytest.mark.timeout(300)
async def test_any_exception_of_the_link_is_a_reconnect_and_the_results_are_all_reported() -> None:
    port = free_port()
    with vllm_sim(port):
        cfg = BenchConfig(
            url=f"http://127.0.0.1:{port}",
            concurrency=[2, 4],
            num_prompts=40,
            input_len=8,
            output_len=20,
            warmup=0,
        )
        started = await BenchRun.start(demo_host(), cfg)
        assert started.job is not None
        flaky = _FlakyHost()
        run = BenchRun(flaky, HOST, started.job)
        errors: list[Any] = []
        run.on_link_error = lambda e, n: errors.append(type(e).__name__)
        seen = [ev.get("type") async for ev in run.events()]
    assert run.outcome == COMPLETE, (run.exit, errors)
    assert run.exit is not None and run.exit.get("rc") == 0
    assert [s["completed"] for s in run.summaries] == [40, 40]
    assert not any(s["partial"] for s in run.summaries)
    assert seen.count("level_done") == 2 and seen.count("start") == 1  # nothing lost, nothing twice
    assert "ConnectionLost" in errors and flaky.raised > 0


class _GoneAfterTheEnd(LocalHost):
    """This machine, whose link dies for good the moment the job is seen to have ended."""

    def __init__(self) -> None:
        super().__init__("local")
        self.broken = False

    async def _run(self, cmd: Command) -> RunResult:
        if self.broken:
            raise asyncssh.ConnectionLost("Connection lost")
        r = await super()._run(cmd)
        if r.stdout.strip() == "DEAD":
            self.broken = True
        return r


def _ended_job(kind: str, job_dir: Path, events: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> jobs.Job:
    """A job of ``kind`` whose process has ended (its pid is free) with ``events`` in its folder,
    and whose final read gives up after 2 s."""
    monkeypatch.setattr(jobs, "FINAL_READ_S", 2.0)
    job_dir.mkdir()
    (job_dir / "events.jsonl").write_text("".join(json.dumps(ev) + "\n" for ev in events))
    gone = subprocess.Popen(["true"])
    gone.wait()
    return jobs.Job(kind, "gone", str(job_dir), "local", gone.pid, "1")


@pytest.mark.timeout(120)
async def test_an_outcome_that_cannot_be_read_is_lost_exit_6_never_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunedeck.commands._benchjob import EXIT_LOST, exit_code
    from tunedeck.services.benchrun import LOST

    events = [{"type": "start"}, {"type": "level_start", "level": 0, "run_id": "r0"}]
    run = BenchRun(_GoneAfterTheEnd(), HOST, _ended_job("bench", tmp_path / "job", events, monkeypatch))
    seen = [ev["type"] async for ev in run.events()]
    assert seen == ["start", "level_start"]
    assert run.lost and run.outcome == LOST and run.summaries == []
    assert exit_code(run) == EXIT_LOST


@pytest.mark.timeout(120)
async def test_an_ab_whose_outcome_cannot_be_read_is_lost_exit_6(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunedeck.commands.ab import EXIT_LOST, exit_code
    from tunedeck.services.abrun import ABRun

    ev = {"type": "ab", "kind": "start", "message": "A/B ab-1: A=a vs B=b", "step": 0, "steps": 6}
    ab = ABRun(_GoneAfterTheEnd(), _ended_job("ab", tmp_path / "job", [ev], monkeypatch))

    seen = [e.kind async for e in ab.events()]
    assert seen == ["start"]
    assert ab.lost and ab.report is None
    assert exit_code(ab) == EXIT_LOST
