"""``tunedeck logs --follow RUN`` says when a lost link is back, as a deployment's ``logs --follow``
does: one line at the loss (not one per failed attempt), one when the host answers again, and the
log goes on from the exact byte (tests.ui_fakes.LinkHost: a silent drop, in process)."""

from __future__ import annotations

import argparse
import asyncio
import io

import pytest

from tests.ui_fakes import LinkHost
from tests.waits import until_async
from tunedeck.commands import logs
from tunedeck.hostops import liveness
from tunedeck.hostops.runstore import RunRecord, RunStore

pytestmark = pytest.mark.timeout(60)


async def test_a_single_run_follow_says_when_the_link_is_lost_and_when_it_is_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(liveness.ENV, "0.2")  # bound 0.6 s
    host = LinkHost({"/runs/r1/log": b"one\n"})
    rec = RunRecord(run_id="r1", target=host.target, argv=["serve"], run_dir="/runs/r1")
    args = argparse.Namespace(raw=False, json=False, resume=False)
    out = io.BytesIO()
    err: list[str] = []

    def stderr() -> str:
        err.append(capsys.readouterr().err)
        return "".join(err)

    task = asyncio.ensure_future(logs._follow(host, RunStore(), rec, "/runs/r1/log", 0, args, out))
    try:
        await until_async(lambda: out.getvalue() == b"one\n", 10)
        host.cut()
        await until_async(lambda: "run r1: log link lost (" in stderr(), 10, what=stderr)
        assert "no heartbeat" in stderr()
        await asyncio.sleep(2.0)  # failed attempts while down: the loss is told once
        host.restore()
        await until_async(lambda: "run r1: log link back; following again" in stderr(), 20, what=stderr)
        host.append("/runs/r1/log", b"two\n")
        await until_async(lambda: out.getvalue() == b"one\ntwo\n", 10, what=lambda: repr(out.getvalue()))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    lines = stderr().splitlines()
    assert [x for x in lines if "link lost" in x][1:] == [], lines
    assert len([x for x in lines if "link back" in x]) == 1, lines
    assert lines.index(next(x for x in lines if "link lost" in x)) < lines.index(
        next(x for x in lines if "link back" in x)
    )
