"""CLI subcommands; each module's ``register(subparsers, common)`` adds one (see tunedeck.cli)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NamedTuple, TypeAlias

#: what ``register`` receives: the parent parser's sub-command adder
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class _HostAction(argparse.Action):
    """``--host`` keeps its last value in ``host`` (as before) and every value in ``hosts``."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        _option_string: str | None = None,
    ) -> None:
        if not isinstance(values, str) or not values:
            # argparse hands ``--host=--`` over as an empty list (it drops a lone "--")
            raise argparse.ArgumentError(self, "expected a host (local, [user@]host[:port] or an alias)")
        namespace.hosts = [*(getattr(namespace, "hosts", None) or []), values]
        namespace.host = values


class Command(NamedTuple):
    """A subcommand as ``tunedeck --help`` lists it without importing it."""

    #: its module under ``tunedeck.commands``
    module: str
    #: its one-line help
    help: str
    #: whether the config file's warnings are said before it runs (False for the simulator: a
    #: stand-in for an engine or nvidia-smi, started every few seconds by a probe, reads no config)
    says_config: bool = True


#: every subcommand by name. ``tunedeck --help`` lists these without importing any command, and a
#: command line imports only the module of the command it names (tests/unit/test_cli_lazy.py
#: checks that each module registers exactly this name and help).
COMMANDS: dict[str, Command] = {
    "ab": Command("ab", "A/B two profiles: launch, benchmark, stop each, then compare"),
    "bench": Command("bench", "streaming serving benchmark with vLLM-compatible metrics"),
    "compare": Command("compare", "compare two runs (or an A/B's sides): deltas and verdicts"),
    "journal": Command("journal", "the tuning journal: every A/B, launch and benchmark run"),
    "launch": Command("launch", "launch a profile (or a raw command) detached on the host"),
    "logs": Command("logs", "print (and follow) a run's server log"),
    "parse-log": Command("parse_log", "parse an SGLang/vLLM server log: phases, progress, failures"),
    "plans": Command("plans", "list, show or check A/B benchmark plans (TOML)"),
    "preflight": Command("preflight", "check a profile against the host's engine and GPUs"),
    "probe": Command("probe", "report a host's OS, CPUs, memory, Python, GPUs and engines"),
    "profiles": Command("profiles", "server profiles: list, show, check, command, diff, presets"),
    "report": Command("report", "a result, A/B or campaign as one HTML or Markdown report"),
    "results": Command("results", "list, show and export benchmark results"),
    "runs": Command("runs", "list the servers tunedeck launched on the host"),
    "sim": Command("sim", "simulated SGLang/vLLM servers and nvidia-smi (for --demo)", says_config=False),
    "status": Command("status", "print GPUs, host load and servers once"),
    "stop": Command("stop", "stop servers tunedeck launched (default: every live one)"),
    "trust": Command("trust", "show a host's SSH key fingerprint; trust it once confirmed"),
    "tune": Command("tune", "find the configuration serving the most users within an SLO"),
}


def add_command(
    subparsers: Subparsers, common: argparse.ArgumentParser, name: str, **kw: Any
) -> argparse.ArgumentParser:
    """The parser of the subcommand ``name``: the global options (``common``), its one-line help
    from :data:`COMMANDS` (what ``tunedeck --help`` lists without importing it), and ``kw``
    (its description, epilog …)."""
    return subparsers.add_parser(name, parents=[common], help=COMMANDS[name].help, **kw)


#: commands that take several ``--host`` values and ``@GROUP`` names (None: the dashboard)
FLEET_COMMANDS = (None, "status")


def common_parser() -> argparse.ArgumentParser:
    """The global ``--host``/``--demo`` options, a parent of every subcommand's parser."""
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
    g.add_argument(
        "--sim",
        action="store_true",
        default=argparse.SUPPRESS,
        help="on any target: run the simulator in place of the engine, from tunedeck's host-side runtime "
        "(shipped to ${TUNEDECK_HOME}/lib, run by the profile's python; nothing installed there); a host "
        "without nvidia-smi gets simulated GPUs under ${TUNEDECK_HOME}/sim, which `status --sim` shows",
    )
    return common


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    """Defaults for the global options, and their rules: several hosts only where a fleet makes
    sense, ``--demo`` is this machine."""
    if not hasattr(args, "host"):
        args.host = None
    if not hasattr(args, "demo"):
        args.demo = False
    if not hasattr(args, "sim"):
        args.sim = False
    hosts = list(getattr(args, "hosts", None) or ([] if args.host is None else [args.host]))
    args.hosts = hosts
    #: several hosts, or a group: the fleet form (one row group per host, {"hosts": [...]})
    args.fleet = len(hosts) > 1 or any(h.startswith("@") for h in hosts)
    command = getattr(args, "command", None)
    if args.fleet and command not in FLEET_COMMANDS:
        print(
            f"tunedeck {command}: one --host only (several hosts and @GROUP: the dashboard and `tunedeck status`)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    if args.demo and (args.fleet or args.host not in (None, "local")):
        raise SystemExit("tunedeck: --demo runs on this machine; it cannot be combined with --host")
    return args
