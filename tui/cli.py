"""The ``tunedeck`` command line.

Each subcommand lives in its own module under :mod:`tunedeck.commands`, listed in
``tunedeck.commands.COMMANDS``; only the module of the command a line names is
imported. A module defines ``register(subparsers, common)`` which adds its
parser and sets ``func`` (a callable taking the parsed namespace and returning
an exit code; it may be a coroutine function).
``common`` is a parent parser carrying the global ``--host``/``--demo``
options so that every subcommand accepts them after its own name too.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import os
import sys
from typing import Collection, Sequence

from tunedeck import __version__
from tunedeck.commands import COMMANDS, common_parser, finish_args


def build_parser(only: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line: every subcommand registered, or with ``only`` just those (their
    modules imported) and the others listed by name and help alone (``tunedeck.commands.COMMANDS``), so
    ``tunedeck --help``, ``--version`` and a single command load no module they do not need."""
    common = common_parser()
    parser = argparse.ArgumentParser(
        prog="tunedeck",
        description="Dashboard for tuning SGLang and vLLM inference servers on multi-GPU hosts. "
        "Without a subcommand, opens the dashboard.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"tunedeck {__version__}")
    parser.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="also print the log on stderr (it always goes to the state dir's tunedeck.log)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        if only is None or name in only:
            importlib.import_module(f"tunedeck.commands.{cmd.module}").register(sub, common)
        else:
            sub.add_parser(name, help=cmd.help)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The subcommand an argument list names (None: the dashboard, or a name that is no command)."""
    pre = argparse.ArgumentParser(add_help=False, parents=[common_parser()], exit_on_error=False)
    pre.add_argument("--version", action="store_true")
    pre.add_argument("--verbose", "-v", action="store_true")
    pre.add_argument("command", nargs="?")
    try:
        ns, _rest = pre.parse_known_args(list(argv))
    except (argparse.ArgumentError, SystemExit):
        return None  # the full parser says what is wrong
    name = getattr(ns, "command", None)
    return name if name in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:
        print(f"tunedeck {__version__}")
        return 0
    command = _command_named(argv)
    parser = build_parser([command] if command else [])
    args = finish_args(parser.parse_args(argv))
    from tunedeck.util import logs

    func = getattr(args, "func", None)
    # the dashboard opens the log file now, before Textual holds stderr (a state dir that cannot be
    # written is said while it can be seen); a command, at its first record: most log nothing, and
    # each start then skips logging.handlers and the file
    logs.setup(verbose=bool(getattr(args, "verbose", False)), lazy=func is not None)
    if func is not None and COMMANDS[args.command].says_config:
        _config_warnings()  # the dashboard shows them in its window instead
    if func is None:
        from tunedeck.ui.dashboard import run_dashboard  # the one door into the UI

        return int(run_dashboard(args) or 0)
    try:
        if inspect.iscoroutinefunction(func):
            from tunedeck.util.aio import run_async

            rc = run_async(func(args))
        else:
            rc = func(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        print("tunedeck: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _broken_pipe()
    return int(rc or 0)


def _config_warnings() -> None:
    """What the config file holds that tunedeck does not know, a line each on stderr."""
    from tunedeck.config import load_config

    for warning in load_config().warnings:
        print(f"tunedeck: warning: {warning}", file=sys.stderr)


def _broken_pipe() -> int:
    """The reader of our output went away (``tunedeck runs | head``): stop quietly, like
    coreutils. stdout is pointed at /dev/null so the interpreter's final flush of what is
    still buffered cannot raise again at exit."""
    logging.getLogger("tunedeck").debug("stdout closed by the reader (broken pipe)")
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests)
        pass
    return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by the pipe


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
