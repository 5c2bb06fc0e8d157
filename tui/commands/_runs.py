"""Helpers shared by the launch/stop/logs/runs commands."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from tunedeck.hostops.hostruns import pick_run
from tunedeck.hostops.hosts import Host, HostError, target_name
from tunedeck.hostops.runstore import RunRecord, RunStore
from tunedeck.services.journal import reread_runs
from tunedeck.services.targets import get_host
from tunedeck.util.safety import UnsafeInput, visible


def host_from_args(args: argparse.Namespace) -> Host:
    return get_host(args.host, demo=args.demo)


def err(cmd: str, msg: str) -> int:
    print(f"tunedeck {cmd}: {visible(msg)}", file=sys.stderr)
    return 1


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


__all__ = ["HostError", "UnsafeInput", "age", "choose", "err", "host_from_args", "live_records", "records_for"]
