"""Following a detached campaign (an A/B or a tuning campaign) from the command line: its events
printed as they come, a lost link and its return told once each, and Ctrl-C (or SIGTERM, SIGHUP)
detaching from it while it goes on on the host; ``--attach``, ``--cancel``, ``--yes`` and
``--quiet``, the options of every command that starts one."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from tunedeck.commands._ask import add_yes_option, confirm

_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def add_follow_options(p: argparse.ArgumentParser, what: str) -> None:
    """``--attach ID``, ``--cancel ID``, ``--yes`` and ``--quiet`` for a command whose job is
    ``what`` ("an A/B")."""
    p.add_argument("--attach", metavar="ID", help=f"follow {what} running (or ended) on --host/--demo")
    p.add_argument("--cancel", metavar="ID", help=f"cancel {what} on --host/--demo (asks first; results kept)")
    add_yes_option(p, "stop a running server (or cancel) without asking")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")


def announce(run: Any, *, cmd: str, subject: str, where: str, quiet: bool) -> None:
    """The line that tells a new job started: ``subject`` (what it is) runs ``where``, and how to
    detach from it, follow it again and stop it."""
    if not quiet:
        print(
            f"tunedeck {cmd}: {subject} runs {where}; Ctrl-C detaches (it goes on); "
            f"`tunedeck {cmd} --attach {run.id}` follows it, `--cancel {run.id}` stops it",
            file=sys.stderr,
            flush=True,
        )


async def cancel(run: Any, *, cmd: str, noun: str, label: str, yes: bool) -> bool:
    """``--cancel``: asked first (``yes``: ``--yes``), then ``run`` cancelled on its host, what that
    did printed; False (and "not cancelled" said) when the answer is no."""
    question = f"Cancel {noun} {run.id} on {label} (the server it started is stopped)?"
    if not await confirm(question, prog=cmd, yes=yes):
        print(f"tunedeck {cmd}: not cancelled", file=sys.stderr)
        return False
    print(await run.cancel(), file=sys.stderr)
    return True


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
