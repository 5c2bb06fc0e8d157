"""An idle stream is not a lost link: a followed file that is quiet for longer than any timer of
the follower gets no link message, and a benchmark job with a long gap between its events reports
no lost link either.

The gap is ``TUNEDECK_TEST_IDLE_GAP_S`` seconds (default 8; the operator's case was 30): longer
than the follower's idle tick (1 s) and than the liveness bound the tests set
(``TUNEDECK_HEARTBEAT_S`` small), so a follower that took silence for a dead link would say so.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tunedeck.hostops import liveness
from tunedeck.hostops.localhost import LocalHost
from tunedeck.hostops.logfollow import follow_forever

GAP_S = float(os.environ.get("TUNEDECK_TEST_IDLE_GAP_S", "8"))


@pytest.mark.timeout(90)
async def test_a_quiet_file_is_followed_without_a_link_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(liveness.ENV, "1")  # dead after 3 s of silence: the gap is longer
    assert liveness.dead_after() < GAP_S
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"first\n")
    got = bytearray()
    errors: list[str] = []
    idles = 0
    stop = asyncio.Event()

    def on_chunk(b: bytes) -> None:
        got.extend(b)
        if got.endswith(b"second\n"):
            stop.set()

    def on_idle() -> None:
        nonlocal idles
        idles += 1

    async def writer() -> None:
        await asyncio.sleep(GAP_S)
        with open(path, "ab") as f:
            f.write(b"second\n")

    w = asyncio.create_task(writer())
    offset = await asyncio.wait_for(
        follow_forever(
            LocalHost(), str(path), 0, on_chunk, stop, on_idle=on_idle, on_error=lambda e, n: errors.append(str(e))
        ),
        GAP_S + 60,
    )
    await w
    assert errors == []
    assert bytes(got) == b"first\nsecond\n"
    assert offset == len(b"first\nsecond\n")
    assert idles >= GAP_S / 2  # the follower did sit idle through the gap


@pytest.mark.timeout(120)
async def test_a_job_quiet_between_its_events_gets_no_link_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job follower of a bench or A/B job (its process alive all along) over the same gap."""
    import subprocess

    from tunedeck.services.jobs import Job, JobFollower

    monkeypatch.setenv(liveness.ENV, "1")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    events = job_dir / "events.jsonl"
    events.write_text('{"type": "start"}\n')
    proc = subprocess.Popen(["sleep", str(GAP_S + 60)])  # the job's process: alive through the gap
    try:
        st = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        job = Job("bench", "quiet", str(job_dir), "local", proc.pid, st)
        f = JobFollower(LocalHost(), job, alive_every=1.0)
        errors: list[str] = []
        f.on_link_error = lambda e, n: errors.append(str(e))

        async def writer() -> None:
            await asyncio.sleep(GAP_S)
            with open(events, "a") as fh:
                fh.write('{"type": "level_done", "summary": {}}\n{"type": "exit", "rc": 0, "error": null}\n')

        w = asyncio.create_task(writer())
        got = [ev["type"] async for ev in f.events()]
        await w
    finally:
        proc.kill()
        proc.wait()
    assert errors == []
    assert got == ["start", "level_done"]
    assert f.exit == {"type": "exit", "rc": 0, "error": None} and not f.lost
