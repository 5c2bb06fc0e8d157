"""Following a detached campaign (an A/B or a tuning campaign) from the command line: its events
printed as they come, a lost link and its return told once each, and Ctrl-C (or SIGTERM, SIGHUP)
detaching from it while it goes on on the host."""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


async def follow_events(run: Any, *, cmd: str, noun: str, label: str, quiet: bool) -> bool:
    """Print ``run``'s events (an ``ABRun`` or ``TuneRun``: ``events()``, ``on_link_error``,
    ``on_link_ok``, ``id``) until it ends; False when a signal detached from it. ``cmd`` is the
    subcommand (``ab``, ``tune``), ``noun`` what it runs (``A/B``, ``campaign``)."""
    from tunedeck.commands.ab import _progress_printer

    printer = _progress_printer(quiet)
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None

    def on_link(e: Exception, attempt: int) -> None:
        if not quiet:
            print(
                f"tunedeck {cmd}: link to {label} lost ({e}); the {noun} goes on there, reconnecting (attempt {attempt})",
                file=sys.stderr,
                flush=True,
            )

    def on_link_ok() -> None:
        if not quiet:
            print(f"tunedeck {cmd}: link to {label} is back; following the {noun} again", file=sys.stderr, flush=True)

    run.on_link_error = on_link
    run.on_link_ok = on_link_ok
    for sig in _SIGNALS:
        loop.add_signal_handler(sig, task.cancel)
    try:
        async for ev in run.events():
            printer(ev)
    except asyncio.CancelledError:
        print(
            f"tunedeck {cmd}: detached; {noun} {run.id} goes on on {label}; "
            f"`tunedeck {cmd} --attach {run.id}` follows it again",
            file=sys.stderr,
        )
        return False
    finally:
        for sig in _SIGNALS:
            loop.remove_signal_handler(sig)
    return True
