"""Client health: this process's CPU time, event-loop lateness, and the machine's load and steal.

``client_bound``: the client itself was the limit; ``machine_busy``: other load on the
machine delayed it. Standard library only, Python >= 3.9.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from tunedeck.bench import metrics
from tunedeck.util.aio import cancel_and_wait

log = logging.getLogger(__name__)

_pc = time.perf_counter


#: a client process above this CPU (cores, timed-phase mean) is the limit on its own
CPU_BOUND_FRACTION = 0.85


#: loop lag p99 above this means timestamps were late; the client's own CPU says whose fault
LAG_BOUND_MS = 5.0


#: loop lag counts as the client's own doing when the client used at least this much CPU
CPU_BUSY_FRACTION = 0.5


#: machine steal above this fraction of CPU time, or load above the core count: machine busy
STEAL_BUSY_FRACTION = 0.05


def read_cpu_times() -> Optional[Tuple[float, float, float]]:
    """(total, idle + iowait, steal) jiffies of the whole machine from ``/proc/stat``; None off Linux."""
    try:
        with open("/proc/stat", "rb") as f:
            line = f.readline()
    except OSError:
        return None
    parts = line.split()
    if not parts or parts[0] != b"cpu":
        return None
    v = [float(x) for x in parts[1:]]
    v += [0.0] * (8 - len(v))
    # user nice system idle iowait irq softirq steal (guest time is already in user)
    total = sum(v[:8])
    return total, v[3] + v[4], v[7]


def read_load1() -> Optional[float]:
    try:
        with open("/proc/loadavg", "rb") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class ClientMonitor:
    """This process's CPU (per 1 s), event-loop lateness (per 50 ms tick), the machine's load and steal."""

    def __init__(self) -> None:
        self.cpu: List[float] = []
        self.lag: List[float] = []
        self.load1: List[float] = []
        self._tasks: "List[asyncio.Task[Any]]" = []
        self.last_cpu = 0.0
        self.last_lag_ms = 0.0
        self.last_load1: Optional[float] = None
        self.last_steal = 0.0
        self._cpu0 = (time.process_time(), _pc())
        self._stat0 = read_cpu_times()
        self._stopped: Optional[Tuple[float, float]] = None

    def start(self) -> None:
        self._cpu0 = (time.process_time(), _pc())
        self._stat0 = read_cpu_times()
        self._tasks = [asyncio.ensure_future(self._cpu_loop()), asyncio.ensure_future(self._lag_loop())]

    async def _cpu_loop(self) -> None:
        prev = time.process_time()
        pt = _pc()
        stat_prev = read_cpu_times()
        while True:
            await asyncio.sleep(1.0)
            now = time.process_time()
            t = _pc()
            self.last_cpu = (now - prev) / max(1e-6, t - pt)
            self.cpu.append(self.last_cpu)
            prev, pt = now, t
            ld = read_load1()
            if ld is not None:
                self.last_load1 = ld
                self.load1.append(ld)
            st = read_cpu_times()
            if st is not None and stat_prev is not None and st[0] > stat_prev[0]:
                self.last_steal = (st[2] - stat_prev[2]) / (st[0] - stat_prev[0])
            stat_prev = st

    async def _lag_loop(self) -> None:
        step = 0.05
        while True:
            t = _pc()
            await asyncio.sleep(step)
            lag = max(0.0, _pc() - t - step)
            self.lag.append(lag)
            self.last_lag_ms = lag * 1000

    async def stop(self) -> Dict[str, Any]:
        self._stopped = (time.process_time(), _pc())
        await cancel_and_wait(self._tasks, "client monitor")
        return self.report()

    def report(self) -> Dict[str, Any]:
        c1, t1 = self._stopped or (time.process_time(), _pc())
        c0, t0 = self._cpu0
        wall = t1 - t0
        st1 = read_cpu_times()
        machine: Dict[str, Any] = {
            "ncpu": os.cpu_count() or 1,
            "load1_max": max(self.load1) if self.load1 else read_load1(),
        }
        if st1 is not None and self._stat0 is not None and st1[0] > self._stat0[0]:
            dt = st1[0] - self._stat0[0]
            machine["busy"] = 1.0 - (st1[1] - self._stat0[1]) / dt
            machine["steal"] = (st1[2] - self._stat0[2]) / dt
        return {
            "cpu": list(self.cpu),
            "cpu_avg": (c1 - c0) / wall if wall > 0.05 else 0.0,
            "cpu_seconds": c1 - c0,
            "lag_p99_ms": metrics.percentile(self.lag, 99) * 1000 if self.lag else 0.0,
            "lag_max_ms": max(self.lag) * 1000 if self.lag else 0.0,
            "machine": machine,
        }


def client_health(reports: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """Merge worker reports: ``client_bound`` (the client was the limit) and ``machine_busy`` (other load)."""
    means = [float(r.get("cpu_avg") or 0.0) for r in reports]
    maxes = [max(r["cpu"]) if r.get("cpu") else float(r.get("cpu_avg") or 0.0) for r in reports]
    lag99 = max((float(r.get("lag_p99_ms") or 0.0) for r in reports), default=0.0)
    lagmax = max((float(r.get("lag_max_ms") or 0.0) for r in reports), default=0.0)
    cpu_mean = max(means) if means else 0.0
    machines = [r.get("machine") or {} for r in reports]
    ncpu = max((int(m.get("ncpu") or 1) for m in machines), default=os.cpu_count() or 1)
    loads = [float(m["load1_max"]) for m in machines if isinstance(m.get("load1_max"), (int, float))]
    steals = [float(m["steal"]) for m in machines if isinstance(m.get("steal"), (int, float))]
    busys = [float(m["busy"]) for m in machines if isinstance(m.get("busy"), (int, float))]
    load1 = max(loads) if loads else None
    steal = max(steals) if steals else None
    lagging = lag99 > LAG_BOUND_MS
    reasons: List[str] = []
    if cpu_mean > CPU_BOUND_FRACTION:
        reasons.append(f"a client process used {cpu_mean:.2f} of a core")
    elif lagging and cpu_mean >= CPU_BUSY_FRACTION:
        reasons.append(f"loop lag p99 {lag99:.1f} ms with the client at {cpu_mean:.2f} of a core")
    client_bound = bool(reasons)
    busy_reasons: List[str] = []
    if steal is not None and steal > STEAL_BUSY_FRACTION:
        busy_reasons.append(f"steal {steal * 100:.0f} %")
    if load1 is not None and load1 > ncpu:
        busy_reasons.append(f"load {load1:.1f} on {ncpu} cores")
    if lagging and not client_bound:
        busy_reasons.append(f"loop lag p99 {lag99:.1f} ms while the client used {cpu_mean:.2f} of a core")
    return {
        "workers": len(reports),
        "cpu_mean": cpu_mean,
        "cpu_max": max(maxes) if maxes else 0.0,
        "cpu_per_worker": means,
        "cpu_seconds": sum(float(r.get("cpu_seconds") or 0.0) for r in reports),
        "loop_lag_p99_ms": lag99,
        "loop_lag_max_ms": lagmax,
        "machine_ncpu": ncpu,
        "machine_load1_max": load1,
        "machine_steal": steal,
        "machine_busy_frac": max(busys) if busys else None,
        "client_bound": client_bound,
        "client_bound_reason": "; ".join(reasons),
        "machine_busy": bool(busy_reasons),
        "machine_busy_reason": "; ".join(busy_reasons),
    }
