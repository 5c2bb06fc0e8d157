"""The task an A/B or a tuning campaign runs in: the user's cancel reaches it from anywhere, and the
campaign takes its own cancellation back so that its caller still gets the report."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable


class CampaignTask:
    """Where a campaign runs (:meth:`run`) and what :meth:`cancel` stops."""

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        #: :meth:`cancel` was called (a campaign that has not started yet stops at once)
        self.requested = False

    def cancel(self) -> None:
        """Stop the campaign as soon as possible: its task is cancelled where it runs."""
        self.requested = True
        if self.task is not None and not self.task.done():
            self.task.cancel()

    async def run(self, body: Callable[[], Awaitable[None]]) -> None:
        """Await ``body`` in the current task, the one :meth:`cancel` cancels; raises
        :class:`asyncio.CancelledError` at once where the cancel came first."""
        self.task = asyncio.current_task()
        if self.requested:
            raise asyncio.CancelledError
        await body()

    def take_back(self) -> None:
        """Take back the cancellation :meth:`cancel` sent, so that the task's caller gets the report
        instead of a :class:`asyncio.CancelledError` (Python 3.11 and later count cancellations;
        before, the caught cancellation left nothing to take back)."""
        if self.task is not None and hasattr(self.task, "uncancel"):
            self.task.uncancel()


def failure_text(e: BaseException) -> str:
    """An unexpected failure as a campaign's report says it: host errors already read as a sentence
    ("gpu-box: unreachable: ..."); others get their type."""
    return str(e) if type(e).__name__ == "HostError" else f"{type(e).__name__}: {e}"
