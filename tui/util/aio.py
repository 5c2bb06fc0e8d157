"""asyncio helpers shared by the CLI and the benchmark client."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, Optional, TypeVar, cast

T = TypeVar("T")


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


async def terminate_group(
    proc: "asyncio.subprocess.Process", *, first: Optional[int] = None, grace: float = 5.0
) -> None:
    """End a child started with ``start_new_session=True`` and its whole process group.

    Sends ``first`` (default SIGTERM) to the group, waits up to ``grace`` seconds,
    then SIGKILL, and always reaps the child (no transport outlives the loop).
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
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await proc.wait()
