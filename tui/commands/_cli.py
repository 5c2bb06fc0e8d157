"""What the subcommands share when they answer: the one line of a failure, and the name of the target."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Collection, Sequence

from tunedeck.fmt import text_table
from tunedeck.util.safety import visible


def fail(cmd: str, msg: object, code: int = 1) -> int:
    """Print ``tunedeck CMD: MSG`` on stderr, made safe to show (a message may carry host text), and
    return ``code``, the exit status."""
    print(f"tunedeck {cmd}: {visible(msg)}", file=sys.stderr)
    return code


def json_actions(
    p: argparse.ArgumentParser,
    dest: str,
    *,
    parents: Sequence[argparse.ArgumentParser] = (),
    required: bool = False,
) -> Callable[[str, str], argparse.ArgumentParser]:
    """ACTION subcommands of ``p`` (its name in ``dest``), each taking ``--json`` (machine-readable
    output) before or after the action's name; returns the function that adds one (name, help)."""
    p.add_argument("--json", action="store_true", help="machine-readable output")
    sub = p.add_subparsers(dest=dest, metavar="ACTION", required=required)
    jp = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: an action without --json keeps what was given before its name
    jp.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[*parents, jp], help=help)

    return add


def add_noise_option(
    p: argparse.ArgumentParser, default: float | None = None, what: str = "noise threshold for single runs"
) -> None:
    """``--noise PCT`` of ``compare`` and ``ab`` (below it, a single run's difference is noise), and of
    ``tune`` (``what`` it bounds there, its own ``default``; None: the comparison's)."""
    from tunedeck.ab.compare import DEFAULT_NOISE_PCT

    pct = DEFAULT_NOISE_PCT if default is None else default
    p.add_argument("--noise", type=float, default=pct, metavar="PCT", help=f"{what}, in %% (default {pct:g})")


def add_dangerous_env_option(p: argparse.ArgumentParser) -> None:
    """``--allow-dangerous-env`` of the commands that build a profile's command (``preflight``,
    ``profiles check``, ``profiles command``): its environment may set what changes the executable."""
    p.add_argument("--allow-dangerous-env", action="store_true", help="accept LD_PRELOAD, PATH, PYTHONPATH, …")


def add_python_option(p: argparse._ActionsContainer, what: str) -> None:
    """``--python PATH`` of the commands that run tunedeck's code on the host (``what``: for what,
    and its default there)."""
    p.add_argument("--python", metavar="PATH", default=None, help=f"the host's Python (>= 3.9) for {what}")


def add_profile_argument(p: argparse.ArgumentParser) -> None:
    """The positional NAME of a command about one profile: a stored profile's name or a TOML file."""
    p.add_argument("name", metavar="NAME", help="profile name or path to a .toml file")


def add_target_argument(p: argparse.ArgumentParser, help: str) -> None:
    """The optional positional TARGET of a command about one host, given in place of ``--host``
    (:func:`given_target` reads it)."""
    p.add_argument("target", nargs="?", metavar="TARGET", help=help)


def given_target(args: argparse.Namespace) -> str | None:
    """The host a command of :func:`add_target_argument` is about: TARGET, else ``--host``."""
    target: str | None = args.target or args.host
    return target


def noted_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    notes: Sequence[Sequence[str]],
    *,
    under: str,
    right: Collection[int] = (),
    indent: str = "",
) -> list[str]:
    """:func:`~tunedeck.fmt.text_table`, each row followed by its ``notes`` (a line each, made safe
    to show), which start below the column headed ``under``."""
    head, *lines = text_table(headers, rows, right=right, indent=indent)
    pad = " " * head.index(under)
    out = [head]
    for line, said in zip(lines, notes):
        out += [line, *(pad + visible(n) for n in said)]
    return out


def target_label(demo: bool, host: str | None) -> str:
    """How a command names its target: ``demo``, the host it was given, or ``local``."""
    return "demo" if demo else (host or "local")
