"""``tunedeck logs [RUN] [--follow] [--json] [--raw]``: a run's server log (from the host's run folder).

The log is printed line by line, each as the run view shows it (``LineSplitter``): escape
sequences removed (SGR colour kept when the output is a terminal that shows colour, so not
with ``NO_COLOR``), secret arguments the engine echoes redacted, a line longer than 16 KiB cut
and marked. ``--raw`` prints the log's exact bytes instead, only to a file or a pipe.

With ``--json`` the log comes as one object ``{run_id, target, path, offset, end_offset, text}``;
with ``--follow --json`` as JSON lines, one object ``{run_id, offset, line}`` per complete log
line (``offset``: where the line starts in the log; a last line without a newline yet is held
back until it ends). Errors also print ``{target, error: {kind, message}}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from typing import BinaryIO

from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._cli import fail
from tunedeck.commands._runs import choose, host_from_args, records_for
from tunedeck.hostops.hostruns import find_host_run
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.logfollow import LINK_BACK_TEXT, LineSplitter, follow_forever, link_lost_text, read_log
from tunedeck.hostops.runstore import RunRecord, RunStore
from tunedeck.services.journal import reread_runs
from tunedeck.util.aio import cancel_and_wait
from tunedeck.util.safety import visible

log_ = logging.getLogger(__name__)

#: Seconds between checks that the followed run is still alive (``--follow`` ends with it).
END_CHECK_INTERVAL = 2.0


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(subparsers, common, "logs")
    p.add_argument("run", nargs="?", metavar="RUN", help="run id or unique prefix (default: the most recent run)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new lines (reconnects on link loss)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="start where the last --resume left off (byte offset kept in the run record)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object with the log text; with --follow, one JSON object per log line",
    )
    p.add_argument(
        "--raw",
        action="store_true",
        help="the log's exact bytes, escape sequences and all (to a file or a pipe only, never to a terminal)",
    )
    p.add_argument("--node", metavar="NODE", help="a deployment's log: only this node's lines")
    p.set_defaults(func=run)


class _Printer:
    """Log bytes in, what ``tunedeck logs`` prints out: the exact bytes (``raw``), one JSON
    object per complete line (``run_id``: JSON lines), or the lines as shown (safe to print)."""

    def __init__(self, offset: int, *, raw: bool = False, run_id: str | None = None, sgr: bool = False) -> None:
        self.raw = raw
        self.run_id = run_id
        #: where the held-back partial line starts: the log's bytes printed (where --resume goes on)
        self.offset = offset
        self.splitter = LineSplitter(sgr=sgr and run_id is None)

    def feed(self, chunk: bytes) -> bytes:
        if self.raw:
            self.offset += len(chunk)
            return chunk
        return self._out(self.splitter.feed_sized(chunk))

    def end(self) -> bytes:
        """The unterminated last line, ended (nothing more will come)."""
        if self.raw:
            return b""
        n = self.splitter.pending_bytes()
        return self._out([(line, n) for line in self.splitter.flush()])

    def _out(self, lines: list[tuple[str, int]]) -> bytes:
        out = []
        for line, size in lines:
            if self.run_id is None:
                out.append(line)
            else:
                out.append(json.dumps({"run_id": self.run_id, "offset": self.offset, "line": line}, ensure_ascii=False))
            self.offset += size
        return "".join(f"{x}\n" for x in out).encode()


def _colour(out: BinaryIO) -> bool:
    """Whether ``out`` is a terminal that shows colour (SGR codes are kept there)."""
    return out.isatty() and not os.environ.get("NO_COLOR")


def _fail(args: argparse.Namespace, target: str, kind: str, message: str) -> int:
    if args.json:
        print(json.dumps({"target": target, "error": {"kind": kind, "message": message}}))
    return fail("logs", message)


async def _run_ended(host: Host, rec: RunRecord) -> int | bool | None:
    """False while the run lives; once it ended, its exit status (None if it wrote none)."""
    h = await find_host_run(host, rec.run_id)
    if h is None:
        return None
    if h.alive:
        return False
    return h.rc


async def _watch_end(host: Host, rec: RunRecord, interval: float) -> int | None:
    """Return (with the exit status) once the run has ended. Link failures are the follower's
    to report: here they only delay the check."""
    while True:
        await asyncio.sleep(interval)
        try:
            ended = await asyncio.wait_for(_run_ended(host, rec), interval * 5 + 10)
        except (HostError, OSError, asyncio.TimeoutError) as e:
            log_.info("logs: cannot check whether run %s still runs: %s", rec.run_id, visible(e))
            continue
        if ended is not False:
            return ended


async def _cause(host: Host, store: RunStore, rec: RunRecord) -> str:
    """'; failed: CAUSE' for a run that just ended: re-read from its host (settled from its own
    log, the journal corrected when it had been ready), or '' when it was stopped or cannot be read."""
    try:
        await reread_runs(host, store)
    except (HostError, OSError) as e:
        log_.warning("logs: run %s ended; reading its cause failed: %s", rec.run_id, visible(e))
        return ""
    done = store.load(rec.run_id)
    if done is None or not done.diagnosis or done.status == "stopped":
        return ""
    return f"; {done.status}: {visible(done.diagnosis)}"


class LinkLines:
    """What ``tunedeck logs --follow`` prints on stderr about the links of the logs it follows
    (one run's, or each node's of a deployment): one line when a link is lost, naming the cause,
    and one when it is back (a loss is told once, not at each failed attempt)."""

    def __init__(self) -> None:
        #: the followed logs (by what the lines name them) whose link is lost now
        self.down: set[str] = set()

    def lost(self, who: str, why: str) -> None:
        if who in self.down:
            return
        self.down.add(who)
        print(f"tunedeck logs: {who}: {visible(why)}", file=sys.stderr, flush=True)

    def back(self, who: str) -> None:
        if who in self.down:
            self.down.discard(who)
            print(f"tunedeck logs: {who}: {LINK_BACK_TEXT}", file=sys.stderr, flush=True)


async def _follow(
    host: Host, store: RunStore, rec: RunRecord, log: str, offset: int, args: argparse.Namespace, out: BinaryIO
) -> int:
    """Print new log bytes until the run ends, with :func:`follow_forever`: a lost link is reported
    at once (the remote ``tail`` is reaped in the background once the host is back), followed again
    from the exact byte offset, and its return is reported too (:class:`LinkLines`)."""
    printer = _Printer(offset, raw=args.raw, run_id=rec.run_id if args.json else None, sgr=_colour(out))
    saved = (printer.offset, 0.0)

    def save(force: bool = False) -> None:
        # --resume goes on after the last line printed: a held-back partial line is read again
        nonlocal saved
        if args.resume and printer.offset != saved[0] and (force or time.monotonic() - saved[1] >= 0.25):
            store.update(rec.run_id, log_offset=printer.offset)
            saved = (printer.offset, time.monotonic())

    def emit(chunk: bytes) -> None:
        data = printer.feed(chunk)
        if data:
            out.write(data)
            out.flush()
            save()

    who = f"run {rec.run_id}"
    link = LinkLines()
    stop = asyncio.Event()

    async def watch_end() -> int | None:
        try:
            return await _watch_end(host, rec, END_CHECK_INTERVAL)
        finally:
            stop.set()

    def on_error(e: Exception, attempt: int) -> None:
        log_.warning("logs: %s: %s", who, visible(link_lost_text(e, attempt)))
        link.lost(who, link_lost_text(e, attempt))

    watcher = asyncio.ensure_future(watch_end()) if rec.pid else None
    try:
        offset = await follow_forever(
            host,
            log,
            offset,
            emit,
            stop,
            on_error=on_error,
            on_resume=lambda: link.back(who),
        )
        assert watcher is not None  # nothing else stops the follow
        rc = watcher.result()
        # the rest of the log, from the exact byte the follower stopped at
        rest = await read_log(host, log, offset)
        if rest:
            emit(rest)
        tail = printer.end()
        if tail:
            out.write(tail)
            out.flush()
        save(force=True)
        how = "exited" if rc is None else f"exited with status {rc}"
        print(
            f"tunedeck logs: run {rec.run_id} has {how}{await _cause(host, store, rec)}; stopped following",
            file=sys.stderr,
        )
        return 0
    finally:
        save(force=True)
        if watcher is not None:
            await cancel_and_wait([watcher], f"logs {rec.run_id}: exit watcher")


async def run(args: argparse.Namespace) -> int:
    from tunedeck.commands import _deploy

    dep = _deploy.find(args.run)
    if dep is not None:
        if args.resume:
            return fail("logs", "--resume takes one run's id (a deployment's merged log: --follow)")
        if args.raw:
            return fail("logs", "--raw takes one run's id (a deployment's log is merged from its members' lines)")
        return await _deploy.logs(args, dep)
    if args.node is not None:
        return fail("logs", "--node needs a deployment id")
    if args.raw and args.json:
        return fail("logs", "--raw prints the log's exact bytes; --json prints its lines as JSON: choose one")
    if args.raw and sys.stdout.isatty():
        return fail(
            "logs",
            "--raw writes the log's exact bytes (escape sequences included) and is refused to a terminal: "
            "send it to a file or a pipe (tunedeck logs --raw RUN > run.log)",
        )
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
            printer = _Printer(offset, raw=args.raw, sgr=_colour(out))
            shown = printer.feed(data) + printer.end()
            if args.json:
                out.write(
                    json.dumps(
                        {
                            "run_id": rec.run_id,
                            "target": host.target,
                            "path": log,
                            "offset": offset,
                            "end_offset": offset + len(data),
                            "text": shown.decode(),
                        },
                        ensure_ascii=False,
                    ).encode()
                    + b"\n"
                )
            else:
                out.write(shown)
            out.flush()
            if args.resume:
                store.update(rec.run_id, log_offset=offset + len(data))
            return 0
        if rec.ended_:
            # nothing more will be written: print what is there (as --follow would) and end
            data = await read_log(host, log, offset)
            printer = _Printer(offset, raw=args.raw, run_id=rec.run_id if args.json else None, sgr=_colour(out))
            out.write(printer.feed(data) + printer.end())
            out.flush()
            if args.resume:
                store.update(rec.run_id, log_offset=offset + len(data))
            cause = f": {visible(rec.diagnosis)}" if rec.diagnosis and rec.status != "stopped" else ""
            print(f"tunedeck logs: run {rec.run_id} has ended ({rec.status}{cause}); not following", file=sys.stderr)
            return 0
        return await _follow(host, store, rec, log, offset, args, out)
    except HostError as e:
        return _fail(args, host.target, e.kind, str(e))
    except KeyboardInterrupt:
        return 0  # a closed pipe (`logs -f | head`) is handled once, at the entry point
    finally:
        await host.close()
