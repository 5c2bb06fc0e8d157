"""``tunedeck runs``: servers tunedeck launched on a host (run folders + local records)."""

from __future__ import annotations

import argparse
import json
import time

from tui.commands._runs import age, err, host_from_args, records_for
from tui.model import jsonable
from tui.services.hosts import HostError
from tui.services.launcher import RunStore


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("runs", parents=[common], help="list the servers tunedeck launched on the host")
    p.add_argument("--json", action="store_true", help="print the run records as JSON")
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    host = host_from_args(args)
    store = RunStore()
    try:
        recs = await records_for(host, store)
    except HostError as e:
        return err("runs", str(e))
    finally:
        await host.close()
    if args.json:
        print(json.dumps([jsonable(r.to_json()) for r in recs], indent=2))
        return 0
    if not recs:
        print(f"no runs on {host.target}")
        return 0
    now = time.time()
    print(f"{'RUN':14} {'STATUS':9} {'ENGINE':7} {'PORT':>5} {'PID':>8} {'AGE':>7}  PROFILE / COMMAND")
    for r in recs:
        what = r.profile or " ".join(r.argv)[:60]
        print(
            f"{r.run_id:14} {r.status:9} {r.engine:7} {r.port if r.port else '-':>5} {r.pid or '-':>8} "
            f"{age(now - (r.created or now)):>7}  {what}"
        )
        if r.diagnosis:
            print(f"{'':14} {r.diagnosis}")
    return 0
