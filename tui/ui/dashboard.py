"""``tunedeck`` without a subcommand: open the dashboard on the target host.

The UI (Textual) is imported here only, inside the function, so that the rest
of the CLI and the core never load it (import-linter allows this one edge).
"""

from __future__ import annotations

import argparse
import sys

from tunedeck.hostops.hosts import HostError
from tunedeck.services.targets import get_host
from tunedeck.util.safety import UnsafeInput


def run_dashboard(args: argparse.Namespace) -> int:
    if getattr(args, "fleet", False):
        return run_fleet_dashboard(args)
    target = getattr(args, "host", None)
    demo = bool(getattr(args, "demo", False))
    try:
        host = get_host(target, demo=demo)
    except (UnsafeInput, HostError) as e:
        print(f"tunedeck: {e}", file=sys.stderr)
        return 2
    if not sys.stdout.isatty() and not getattr(args, "force_ui", False):
        print("tunedeck: the dashboard needs a terminal; use `tunedeck status --json` in scripts", file=sys.stderr)
        return 2
    from tunedeck.collectors.sources import default_sources
    from tunedeck.ui.app import make_app

    # --sim: the host's simulated GPUs (the sampler gives it the simulated nvidia-smi)
    sources = default_sources(host, sim=True) if getattr(args, "sim", False) and not demo else None
    sim = bool(getattr(args, "sim", False)) and not demo
    app = make_app(host, sources=sources, target="demo" if demo else host.target, demo=demo, sim=sim)
    rc = app.run()
    return int(rc or 0)


def run_fleet_dashboard(args: argparse.Namespace) -> int:
    """Several hosts (``--host A --host B``, ``--host @GROUP``): one row group per host."""
    from tunedeck.collectors.fleet import GroupError, expand_targets, fleet_members

    try:
        members = fleet_members(expand_targets(args.hosts), sim=bool(getattr(args, "sim", False)))
    except (UnsafeInput, HostError, GroupError) as e:
        from tunedeck.config import load_config

        for warning in load_config().warnings:  # the window that would show them does not open
            print(f"tunedeck: warning: {warning}", file=sys.stderr)
        print(f"tunedeck: --host: {e}", file=sys.stderr)
        return 2
    if not sys.stdout.isatty() and not getattr(args, "force_ui", False):
        print(
            "tunedeck: the dashboard needs a terminal; use `tunedeck status --host … --json` in scripts",
            file=sys.stderr,
        )
        return 2
    from tunedeck.ui.app import make_fleet_app

    rc = make_fleet_app(members).run()
    return int(rc or 0)
