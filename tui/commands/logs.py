"""``tunedeck logs [RUN] [--follow] [--json]``: a run's server log (from the host's run folder).

With ``--json`` the log comes as one object ``{run_id, target, path, offset, end_offset, text}``;
with ``--follow --json`` as JSON lines, one object ``{run_id, offset, line}`` per complete log
line (``offset``: where the line starts in the log; a last line without a newline yet is held
back until it ends). Errors also print ``{target, error: {kind, message}}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
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
    p.add_argument(
        "--json", action="store_true",
        help="one JSON object with the log text; with --follow, one JSON object per log line",
    )
    p.set_defaults(func=run)


class _JsonLines:
    """Log bytes in, one JSON object per complete line out."""

    def __init__(self, run_id: str, offset: int) -> None:
        self.run_id = run_id
        self.offset = offset  # where the held-back partial line starts
        self._buf = b""

    def feed(self, chunk: bytes) -> bytes:
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        out = []
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            out.append(json.dumps({"run_id": self.run_id, "offset": self.offset, "line": line}, ensure_ascii=False))
            self.offset += len(raw) + 1
        return "".join(f"{x}\n" for x in out).encode()


def _fail(args: argparse.Namespace, target: str, kind: str, message: str) -> int:
    if args.json:
        print(json.dumps({"target": target, "error": {"kind": kind, "message": message}}))
    return err("logs", message)


async def run(args: argparse.Namespace) -> int:
    host = host_from_args(args)
    store = RunStore()
    out = sys.stdout.buffer
    try:
        recs = await records_for(host, store)
        rec = choose(recs, args.run, alive_first=True)
        if rec is None or not rec.run_dir:
            what = f"run {args.run!r}" if args.run else "a run"
            return _fail(args, host.target, "not-found", f"{what} not found on {host.target}")
        log = f"{rec.run_dir}/log"
        offset = rec.log_offset if args.resume else 0
        if not args.follow:
            data = await read_log(host, log, offset)
            if args.json:
                out.write(json.dumps({
                    "run_id": rec.run_id, "target": host.target, "path": log, "offset": offset,
                    "end_offset": offset + len(data), "text": data.decode("utf-8", "replace"),
                }, ensure_ascii=False).encode() + b"\n")
            else:
                out.write(data)
            out.flush()
            if args.resume:
                store.update(rec.run_id, log_offset=offset + len(data))
            return 0
        if rec.ended_:
            # nothing more will be written: print what is there (as --follow would) and end
            data = await read_log(host, log, offset)
            lines0 = _JsonLines(rec.run_id, offset) if args.json else None
            out.write(lines0.feed(data + (b"" if not data or data.endswith(b"\n") else b"\n"))
                      if lines0 is not None else data)
            out.flush()
            if args.resume:
                store.update(rec.run_id, log_offset=offset + len(data))
            print(f"tunedeck logs: run {rec.run_id} has ended ({rec.status}); not following", file=sys.stderr)
            return 0
        import asyncio

        backoff = 0.5
        lines = _JsonLines(rec.run_id, offset) if args.json else None
        while True:
            f = LogFollower(host, log, offset, run_id=rec.run_id, store=store, persist=args.resume)
            try:
                async with contextlib.aclosing(f.chunks()) as chunks:
                    async for chunk in chunks:
                        data = lines.feed(chunk) if lines is not None else chunk
                        if data:
                            out.write(data)
                            out.flush()
                        backoff = 0.5
            except HostError as e:
                print(f"tunedeck logs: {e}; reconnecting", file=sys.stderr)
            offset = f.offset
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10)
    except HostError as e:
        return _fail(args, host.target, e.kind, str(e))
    except (BrokenPipeError, KeyboardInterrupt):
        return 0
    finally:
        await host.close()
