"""cancel_and_wait: a close never hangs on a task that shrugs off its cancel, and never eats the caller's."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path

import pytest

from tunedeck.util.aio import cancel_and_wait, terminate_group

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
