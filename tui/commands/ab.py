"""``tunedeck ab A B``: launch A, benchmark, stop; launch B, benchmark, stop; compare."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import sys

from tui.ab.compare import DEFAULT_NOISE_PCT
from tui.ab.plans import PlanError, load_plan
from tui.ab.render import to_text
from tui.util.safety import UnsafeInput


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "ab", parents=[common],
        help="A/B two profiles: launch, benchmark, stop each, then compare",
        description="Stops what is running (asks first), then for A and for B: launch, wait ready, flush "
        "the prefix cache, run the plan's benchmarks, stop and confirm the GPU memory is freed; "
        "then prints the comparison. Every run is recorded in the tuning journal.",
    )
    p.add_argument("a", metavar="A", help="profile name for A (the baseline)")
    p.add_argument("b", metavar="B", help="profile name for B (the candidate)")
    p.add_argument("--plan", default="default", metavar="NAME",
                   help="benchmark plan: quick, default, sweep, a user plan or a .toml path (default: default)")
    p.add_argument("--repeats", type=int, default=1, metavar="N",
                   help="run the plan N times per side for a mean and a noise band (default 1)")
    p.add_argument("--interleave", action="store_true",
                   help="relaunch for every repeat, alternating A B A B (catches drift; costs a load each)")
    p.add_argument("--yes", "-y", action="store_true", help="stop a running server without asking")
    p.add_argument("--noise", type=float, default=DEFAULT_NOISE_PCT, metavar="PCT",
                   help=f"noise threshold for single runs, in %% (default {DEFAULT_NOISE_PCT:g})")
    p.add_argument("--json", action="store_true", help="print the report (sides, comparison, journal id) as JSON")
    p.add_argument("--markdown", metavar="FILE", help="also write the comparison as Markdown")
    p.add_argument("--csv", metavar="FILE", help="also write the comparison as CSV")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run)


def _progress_printer(quiet: bool, every: float = 5.0):
    """Event lines on stderr; startup/bench progress only when its shape changes or every few seconds."""
    last = {"key": "", "t": 0.0}

    def on_event(ev) -> None:
        if quiet:
            return
        if ev.kind in ("progress", "bench-progress"):
            key = ev.kind + re.sub(r"[\d.]+", "#", ev.message)
            if key == last["key"] and ev.time - last["t"] < every:
                return
            last["key"], last["t"] = key, ev.time
        print(f"[{ev.step}/{ev.steps}] {ev.line()}", file=sys.stderr, flush=True)

    return on_event


async def run(args: argparse.Namespace) -> int:
    if args.repeats < 1 or args.repeats > 100:
        print("tunedeck ab: --repeats must be between 1 and 100", file=sys.stderr)
        return 2
    if not (0 <= args.noise <= 100):
        print("tunedeck ab: --noise must be between 0 and 100", file=sys.stderr)
        return 2
    from tui.profiles.model import NAME_RE

    for side, name in (("A", args.a), ("B", args.b)):
        if not NAME_RE.match(name):
            print(f"tunedeck ab: {side}: invalid profile name {name!r} "
                  "(letters, digits, '.', '_', '-'; at most 64)", file=sys.stderr)
            return 2
    try:
        plan = load_plan(args.plan)
    except PlanError as e:
        print(f"tunedeck ab: plan {e}", file=sys.stderr)
        return 2
    from tui.ab.ops import HostOps
    from tui.ab.runner import ABRunner
    from tui.services.hosts import HostError, get_host

    try:
        host = get_host(args.host, demo=args.demo)
    except (UnsafeInput, HostError) as e:
        print(f"tunedeck ab: {e}", file=sys.stderr)
        return 2

    async def confirm(question: str) -> bool:
        if args.yes:
            return True
        if not sys.stdin.isatty():
            print(f"tunedeck ab: {question} Pass --yes to stop it without asking.", file=sys.stderr)
            return False
        loop = asyncio.get_running_loop()
        ans = await loop.run_in_executor(None, lambda: input(f"{question} [y/N] "))
        return ans.strip().lower() in ("y", "yes")

    ops = HostOps(host, demo=args.demo)
    runner = ABRunner(ops, args.a, args.b, plan, repeats=args.repeats, interleave=args.interleave,
                      confirm_stop=confirm, on_event=_progress_printer(args.quiet), noise_pct=args.noise)
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:  # the server the A/B started is stopped on TERM/HUP too, not only on Ctrl-C
            loop.add_signal_handler(sig, runner.cancel)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        rep = await runner.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        del task
        try:
            await host.close()
        except Exception:  # noqa: BLE001
            pass
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2, ensure_ascii=False))
    else:
        if rep.comparison is not None:
            sys.stdout.write(to_text(rep.comparison))
        for w in rep.warnings:
            print(f"warning: {w}")
        again = f"; `tunedeck compare {rep.id}` shows it again" if rep.comparison is not None else ""
        print(f"journal: A/B {rep.id} ({rep.status}){again}")
    if rep.comparison is not None and (args.markdown or args.csv):
        from tui.commands.compare import write_export

        write_export(rep.comparison, args)
    if rep.left_running:
        print("tunedeck ab: still running after the A/B: " + "; ".join(rep.left_running), file=sys.stderr)
    if rep.status == "completed":
        return 0
    print(f"tunedeck ab: {rep.status}: {rep.error}", file=sys.stderr)
    return 130 if rep.status == "cancelled" else 1
