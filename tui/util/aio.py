"""asyncio helpers shared by the CLI and the benchmark client."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Coroutine, Iterable, Optional, TypeVar, cast

T = TypeVar("T")

log = logging.getLogger(__name__)

#: seconds a cancelled task gets to end before it is cancelled again
CANCEL_GRACE = 2.0


async def within(aw: "Awaitable[T]", timeout: Optional[float]) -> T:
    """``await aw`` for up to ``timeout`` seconds (None: no limit), as ``asyncio.wait_for`` does,
    raising ``asyncio.TimeoutError`` after cancelling it; but the caller's own cancel always
    propagates.

    On Python < 3.12, ``asyncio.wait_for`` returns the awaited result instead of raising when
    that result and the caller's cancel arrive in the same turn of the loop, and the caller goes
    on as if never cancelled: a loop that waits on a queue or a read this way can outlive its
    cancel (a Ctrl-C that did not stop ``tunedeck logs --follow``). A wait in a loop that would
    run on after a swallowed cancel goes through here. A result that came with the cancel is
    dropped with it: an item a queue handed over then is lost, so a queue read this way belongs
    to the loop that is cancelled. What ends as it is cancelled on the timeout (a result or an
    error instead of the cancel) is returned or raised, as ``wait_for`` does."""
    if timeout is None:
        return await aw  # a plain await never swallows a cancel
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task})  # it ends with its cancel; a second cancel of ours propagates from here
        if not task.cancelled() and task.exception() is not None:
            log.warning("a wait ended with %r as it was cancelled", task.exception(), exc_info=task.exception())
        raise
    if task not in done:
        task.cancel()
        await asyncio.wait({task})
        if task.cancelled():
            raise asyncio.TimeoutError
    return task.result()


async def wait_while(cond: Callable[[], bool], changed: asyncio.Event, timeout: float) -> bool:
    """Wait while ``cond()`` holds, looking again each time ``changed`` is set, for up to
    ``timeout`` seconds; returns whether it still holds (the deadline came first)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while cond():
        left = deadline - loop.time()
        if left <= 0:
            return True
        changed.clear()
        try:
            await within(changed.wait(), left)
        except asyncio.TimeoutError:
            return cond()
    return False


def run_async(coro: Coroutine[Any, Any, T], *, fast: bool = True) -> T:
    """Run a coroutine on a fresh event loop, on uvloop when available and ``fast``."""
    if fast:
        try:
            import uvloop
        except ImportError:  # the one optional module: a host interpreter may not have it
            pass
        else:
            run = getattr(uvloop, "run", None)  # uvloop >= 0.18
            if run is not None:
                return cast(T, run(coro))
            loop = uvloop.new_event_loop()
            try:
                asyncio.set_event_loop(loop)
                return loop.run_until_complete(coro)
            finally:
                asyncio.set_event_loop(None)
                loop.close()
    return asyncio.run(coro)


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads; one already gone is no error."""
    import os
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def terminate_group(
    proc: "asyncio.subprocess.Process", *, first: Optional[int] = None, grace: float = 5.0
) -> None:
    """End a child started with ``start_new_session=True`` and its whole process group.

    Sends ``first`` (default SIGTERM) to the group, waits up to ``grace`` seconds,
    then SIGKILL, and always reaps the child (no transport outlives the loop).
    Cancelled during the grace, it sends SIGKILL at once and lets the cancel through:
    a closer that cannot wait any longer never leaves the group running.
    """
    import os
    import signal

    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM if first is None else first)
    except ProcessLookupError:
        await proc.wait()
        return
    try:
        await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
    except asyncio.TimeoutError:
        kill_group(proc.pid)
        await proc.wait()
    except asyncio.CancelledError:
        kill_group(proc.pid)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), 1.0)
        except asyncio.TimeoutError:
            log.warning("process group %s: not reaped 1 s after SIGKILL", proc.pid)
        raise


async def cancel_and_wait(tasks: "Iterable[asyncio.Future[Any]]", what: str, *, grace: float = CANCEL_GRACE) -> None:
    """Cancel ``tasks`` and wait until every one of them has ended.

    A task can shrug off a cancel: on Python < 3.12, ``asyncio.wait_for``
    returns the awaited result instead of raising when that result arrives
    together with the cancel, and the task goes on. Each task still running
    ``grace`` seconds after its cancel is logged and cancelled again, so a
    close never hangs on it. The caller's own cancellation is never swallowed
    (it cancels what is left once more and propagates). An exception a task
    ended with, other than its cancel, is logged, never raised.
    """
    tasks = list(tasks)
    pending = {t for t in tasks if not t.done()}
    try:
        while pending:
            for t in pending:
                t.cancel()
            _, pending = await asyncio.wait(pending, timeout=grace)
            for t in pending:
                log.warning("%s: %r still running %g s after its cancel; cancelling it again", what, t, grace)
    except asyncio.CancelledError:
        for t in pending:
            t.cancel()
        raise
    for t in tasks:
        if not t.cancelled() and t.exception() is not None:
            log.warning("%s: a task ended with %r", what, t.exception(), exc_info=t.exception())
