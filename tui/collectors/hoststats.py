"""Host collector: CPU %, memory, load average, uptime of the target host.

On the local machine (``host.is_local``) it uses psutil; on a remote host it
runs ONE constant ``/bin/sh -s`` script per sample that reads ``/proc/stat``,
``/proc/meminfo``, ``/proc/loadavg``, ``/proc/uptime`` and the hostname. CPU %
comes from the delta between two consecutive samples, so the first sample
has ``cpu_percent = NA``.

:meth:`HostCollector.sample` raises :class:`~tunedeck.hostops.hosts.HostError`
when the host cannot be read (the UI shows it as the host state).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from tunedeck.hostops.hosts import Host, HostError
from tunedeck.model import NA, HostStats, Num

#: The remote probe (constant text, sent on stdin).
PROC_SCRIPT = r"""
hostname 2>/dev/null || cat /proc/sys/kernel/hostname
echo @@stat
grep '^cpu' /proc/stat
echo @@meminfo
grep -E '^(MemTotal|MemAvailable|MemFree|Buffers|Cached):' /proc/meminfo
echo @@loadavg
cat /proc/loadavg
echo @@uptime
cat /proc/uptime
"""


def parse_proc(text: str) -> dict[str, Any]:
    """Parse the probe's output: hostname, cpu (total, idle) jiffies, cpu count, memory, load, uptime."""
    sections: dict[str, list[str]] = {"host": []}
    cur = "host"
    for line in text.splitlines():
        if line.startswith("@@"):
            cur = line[2:].strip()
            sections[cur] = []
        elif line.strip():
            sections.setdefault(cur, []).append(line)
    out: dict[str, Any] = {"hostname": sections["host"][0].strip() if sections["host"] else ""}
    cpus = 0
    for line in sections.get("stat", []):
        parts = line.split()
        if parts[0] == "cpu":
            vals = [int(v) for v in parts[1:] if v.isdigit()]
            busy_fields = vals[:8]  # user nice system idle iowait irq softirq steal
            idle = sum(vals[3:5])
            out["cpu_jiffies"] = (sum(busy_fields), idle)
        elif parts[0][3:].isdigit():
            cpus += 1
    out["cpu_count"] = cpus or NA
    mem: dict[str, int] = {}
    for line in sections.get("meminfo", []):
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            mem[key.strip()] = int(fields[0]) * 1024  # kB -> bytes
    if "MemTotal" in mem:
        total = mem["MemTotal"]
        avail = mem.get("MemAvailable")
        if avail is None and "MemFree" in mem:
            avail = mem["MemFree"] + mem.get("Buffers", 0) + mem.get("Cached", 0)
        out["mem_total"] = total
        out["mem_used"] = total - avail if avail is not None else NA
    la = sections.get("loadavg", [])
    if la:
        parts = la[0].split()
        try:
            out["load"] = tuple(float(p) for p in parts[:3])
        except ValueError:
            pass
    up = sections.get("uptime", [])
    if up:
        try:
            out["uptime"] = float(up[0].split()[0])
        except (ValueError, IndexError):
            pass
    return out


def cpu_percent(prev: tuple[int, int] | None, cur: tuple[int, int] | None) -> Num:
    """Busy % between two (total, idle) jiffy pairs; NA without a previous sample."""
    if prev is None or cur is None:
        return NA
    dt = cur[0] - prev[0]
    di = cur[1] - prev[1]
    if dt <= 0 or di < 0:
        return NA
    return max(0.0, min(100.0, 100.0 * (dt - di) / dt))


class HostCollector:
    """``await HostCollector(host).sample()`` -> :class:`HostStats`.

    ``use_psutil`` defaults to ``host.is_local``; pass False to read /proc
    through the host layer even for a local host (tests).
    """

    def __init__(self, host: Host, *, use_psutil: bool | None = None, timeout: float = 10.0) -> None:
        self.host = host
        self.use_psutil = host.is_local if use_psutil is None else use_psutil
        self.timeout = timeout
        self._prev: tuple[int, int] | None = None

    async def sample(self) -> HostStats:
        if self.use_psutil:
            return self._sample_psutil()
        return await self._sample_proc()

    def _sample_psutil(self) -> HostStats:
        import psutil

        t = psutil.cpu_times()
        idle = t.idle + getattr(t, "iowait", 0.0)
        total = sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"))
        # scale to integer centiseconds so the same delta arithmetic applies
        cur = (int(total * 100), int(idle * 100))
        pct = cpu_percent(self._prev, cur)
        self._prev = cur
        vm = psutil.virtual_memory()
        try:
            l1, l5, l15 = os.getloadavg()
        except OSError:
            l1 = l5 = l15 = NA  # type: ignore[assignment]
        try:
            uptime: Num = max(0.0, time.time() - psutil.boot_time())
        except Exception:  # noqa: BLE001 - not available on every platform
            uptime = NA
        return HostStats(
            hostname=socket.gethostname(),
            cpu_percent=pct,
            cpu_count=psutil.cpu_count() or NA,
            mem_used=vm.total - vm.available,
            mem_total=vm.total,
            load1=l1,
            load5=l5,
            load15=l15,
            uptime=uptime,
            time=time.time(),
        )

    async def _sample_proc(self) -> HostStats:
        r = await self.host.run_script(PROC_SCRIPT, timeout=self.timeout)
        if r.lost:
            raise HostError("connection-lost", "link lost while reading /proc", target=self.host.target)
        if r.timed_out:
            raise HostError("timeout", f"reading /proc took over {self.timeout:g} s", target=self.host.target)
        if "@@stat" not in r.stdout:
            msg = (r.stderr.strip().splitlines() or [f"exit status {r.exit_status}"])[-1]
            raise HostError("error", f"cannot read /proc: {msg}", target=self.host.target)
        p = parse_proc(r.stdout)
        cur = p.get("cpu_jiffies")
        pct = cpu_percent(self._prev, cur)
        self._prev = cur
        load = p.get("load", (NA, NA, NA))
        return HostStats(
            hostname=p["hostname"] or self.host.target,
            cpu_percent=pct,
            cpu_count=p.get("cpu_count", NA),
            mem_used=p.get("mem_used", NA),
            mem_total=p.get("mem_total", NA),
            load1=load[0],
            load5=load[1],
            load15=load[2],
            uptime=p.get("uptime", NA),
            time=time.time(),
        )
