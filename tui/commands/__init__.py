"""CLI subcommands; each module's ``register(subparsers, common)`` adds one (see tui.cli)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    #: what ``register`` receives: the parent parser's sub-command adder
    Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def common_parser() -> argparse.ArgumentParser:
    """The global ``--host``/``--demo`` options, a parent of every subcommand's parser."""
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("target")
    g.add_argument(
        "--host",
        metavar="TARGET",
        default=argparse.SUPPRESS,
        help="target host: 'local', [user@]host[:port] or a Host alias from ~/.ssh/config",
    )
    g.add_argument(
        "--demo",
        action="store_true",
        default=argparse.SUPPRESS,
        help="use the built-in simulator (simulated GPUs and engines) on this machine",
    )
    return common


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    """Defaults for the global options, and their one rule (``--demo`` is this machine)."""
    if not hasattr(args, "host"):
        args.host = None
    if not hasattr(args, "demo"):
        args.demo = False
    if args.demo and args.host not in (None, "local"):
        raise SystemExit("tunedeck: --demo runs on this machine; it cannot be combined with --host")
    return args
