"""``tunedeck`` without a subcommand: open the dashboard on the target host.

The UI (Textual) is loaded here only, through importlib, so that the
rest of the CLI and the core never import it.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tui.services.hosts import HostError, get_host
from tui.util.safety import UnsafeInput


def run_dashboard(args: argparse.Namespace) -> int:
    target = getattr(args, "host", None)
    demo = bool(getattr(args, "demo", False))
    try:
        host = get_host(target, demo=demo)
    except (UnsafeInput, HostError) as e:
        print(f"tunedeck: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        what = "the simulator (tui.sim.demo)" if demo else "the SSH layer (tui.services.ssh)"
        print(f"tunedeck: {what} is not available in this build: {e}", file=sys.stderr)
        return 2
    if not sys.stdout.isatty() and not getattr(args, "force_ui", False):
        print("tunedeck: the dashboard needs a terminal; use `tunedeck status --json` in scripts",
              file=sys.stderr)
        return 2
    app_module = importlib.import_module("tui.app")
    app = app_module.make_app(host, target="demo" if demo else host.target, demo=demo)
    rc = app.run()
    return int(rc or 0)
