"""``follow_forever`` tells ``on_resume`` once the host answers again after a lost link, also while
the followed file stays quiet, and never without a loss (tests.ui_fakes.LinkHost: in process)."""

from __future__ import annotations

import asyncio

import pytest

from tests.ui_fakes import LinkHost
from tests.waits import until_async
from tunedeck.hostops import liveness
from tunedeck.hostops.logfollow import follow_forever

pytestmark = pytest.mark.timeout(60)


def test_link_watch_counts_a_loss_from_its_first_failure() -> None:
    now = [100.0]
    w = liveness.LinkWatch(clock=lambda: now[0])
    assert not w.is_lost and w.ok() is None and w.lost_for() == 0.0
    assert w.lost("no heartbeat") is True
    now[0] = 104.0
    assert w.lost("refused") is False and w.attempts == 2 and w.reason == "refused"
    assert w.is_lost and w.lost_for() == 4.0
    now[0] = 110.0
    assert w.ok() == 10.0 and not w.is_lost and w.attempts == 0


def test_link_watch_tells_a_view_only_when_a_loss_starts_or_ends() -> None:
    w = liveness.LinkWatch()
    assert w.tell(None) is False  # up, and still up: nothing new to show
    assert w.tell("no heartbeat") is True and w.is_lost
    assert w.tell("refused") is False and w.attempts == 2  # still lost: the line is up already
    assert w.tell(None) is True and not w.is_lost


async def test_resume_is_told_once_per_loss_on_a_quiet_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(liveness.ENV, "0.2")
    host = LinkHost({"/l": b"one\n"})
    got: list[bytes] = []
    told: list[str] = []
    stop = asyncio.Event()
    task = asyncio.ensure_future(
        follow_forever(
            host,
            "/l",
            0,
            got.append,
            stop,
            on_error=lambda e, n: told.append("error"),
            on_resume=lambda: told.append("resume"),
        )
    )
    try:
        await until_async(lambda: got == [b"one\n"], 10)
        end = asyncio.get_running_loop().time() + 1.5  # 7 beats quiet over a live link: nothing to tell
        await until_async(lambda: told or asyncio.get_running_loop().time() >= end, 30)
        assert told == []
        host.cut()
        await until_async(lambda: "error" in told, 10)
        host.restore()
        await until_async(lambda: "resume" in told, 15)
        assert told.count("resume") == 1 and told[-1] == "resume"
        host.append("/l", b"two\n")
        await until_async(lambda: b"".join(got) == b"one\ntwo\n", 10)  # resumed at the offset
        assert told.count("resume") == 1
    finally:
        stop.set()
        await task
