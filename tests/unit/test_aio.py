"""cancel_and_wait: a close never hangs on a task that shrugs off its cancel, and never eats the caller's."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from typing import AsyncGenerator

import pytest

from tunedeck.hostops.hosts import STREAM_READ_BYTES
from tunedeck.hostops.localhost import LocalHost
from tunedeck.util.aio import cancel_and_wait, terminate_group, within

pytestmark = pytest.mark.timeout(30)


async def test_a_task_whose_wait_for_swallowed_the_cancel_is_cancelled_again(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    result: asyncio.Future[int] = loop.create_future()
    polls = 0

    async def poll_loop() -> None:
        nonlocal polls
        await asyncio.wait_for(result, 5)  # the real stdlib call, raced below
        while True:  # a poll loop that goes on after a swallowed cancel
            polls += 1
            await asyncio.sleep(3600)

    task = asyncio.ensure_future(poll_loop())
    await asyncio.sleep(0.05)
    result.set_result(1)  # the awaited result lands together with the cancel
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="tunedeck.util.aio"):
        await asyncio.wait_for(cancel_and_wait([task], "poll", grace=0.3), 10)
    assert task.cancelled()
    assert time.monotonic() - t0 < 8
    if sys.version_info < (3, 12):  # the swallow happens there: the loop ran on, then was cancelled again
        assert polls == 1
        assert "poll:" in caplog.text and "cancelling it again" in caplog.text


async def test_the_callers_own_cancel_is_not_swallowed() -> None:
    async def slow_to_end() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.shield(asyncio.sleep(1.0))  # a cleanup that takes a while

    task = asyncio.ensure_future(slow_to_end())
    await asyncio.sleep(0.05)
    closer = asyncio.ensure_future(cancel_and_wait([task], "slow", grace=5))
    await asyncio.sleep(0.1)
    closer.cancel()  # the caller itself is cancelled while it waits
    with pytest.raises(asyncio.CancelledError):
        await closer
    await asyncio.wait({task}, timeout=5)
    assert task.done()


async def test_an_error_a_task_ends_with_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise ValueError("cleanup failed: /tmp/x") from None

    done_early = asyncio.ensure_future(asyncio.sleep(0))
    task = asyncio.ensure_future(fails_on_cancel())
    await asyncio.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="tunedeck.util.aio"):
        await cancel_and_wait([task, done_early], "reader")
    assert "reader: a task ended with ValueError('cleanup failed: /tmp/x')" in caplog.text
    await cancel_and_wait([], "nothing")  # nothing to wait for is fine


async def test_terminate_group_cancelled_in_its_grace_kills_the_group() -> None:
    # a group that ignores TERM, and a closer cancelled (again) before the grace ran out
    proc = await asyncio.create_subprocess_exec("sh", "-c", 'trap "" TERM; sleep 300 & wait', start_new_session=True)
    try:
        await asyncio.sleep(0.3)
        closer = asyncio.ensure_future(terminate_group(proc, grace=60))
        await asyncio.sleep(0.5)
        assert proc.returncode is None  # TERM was ignored
        closer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closer
        await asyncio.wait_for(proc.wait(), 5)
        assert proc.returncode == -9
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _group_alive(proc.pid):
            await asyncio.sleep(0.05)
        assert not _group_alive(proc.pid)  # the sleep went with it
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def _group_alive(pgid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                return True
    return False


async def test_wait_while_looks_again_when_told_and_says_whether_the_deadline_came_first():
    import asyncio

    from tunedeck.util.aio import wait_while

    changed, state = asyncio.Event(), {"busy": True}

    async def settle() -> None:
        await asyncio.sleep(0.05)
        state["busy"] = False
        changed.set()

    task = asyncio.ensure_future(settle())
    assert await wait_while(lambda: state["busy"], changed, 30) is False  # it ended when told, not at 30 s
    await task
    assert await wait_while(lambda: True, asyncio.Event(), 0.05) is True  # still holds at the deadline


async def test_within_lets_a_cancel_through_when_the_result_comes_with_it() -> None:
    """The race ``asyncio.wait_for`` loses on Python < 3.12: the awaited result and the caller's
    cancel land in the same turn of the loop. ``within`` raises the cancel."""
    loop = asyncio.get_running_loop()
    for make in ("future", "queue"):
        q: asyncio.Queue[int] = asyncio.Queue()
        fut: asyncio.Future[int] = loop.create_future()
        task = asyncio.ensure_future(within(fut if make == "future" else q.get(), 10))
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the inner wait is parked
        if make == "future":
            fut.set_result(1)
        else:
            q.put_nowait(1)
            await asyncio.sleep(0)  # the getter has its item: only the caller's turn is left
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled(), make


async def test_within_returns_the_result_or_times_out_cancelling_what_it_waited_on() -> None:
    q: asyncio.Queue[int] = asyncio.Queue()
    q.put_nowait(7)
    assert await within(q.get(), 5) == 7
    waited = asyncio.ensure_future(asyncio.sleep(3600))
    t0 = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        await within(waited, 0.05)
    assert waited.cancelled() and time.monotonic() - t0 < 5
    assert await within(asyncio.sleep(0, "x"), None) == "x"  # no limit

    async def ends_anyway(outcome: str) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if outcome == "error":
                raise OSError("closing failed") from None
        return "kept"

    # what ends as the timeout cancels it is returned or raised, as wait_for does
    assert await within(ends_anyway("result"), 0.05) == "kept"
    with pytest.raises(OSError, match="closing failed"):
        await within(ends_anyway("error"), 0.05)


async def test_a_log_follow_ends_on_every_cancel_while_chunks_stream_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """``follow_forever`` (the loop of ``tunedeck logs --follow``), cancelled as Ctrl-C cancels it,
    at many points while a chunk is always ready: it must end every time (a cancel that came with
    a chunk was swallowed, and the follow ran on until a second Ctrl-C)."""
    from tunedeck.hostops import logfollow

    async def endless(self: logfollow.LogFollower) -> AsyncGenerator[bytes, None]:
        chunk = b"x" * STREAM_READ_BYTES  # a full read: the pump hands it over without a pause
        while True:
            self.offset += len(chunk)
            yield chunk
            await asyncio.sleep(0)

    monkeypatch.setattr(logfollow.LogFollower, "chunks", endless)
    got: list[int] = []
    for turns in range(60):
        got.clear()
        task = asyncio.ensure_future(
            logfollow.follow_forever(LocalHost(), "/nowhere/log", 0, lambda c: got.append(len(c)), asyncio.Event())
        )
        for _ in range(5 + turns):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5)
        assert done, f"the follow ran on after its cancel (cancelled after {5 + turns} turns, {len(got)} chunks)"
        assert task.cancelled()
