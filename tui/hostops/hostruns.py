"""The runs on a host, found from their folders (``${TUNEDECK_HOME}/runs/<run_id>/``, see
:mod:`tunedeck.hostops.launcher`): listed alive or not (:class:`HostRun`), merged into the local records
with the ended ones settled from their own logs (:func:`reattach`), and picked by id or prefix."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Sequence

from tunedeck.hostops.hosts import Host, HostError, target_name
from tunedeck.hostops.hostscripts import LIST_SCRIPT, RUNS_BASE, base_line
from tunedeck.hostops.reread import settle
from tunedeck.hostops.runstore import LAUNCHING, STARTING, STOPPING, RunRecord, RunStore
from tunedeck.util.safety import visible

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostRun:
    """A run folder found on a host."""

    run_id: str
    pid: int | None
    starttime: str | None
    alive: bool
    rc: int | None
    log_size: int
    run_dir: str
    meta: dict[str, object]

    @property
    def log_path(self) -> str:
        return f"{self.run_dir}/log"


async def list_host_runs(host: Host, kind: str = "runs") -> list[HostRun]:
    """Run folders on the host, alive or not (alive = pid with the recorded start time);
    ``kind`` ``bench`` or ``ab`` lists the host-side jobs instead of the servers."""
    script = LIST_SCRIPT if kind == "runs" else LIST_SCRIPT.replace(RUNS_BASE, base_line(kind), 1)
    r = await host.run_script(script, timeout=60)
    if r.lost or r.timed_out:
        raise HostError("connection-lost" if r.lost else "timeout", f"listing runs failed: {r.stderr.strip()}")
    runs: list[HostRun] = []
    for line in r.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) != 9 or parts[0] != "RUN":
            continue
        _, rid, pid, st, alive, rc, size, d, meta = parts
        try:
            m = json.loads(meta) if meta else {}
        except ValueError:
            m = {}
        runs.append(
            HostRun(
                rid,
                int(pid) if pid.isdigit() else None,
                st or None,
                alive == "1",
                int(rc) if rc.lstrip("-").isdigit() else None,
                int(size) if size.isdigit() else 0,
                d,
                m if isinstance(m, dict) else {},
            )
        )
    runs.sort(key=lambda h: h.run_id)
    return runs


async def find_host_run(host: Host, run_id: str) -> HostRun | None:
    for h in await list_host_runs(host):
        if h.run_id == run_id:
            return h
    return None


async def reattach(host: Host, store: RunStore | None = None) -> list[RunRecord]:
    """Find the runs on ``host`` (run folders), merge them into local records and return
    the ones still alive (status kept, or ``starting`` for a run with no local record).

    Every run is re-read from its process, whoever follows it: one whose process has ended
    since it was last seen (ready or not) is settled from its own log, ``failed`` with the
    cause (:mod:`tunedeck.hostops.reread`), or ``stopped`` when a stop was asked for."""
    store = store or RunStore()
    tgt = target_name(host)
    out: list[RunRecord] = []
    runs = await list_host_runs(host)
    # one record file per run folder on the host, dead ones too: read in a thread, not on the
    # event loop that a dashboard re-reads them from every few seconds
    known = await asyncio.to_thread(lambda: [store.load(h.run_id) for h in runs])
    for h, rec in zip(runs, known):
        new = rec is None
        if rec is None:
            meta = h.meta
            argv: list[str] = []
            rec = RunRecord(
                run_id=h.run_id,
                target=tgt,
                argv=argv,
                engine=str(meta.get("engine") or "other"),
                port=meta.get("port") if isinstance(meta.get("port"), int) else None,  # type: ignore[arg-type]
                profile=meta.get("profile") if isinstance(meta.get("profile"), str) else None,  # type: ignore[arg-type]
                run_dir=h.run_dir,
                status=STARTING,
                created=float(meta.get("created") or 0.0),  # type: ignore[arg-type]
                pid=h.pid,
                starttime=h.starttime,
                rc=h.rc,
            )
        elif rec.target != tgt:
            continue
        changed = new
        if not h.alive and not rec.ended_:
            status, diag, proof = await settle(
                host, h.run_dir, rec.engine, h.rc, stopping=rec.status == STOPPING, size=h.log_size
            )
            prev = rec.status
            rec.status, rec.rc, rec.ended = status, h.rc, time.time()
            rec.diagnosis, rec.proof = diag, proof
            rec.timeline.append({"t": rec.ended, "event": status, "rc": h.rc, "diagnosis": diag, "was": prev})
            if prev not in (STARTING, LAUNCHING, STOPPING):
                _log.warning("run %s on %s was %s and has ended: %s", rec.run_id, tgt, prev, visible(diag))
            changed = True
        if rec.run_dir is None:
            rec.run_dir = h.run_dir
            changed = True
        if changed:
            store.save(rec)
        if h.alive:
            out.append(rec)
    return out


def pick_run(records: Sequence[RunRecord], run: str | None) -> RunRecord | None:
    """A run by id or unique id prefix; without ``run`` the most recent one."""
    if run is None:
        return records[-1] if records else None
    exact = [r for r in records if r.run_id == run]
    if exact:
        return exact[0]
    pref = [r for r in records if r.run_id.startswith(run)]
    return pref[-1] if len(pref) >= 1 else None


__all__ = ["HostRun", "find_host_run", "list_host_runs", "pick_run", "reattach"]
