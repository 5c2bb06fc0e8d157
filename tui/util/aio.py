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
