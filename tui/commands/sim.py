"""``tunedeck sim``: the simulator (engines and nvidia-smi) used by ``--demo`` and the tests.

- ``tunedeck sim sglang [SGLang launch flags] [--sim-* flags]``
- ``tunedeck sim vllm [serve] MODEL [vLLM flags] [--sim-* flags]``
- ``tunedeck sim smi [nvidia-smi arguments]``

Everything after the engine name goes to a parser that mirrors the engine's
own (its help, choices and argparse errors), so it is passed through untouched.
"""

from __future__ import annotations

import argparse
import sys

from tunedeck.commands import Subparsers, add_command

# The engine parsers see every argument as a positional: their own argparse
# (built to look like the engine's) parses them later.
_RAW = "\x00"


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        subparsers,
        common,
        "sim",
        description="The simulator behind --demo: a real process with the engines' real log lines, "
        "HTTP endpoints, SSE stream and metrics, and simulated GPUs behind an nvidia-smi.",
    )
    sub = p.add_subparsers(dest="sim_command", metavar="WHAT", required=True)
    for name, func, helptext in (
        ("sglang", _sglang, "a simulated SGLang 0.5.23 server (`sglang serve` flags)"),
        ("vllm", _vllm, "a simulated vLLM 0.33 server: vllm [serve] MODEL [flags]"),
        ("smi", _smi, "nvidia-smi over the simulated GPUs"),
    ):
        e = sub.add_parser(name, add_help=False, prefix_chars=_RAW, help=helptext)
        e.add_argument("argv", nargs="*")
        e.set_defaults(func=func)


def _local_only(args: argparse.Namespace) -> int | None:
    if getattr(args, "host", None) not in (None, "local"):
        print(f"tunedeck sim: runs on this machine only; --host {args.host} is not supported", file=sys.stderr)
        return 2
    return None


def _sglang(args: argparse.Namespace) -> int:
    if (rc := _local_only(args)) is not None:
        return rc
    from tunedeck.sim.engine import main

    return main("sglang", list(args.argv))


def _vllm(args: argparse.Namespace) -> int:
    if (rc := _local_only(args)) is not None:
        return rc
    from tunedeck.sim.engine import main

    return main("vllm", list(args.argv))


def _smi(args: argparse.Namespace) -> int:
    if (rc := _local_only(args)) is not None:
        return rc
    from tunedeck.sim.smi import main

    return main(list(args.argv), sys.stdout)
