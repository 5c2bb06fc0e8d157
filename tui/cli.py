"""The ``tunedeck`` command line.

Each subcommand lives in its own module under :mod:`tui.commands` and is
discovered at start-up: a module defines ``register(subparsers, common)``
which adds its parser and sets ``func`` (a callable taking the parsed
namespace and returning an exit code; it may be a coroutine function).
``common`` is a parent parser carrying the global ``--host``/``--demo``
options so that every subcommand accepts them after its own name too.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import os
import pkgutil
import sys
from typing import Sequence

from tui import __version__


class _HostAction(argparse.Action):
    """``--host`` keeps its last value in ``host`` (as before) and every value in ``hosts``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        namespace.hosts = [*(getattr(namespace, "hosts", None) or []), values]
        namespace.host = values


#: commands that take several ``--host`` values and ``@GROUP`` names (None: the dashboard)
FLEET_COMMANDS = (None, "status")


def _common_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("target")
    g.add_argument(
        "--host",
        metavar="TARGET",
        action=_HostAction,
        default=argparse.SUPPRESS,
        help="target host: 'local', [user@]host[:port] or a Host alias from ~/.ssh/config. "
        "The dashboard and `status` take it several times, and @GROUP for a [groups] entry "
        "of the config file (one row group per host)",
    )
    g.add_argument(
        "--demo",
        action="store_true",
        default=argparse.SUPPRESS,
        help="use the built-in simulator (simulated GPUs and engines) on this machine",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common_parser()
    parser = argparse.ArgumentParser(
        prog="tunedeck",
        description="Dashboard for tuning SGLang and vLLM inference servers on multi-GPU hosts. "
        "Without a subcommand, opens the dashboard.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"tunedeck {__version__}")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="also print the log on stderr (it always goes to the state dir's tunedeck.log)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    import tui.commands as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"tui.commands.{info.name}")
        register = getattr(mod, "register", None)
        if register is not None:
            register(sub, common)
    return parser


def _finish(args: argparse.Namespace) -> argparse.Namespace:
    if not hasattr(args, "host"):
        args.host = None
    if not hasattr(args, "demo"):
        args.demo = False
    hosts = list(getattr(args, "hosts", None) or ([] if args.host is None else [args.host]))
    args.hosts = hosts
    #: several hosts, or a group: the fleet form (one row group per host, {"hosts": [...]})
    args.fleet = len(hosts) > 1 or any(h.startswith("@") for h in hosts)
    command = getattr(args, "command", None)
    if args.fleet and command not in FLEET_COMMANDS:
        print(f"tunedeck {command}: one --host only (several hosts and @GROUP: the dashboard and "
              "`tunedeck status`)", file=sys.stderr)
        raise SystemExit(2)
    if args.demo and (args.fleet or args.host not in (None, "local")):
        raise SystemExit("tunedeck: --demo runs on this machine; it cannot be combined with --host")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = _finish(parser.parse_args(argv))
    from tui.util import logs

    logs.setup(verbose=bool(getattr(args, "verbose", False)))
    func = getattr(args, "func", None)
    if func is None:
        from tui.commands._dashboard import run_dashboard

        return int(run_dashboard(args) or 0)
    try:
        if inspect.iscoroutinefunction(func):
            from tui.util.aio import run_async

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
