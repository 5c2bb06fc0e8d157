"""asyncio helpers shared by the CLI and the benchmark client."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T], *, fast: bool = True) -> T:
    """Run a coroutine on a fresh event loop, on uvloop when available and ``fast``."""
    if fast:
        try:
            import uvloop  # type: ignore[import-not-found]
        except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
            pass
        else:
            return uvloop.run(coro)
    return asyncio.run(coro)


async def terminate_group(
    proc: "asyncio.subprocess.Process", *, first: int | None = None, grace: float = 5.0
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
