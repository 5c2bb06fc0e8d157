"""``tunedeck stop [RUN]``: stop servers tunedeck launched (TERM, grace, KILL, GPU memory freed).

Without RUN it stops every live run on the target, whatever its recorded state
(starting, ready, stalled …): a run whose process is alive holds GPUs."""

from __future__ import annotations

import argparse
import json
import sys

from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._ask import add_yes_option, confirm
from tunedeck.commands._cli import fail
from tunedeck.commands._runs import choose, host_from_args, live_records, records_for
from tunedeck.hostops.hosts import HostError
from tunedeck.hostops.runstop import stop_run
from tunedeck.hostops.runstore import RunRecord, RunStore
from tunedeck.model import jsonable


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        subparsers,
        common,
        "stop",
        description="Stop a run: PID-reuse guard, TERM to its process group, KILL after the grace "
        "period, then wait until nvidia-smi no longer lists its processes. Without RUN, every run "
        "whose process is alive on the target is stopped (starting, ready or stalled), after one "
        "confirmation.",
    )
    p.add_argument("run", nargs="?", metavar="RUN", help="run id (or a unique prefix)")
    add_yes_option(p, "do not ask for confirmation")
    p.add_argument("--grace", type=float, default=30.0, metavar="S", help="seconds between TERM and KILL (default 30)")
    p.add_argument(
        "--gpu-wait", type=float, default=60.0, metavar="S", help="max seconds to wait for GPU memory release"
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def _question(recs: list[RunRecord], target: str) -> tuple[str, list[str]]:
    """The question to ask before stopping ``recs``, and the lines that list them."""
    if len(recs) == 1:
        r = recs[0]
        return f"Stop run {r.run_id} on {target} ({r.status}, pid {r.pid}: {' '.join(r.argv)[:100]})?", []
    lines = [f"{len(recs)} live runs on {target}:"]
    lines += [f"  {r.run_id} ({r.status}, pid {r.pid}): {' '.join(r.argv)[:90]}" for r in recs]
    return f"Stop all {len(recs)} ({', '.join(f'run {r.run_id}' for r in recs)}) on {target}?", lines


async def run(args: argparse.Namespace) -> int:
    from tunedeck.commands import _deploy

    dep = _deploy.find(args.run)
    if dep is not None:
        return await _deploy.stop(args, dep)
    host = host_from_args(args)
    store = RunStore()
    results = []
    try:
        if args.run is not None:
            recs = await records_for(host, store)
            rec = choose(recs, args.run)
            if rec is None:
                return fail("stop", f"run {args.run!r} not found on {host.target}")
            targets = [rec]
        else:
            targets = await live_records(host, store)
            if not targets:
                last = store.all(host.target)
                tail = f" (last run {last[-1].run_id} is {last[-1].status})" if last else ""
                return fail("stop", f"no running server on {host.target}{tail}")
        question, details = _question(targets, host.target)
        if not await confirm(question, prog="stop", yes=args.yes, details=details, refused="not stopped"):
            return 1
        if args.sim:
            from tunedeck.services import runtime

            try:
                # the GPU release is confirmed on the host's simulated GPUs
                await runtime.ensure_sim(host)
            except runtime.RuntimeUnavailable as e:
                print(f"tunedeck stop: --sim: {e}; the GPU release cannot be confirmed", file=sys.stderr)
        for rec in targets:
            res = await stop_run(host, rec, grace=args.grace, gpu_wait=args.gpu_wait, store=store)
            results.append((rec, res))
    except HostError as e:
        return fail("stop", str(e))
    finally:
        await host.close()
    if args.json:
        # one object: the first stop's fields (as for a single run) and every stop under "runs"
        out = [{"run_id": rec.run_id, **jsonable(res)} for rec, res in results]
        worst = next((o for o in out if o.get("state") not in ("stopped", "exited")), out[0])
        print(json.dumps({**worst, "runs": out}, indent=2))
    else:
        for _, res in results:
            print(res.message)
            if res.gpu_freed_mib is not None:
                print(f"GPU memory freed: {res.gpu_freed_mib / 1024:.1f} GiB")
            if res.gpu_released is False:
                print("warning: the GPUs still list the run's processes", file=sys.stderr)
    return 0 if all(res.state in ("stopped", "exited") for _, res in results) else 1
