"""The one yes/no question of the command line, for everything that stops, cancels, deletes or trusts.

``--yes`` answers yes. Otherwise the question is asked only at a terminal, off the event loop (a
connection or a follower keeps running while the operator reads), and only ``y``/``yes`` is yes:
enter, end of input or anything else is no, so Cancel is the default. Without a terminal and
without ``--yes`` the answer is no, and the question is printed with how to say yes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Sequence


def add_yes_option(p: argparse.ArgumentParser, help: str) -> None:
    """``--yes``/``-y``, the answer to :func:`confirm`'s question given in advance (``help``: to what)."""
    p.add_argument("--yes", "-y", action="store_true", help=help)


async def confirm(question: str, *, prog: str, yes: bool, details: Sequence[str] = (), refused: str = "") -> bool:
    """Ask ``question`` (``details`` first, one line each, on stderr); True only for a yes.

    ``refused`` is printed on a no (e.g. "not stopped"); without a terminal the line says how to
    say yes instead."""
    if yes:
        return True
    if not sys.stdin.isatty():
        not_done = (refused or "not done").capitalize()
        print(f"tunedeck {prog}: {question} {not_done}: pass --yes to do it without asking.", file=sys.stderr)
        return False
    for line in details:
        print(line, file=sys.stderr)

    def ask() -> str:
        try:
            return input(f"{question} [y/N] ")
        except EOFError:
            return ""

    answer = await asyncio.get_running_loop().run_in_executor(None, ask)
    ok = answer.strip().lower() in ("y", "yes")
    if not ok and refused:
        print(refused, file=sys.stderr)
    return ok
