"""``tunedeck stop [RUN]``: stop a server tunedeck launched (TERM, grace, KILL, GPU memory freed)."""

from __future__ import annotations

import argparse
import json
import sys

from tui.commands._runs import choose, err, host_from_args, records_for
from tui.model import jsonable
from tui.services.hosts import HostError
from tui.services.launcher import RunStore, stop_run


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "stop",
        parents=[common],
        help="stop a server tunedeck launched (default: latest running)",
        description="Stop a run: PID-reuse guard, TERM to its process group, KILL after the grace "
        "period, then wait until nvidia-smi no longer lists its processes.",
    )
    p.add_argument("run", nargs="?", metavar="RUN", help="run id (or a unique prefix)")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--grace", type=float, default=30.0, metavar="S", help="seconds between TERM and KILL (default 30)")
    p.add_argument("--gpu-wait", type=float, default=60.0, metavar="S", help="max seconds to wait for GPU memory release")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    host = host_from_args(args)
    store = RunStore()
    try:
        recs = await records_for(host, store)
        rec = choose(recs, args.run, alive_first=True)
        if rec is None:
            what = f"run {args.run!r}" if args.run else "a run"
            return err("stop", f"{what} not found on {host.target}")
        if args.run is None and rec.ended_:
            return err("stop", f"no running server on {host.target} (last run {rec.run_id} is {rec.status})")
        if not args.yes:
            # No terminal and no --yes means no (like `tunedeck ab`); Cancel is the default.
            desc = " ".join(rec.argv)[:100]
            question = f"Stop run {rec.run_id} on {rec.target} (pid {rec.pid}: {desc})?"
            if not sys.stdin.isatty():
                print(f"tunedeck stop: {question} Not stopped: pass --yes to stop without asking.",
                      file=sys.stderr)
                return 1
            print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
            try:
                ans = input()
            except EOFError:
                ans = ""
            if ans.strip().lower() not in ("y", "yes"):
                print("not stopped", file=sys.stderr)
                return 1
        res = await stop_run(host, rec, grace=args.grace, gpu_wait=args.gpu_wait, store=store)
    except HostError as e:
        return err("stop", str(e))
    finally:
        await host.close()
    if args.json:
        print(json.dumps({"run_id": rec.run_id, **jsonable(res)}, indent=2))
    else:
        print(res.message)
        if res.gpu_freed_mib is not None:
            print(f"GPU memory freed: {res.gpu_freed_mib / 1024:.1f} GiB")
        if res.gpu_released is False:
            print("warning: the GPUs still list the run's processes", file=sys.stderr)
    return 0 if res.state in ("stopped", "exited") else 1
