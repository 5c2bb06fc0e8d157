"""Stopping a run on a host (docs/reliability.md 2.2): the PID-reuse guard, TERM to its process
group and to the processes marked with its id, KILL after the grace period, then the wait until
the GPUs no longer list its processes; and the checks a stop and the tracker make of a run's
process (alive, its exit status)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from tunedeck.hostops.gpuquery import compute_apps, gpu_memory_used
from tunedeck.hostops.hostruns import find_host_run
from tunedeck.hostops.hosts import Host, HostError, RunResult, target_name
from tunedeck.hostops.hostscripts import STOP_SCRIPT
from tunedeck.hostops.runstore import EXITED, STALE, STOPPED, STOPPING, UNKNOWN, RunRecord, RunStore
from tunedeck.util.safety import visible

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StopResult:
    """Outcome of :func:`stop_run`. ``state``: stopped | exited | stale | stuck | error."""

    state: str
    message: str
    pids: tuple[int, ...] = ()
    remaining: tuple[str, ...] = ()
    gpu_freed_mib: float | None = None
    gpu_released: bool | None = None
    escalated: bool = False


async def read_rc(host: Host, run_dir: str) -> int | None:
    r = await host.run(["cat", "--", f"{run_dir}/rc"], timeout=15)
    s = r.stdout.strip()
    return int(s) if r.ok and s.lstrip("-").isdigit() else None


async def process_alive(host: Host, pid: int, starttime: str | None) -> bool:
    """True while ``pid`` exists with the recorded start time and is not a zombie (an exited
    wrapper nobody reaped yet is over)."""
    script = (
        'p="$1"; want="$2"; [ -r "/proc/$p/stat" ] || { echo DEAD; exit 0; }\n'
        "rest=$(sed 's/.*) //' \"/proc/$p/stat\")\n"
        "cur=$(echo \"$rest\" | cut -d' ' -f20); st=$(echo \"$rest\" | cut -d' ' -f1)\n"
        '[ "$cur" = "$want" ] && [ "$st" != Z ] && echo ALIVE || echo DEAD\n'
    )
    r = await host.run_script(script, [str(int(pid)), starttime or ""], timeout=15)
    if r.lost or r.timed_out:
        raise HostError("connection-lost" if r.lost else "timeout", "checking the server process failed")
    return "ALIVE" in r.stdout


async def signal_folder(host: Host, run_dir: str, rid: str, grace: float) -> tuple[str, str, RunResult]:
    """TERM the process group of a run folder's wrapper (and its environ-marker matches), KILL
    after ``grace`` s; returns (state, message, raw result) with state stopped|exited|stale|stuck."""
    g = max(0, round(grace))
    r = await host.run_script(STOP_SCRIPT, [run_dir, str(g), rid], timeout=g + 30)
    state, message = "error", ""
    for line in r.stdout.splitlines():
        if line.startswith("STATE "):
            parts = line.split(None, 2)
            state = parts[1].lower()
            message = parts[2] if len(parts) > 2 else ""
    return state, message, r


async def stop_run(
    host: Host,
    rec: RunRecord,
    *,
    grace: float = 30.0,
    gpu_wait: float = 60.0,
    store: RunStore | None = None,
    poll: float = 0.5,
) -> StopResult:
    """Stop a run (reliability.md 2.2): PID-reuse guard, TERM to the group and the
    environ-marker matches, KILL after ``grace``, then wait until the GPUs no longer
    list the run's processes (``gpu_wait`` bound)."""
    store = store or RunStore()
    if not rec.run_dir:
        h = await find_host_run(host, rec.run_id)
        if h is None:
            return StopResult("error", f"run {rec.run_id}: no run folder on {target_name(host)}")
        rec.run_dir = h.run_dir
    store.update(rec.run_id, status=STOPPING) if store.load(rec.run_id) else None
    before = await gpu_memory_used(host)
    state, message, r = await signal_folder(host, rec.run_dir, rec.run_id, grace)
    if r.lost or r.timed_out or (r.exit_status not in (0, None) and "STATE" not in r.stdout):
        msg = r.stderr.strip() or ("connection lost" if r.lost else "timed out" if r.timed_out else "stop failed")
        store.update(rec.run_id, status=UNKNOWN) if store.load(rec.run_id) else None
        return StopResult("error", f"run {rec.run_id}: {msg}")
    pids: list[int] = []
    remaining: list[str] = []
    for line in r.stdout.splitlines():
        if line.startswith("PIDS"):
            pids = [int(x) for x in line.split()[1:] if x.isdigit()]
        elif line.startswith("WARN "):
            _log.warning("stop %s on %s: %s", rec.run_id, target_name(host), visible(line[5:]))
        elif line.startswith("REMAIN "):
            remaining.append(line[7:])
    escalated = message == "KILL"
    released: bool | None = None
    if state in ("stopped", "exited"):
        released = await _wait_gpu_release(host, set(pids) | ({rec.pid} if rec.pid else set()), gpu_wait, poll)
    after = await gpu_memory_used(host) if before is not None else None
    freed = None
    if before is not None and after is not None:
        freed = sum(before.values()) - sum(after.values())
    now = time.time()
    status = {"stopped": STOPPED, "exited": EXITED, "stale": STALE}.get(state, UNKNOWN)
    rc = await read_rc(host, rec.run_dir) if state in ("stopped", "exited") else None
    upd = store.load(rec.run_id)
    if upd is not None:
        upd.status = status
        upd.rc = rc
        upd.ended = upd.ended or now
        upd.timeline.append(
            {"t": now, "event": "stopped" if status == STOPPED else state, "how": message, "gpu_released": released}
        )
        store.save(upd)
    if state == "stopped":
        txt = f"run {rec.run_id} stopped ({'killed after the grace period' if escalated else 'TERM'})"
        if released is False:
            txt += f"; the GPUs still list its processes after {gpu_wait:g} s"
    elif state == "exited":
        txt = f"run {rec.run_id} had already exited (rc {message or '?'})"
    elif state == "stale":
        txt = f"run {rec.run_id}: {message or 'stale'}; nothing was killed"
    elif state == "stuck":
        txt = f"run {rec.run_id}: processes remain after KILL (D state?): {', '.join(remaining)}"
    else:
        txt = f"run {rec.run_id}: unexpected stop output: {r.stdout.strip()[:200]} {r.stderr.strip()[:200]}"
    return StopResult(state, txt, tuple(pids), tuple(remaining), freed, released, escalated)


async def _wait_gpu_release(host: Host, pids: set[int], bound: float, poll: float) -> bool | None:
    deadline = time.monotonic() + bound
    while True:
        apps = await compute_apps(host)
        if apps is None:
            return None  # no nvidia-smi: nothing to confirm
        if not any(p in pids for p, _, _ in apps):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(poll)


__all__ = ["StopResult", "process_alive", "read_rc", "signal_folder", "stop_run"]
