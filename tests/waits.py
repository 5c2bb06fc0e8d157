"""The one way tests wait for a condition.

Every wait polls a predicate until a deadline; no test sleeps a fixed time and hopes. Deadlines
are generous bounds, not expectations, and all of them scale with ``TUNEDECK_TEST_TIMEOUT_SCALE``
(default 1; e.g. 3 on a slow or heavily loaded machine)::

    TUNEDECK_TEST_TIMEOUT_SCALE=3 ./scripts/test

``until`` blocks (threads, processes, files); ``until_async`` awaits (a Textual ``Pilot``'s
``pause`` when one is given, so the app keeps processing messages, else ``asyncio.sleep``).
Both raise ``AssertionError`` naming what was awaited and for how long; ``poll`` returns the
predicate's last value instead, for tests that assert something more specific themselves.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Callable, Optional

ENV = "TUNEDECK_TEST_TIMEOUT_SCALE"


def scale() -> float:
    raw = os.environ.get(ENV, "1")
    try:
        s = float(raw)
    except ValueError:
        raise ValueError(f"{ENV}={raw!r}: expected a number such as 2 or 0.5") from None
    if not s > 0:
        raise ValueError(f"{ENV}={raw!r}: expected a number > 0")
    return s


def scaled(seconds: float) -> float:
    """A deadline of ``seconds`` on an idle machine, scaled for this one."""
    return seconds * scale()


def poll(pred: Callable[[], Any], timeout: float, *, step: float = 0.05) -> Any:
    """Call ``pred`` until it is truthy or the scaled ``timeout`` has passed; its last value."""
    end = time.monotonic() + scaled(timeout)
    while True:
        v = pred()
        if v or time.monotonic() >= end:
            return v
        time.sleep(step)


def until(pred: Callable[[], Any], timeout: float = 10.0, *, step: float = 0.05, what: str = "") -> Any:
    """Block until ``pred()`` is truthy (returned); AssertionError after the scaled ``timeout``."""
    v = poll(pred, timeout, step=step)
    if not v:
        raise AssertionError(f"{what or 'condition'} not met in {scaled(timeout):.1f}s")
    return v


async def until_async(
    pred: Callable[[], Any],
    timeout: float = 10.0,
    *,
    pilot: Optional[Any] = None,
    step: float = 0.05,
    what: str | Callable[[], str] = "",
) -> Any:
    """Await until ``pred()`` is truthy; AssertionError after the scaled ``timeout``.

    ``what`` may be a callable, evaluated only on failure (e.g. the screen's text).
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + scaled(timeout)
    while True:
        v = pred()
        if v:
            return v
        if loop.time() >= end:
            detail = what() if callable(what) else what
            raise AssertionError(f"condition not met in {scaled(timeout):.1f}s{': ' + detail if detail else ''}")
        if pilot is not None:
            await pilot.pause(step)
        else:
            await asyncio.sleep(step)
