"""Helpers shared by the launch/stop/logs/runs commands."""

from __future__ import annotations

import argparse
from typing import Sequence

from tunedeck.commands._cli import fail
from tunedeck.hostops.hostruns import pick_run
from tunedeck.hostops.hosts import Host, HostError, target_name
from tunedeck.hostops.runstore import RunRecord, RunStore
from tunedeck.services.journal import reread_runs
from tunedeck.services.targets import get_host
from tunedeck.util.safety import UnsafeInput

#: the exit status of ``launch --wait`` (a run or a deployment) by the final state of its startup;
#: any other state (failed, stopped) is 1
WAIT_EXIT = {"ready": 0, "starting": 3, "stalled": 4}


def wait_ended(args: argparse.Namespace, state: str, what: str, ready: str, stop: str, why: str = "") -> int | None:
    """The exit status of ``launch --wait`` (``args``) for ``what`` (a run or a deployment) whose
    startup is ready (``ready`` says how; not printed with --json) or still starting at --timeout
    (``why`` adds where it is, ``stop`` is the command that ends it); None when it ended otherwise,
    for the caller to report."""
    if state == "ready":
        if not args.json:
            print(f"{what} ready {ready}")
        return WAIT_EXIT[state]
    if state == "starting":
        msg = f"{what} not ready after {args.timeout:g} s{why}; it keeps running ({stop} to end it)"
        return fail("launch", msg, WAIT_EXIT[state])
    return None


def host_from_args(args: argparse.Namespace) -> Host:
    return get_host(args.host, demo=args.demo)


async def records_for(host: Host, store: RunStore, *, sync: bool = True) -> list[RunRecord]:
    """Local records for this host, after merging what the host's run folders say.
    A run whose process is alive is never shown as ended: a record that says
    "failed" while its process runs on (an older tunedeck wrote it) reads "stalled"."""
    if sync:
        await live_records(host, store)
    return store.all(target_name(host))


async def live_records(host: Host, store: RunStore) -> list[RunRecord]:
    """The runs whose process is alive on ``host`` now, whatever their recorded state."""
    from tunedeck.hostops.startupstate import STALLED

    out = []
    for rec in await reread_runs(host, store):
        if rec.ended_:
            rec.status = STALLED
            rec.diagnosis = f"{rec.diagnosis or 'no progress'}; the process is still running"
            store.save(rec)
        out.append(rec)
    return out


def choose(records: Sequence[RunRecord], run: str | None, *, alive_first: bool = False) -> RunRecord | None:
    if run is None and alive_first:
        live = [r for r in records if not r.ended_]
        if live:
            return live[-1]
    return pick_run(records, run)


def age(seconds: float) -> str:
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


__all__ = [
    "WAIT_EXIT",
    "HostError",
    "UnsafeInput",
    "age",
    "choose",
    "host_from_args",
    "live_records",
    "records_for",
    "wait_ended",
]
