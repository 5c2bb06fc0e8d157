"""``tunedeck logs [RUN] [--follow]``: a run's server log (from the host's run folder)."""

from __future__ import annotations

import argparse
import contextlib
import sys

from tui.commands._runs import choose, err, host_from_args, records_for
from tui.services.hosts import HostError
from tui.services.launcher import LogFollower, RunStore, read_log


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("logs", parents=[common], help="print (and follow) a run's server log")
    p.add_argument("run", nargs="?", metavar="RUN", help="run id or unique prefix (default: the most recent run)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new lines (reconnects on link loss)")
    p.add_argument(
        "--resume", action="store_true",
        help="start where the last --resume left off (byte offset kept in the run record)",
    )
    p.add_argument("--json", action="store_true", help="accepted for symmetry; the log is printed raw")
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    host = host_from_args(args)
    store = RunStore()
    out = sys.stdout.buffer
    try:
        recs = await records_for(host, store)
        rec = choose(recs, args.run, alive_first=True)
        if rec is None or not rec.run_dir:
            what = f"run {args.run!r}" if args.run else "a run"
            return err("logs", f"{what} not found on {host.target}")
        log = f"{rec.run_dir}/log"
        offset = rec.log_offset if args.resume else 0
        if not args.follow:
            data = await read_log(host, log, offset)
            out.write(data)
            out.flush()
            if args.resume:
                store.update(rec.run_id, log_offset=offset + len(data))
            return 0
        import asyncio

        backoff = 0.5
        while True:
            f = LogFollower(host, log, offset, run_id=rec.run_id, store=store, persist=args.resume)
            try:
                async with contextlib.aclosing(f.chunks()) as chunks:
                    async for chunk in chunks:
                        out.write(chunk)
                        out.flush()
                        backoff = 0.5
            except HostError as e:
                print(f"tunedeck logs: {e}; reconnecting", file=sys.stderr)
            offset = f.offset
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10)
    except HostError as e:
        return err("logs", str(e))
    except (BrokenPipeError, KeyboardInterrupt):
        return 0
    finally:
        await host.close()
