"""A start-up's states and how they read: the stall option (``--stall-after``), the one line a
terminal shows (:func:`format_progress`), GPU memory in words, and the status screen's server rows
agreeing with the run records (:func:`reconcile_servers`).

What :class:`tunedeck.hostops.tracker.StartupTracker` decides is in its module; this one reads it."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from tunedeck.hostops.runstore import EXITED, FAILED, READY, STARTING, STOPPED, STOPPING, RunStore
from tunedeck.model import ServerStats, StartupProgress

#: a live run that stopped progressing (never "failed": it still holds its GPUs)
STALLED = "stalled"
STALL_ACTIONS = ("warn", "stop")
#: states after which the startup is over (READY too, for the wait loop)
TERMINAL = frozenset({READY, FAILED, EXITED, STOPPED})


def parse_stall_after(text: str) -> tuple[float, str]:
    """``--stall-after`` value: ``S``, ``ACTION`` or ``S:ACTION`` (ACTION ``warn`` or ``stop``).
    Raises ValueError with a one-line message."""
    secs, action = 300.0, "warn"
    t = str(text).strip().lower()
    head, _, tail = t.partition(":")
    for part in (head, tail) if tail else (head,):
        if part in STALL_ACTIONS:
            action = part
            continue
        try:
            secs = float(part.rstrip("s"))
        except ValueError:
            raise ValueError(f"{text!r}: expected seconds, warn|stop, or seconds:warn|stop (e.g. 300:stop)") from None
        if not secs > 0 or secs != secs or secs == float("inf"):
            raise ValueError(f"{text!r}: the seconds must be a positive number")
    return secs, action


def describe_gpu_memory(mem: Sequence[float]) -> str:
    """'GPU 0: 61.2 GiB, GPU 1: 61.0 GiB', or 'GPU 0-7: 124.5 GiB each' when they all read the same (MiB in)."""
    shown = [f"{m / 1024:.1f}" for m in mem]
    if len(shown) > 2 and len(set(shown)) == 1:
        return f"GPU 0-{len(shown) - 1}: {shown[0]} GiB each"
    return ", ".join(f"GPU {i}: {g} GiB" for i, g in enumerate(shown))


#: run-record states that say more than a /health probe while the server does not answer 200
_RECORD_STATES = {"launching": STARTING, STARTING: STARTING, STALLED: STALLED, STOPPING: STOPPING, FAILED: FAILED}


def reconcile_servers(servers: Sequence[ServerStats], store: RunStore | None = None) -> tuple[ServerStats, ...]:
    """The status screen's server rows, agreeing with the run view and ``tunedeck runs``:
    a server tunedeck launched whose ``/health`` does not answer 200 shows its run's
    state (starting, stalled, stopping, failed: a re-read found its process dead) and
    diagnosis instead of a bare "down"."""
    store = store or RunStore()
    out = []
    for s in servers:
        rec = store.load(s.run_id) if s.run_id else None
        state = _RECORD_STATES.get(rec.status) if rec is not None else None
        if state is None or s.state == READY or rec is None:
            out.append(s)
            continue
        out.append(replace(s, state=state, message=rec.diagnosis or s.message))
    return tuple(out)


def progress_message(state: str, diag: str | None, describe: str) -> str:
    if state == READY:
        return "ready"
    if state == STOPPED:
        return "stopped (by you)"
    if state == STALLED:
        return diag or "stalled"
    if state in (FAILED, EXITED):
        return f"failed: {diag}" if diag else state
    return diag or describe


def format_progress(p: StartupProgress) -> str:
    """One line for a terminal: '[ 42%] weight-loading 14/37  elapsed 1m02s  ETA 1m30s'."""

    def dur(s: float | None) -> str:
        if s is None:
            return "?"
        s = round(s)
        return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"

    parts = [f"[{p.fraction * 100:3.0f}%]", p.phase or "starting"]
    if p.phase_label:
        parts.append(f"({p.phase_label})")
    if p.phase_total:
        parts.append(f"{p.phase_n}/{p.phase_total}")
    elif p.phase_progress is not None and p.state != READY:
        parts.append(f"{p.phase_progress * 100:.0f}%")
    parts.append(f" elapsed {dur(p.elapsed)}")
    if p.state == STARTING:
        parts.append(f" ETA {dur(p.eta)}")
    if p.gpu_memory:
        parts.append(" GPU " + "/".join(f"{m / 1024:.1f}" for m in p.gpu_memory) + " GiB")
    if p.stalled:
        parts.append(f" STALLED {dur(p.stalled_for)}")
    if p.diagnosis:
        parts.append(f" — {p.diagnosis}")
    return " ".join(parts)


__all__ = [
    "STALLED",
    "STALL_ACTIONS",
    "TERMINAL",
    "describe_gpu_memory",
    "format_progress",
    "parse_stall_after",
    "progress_message",
    "reconcile_servers",
]
