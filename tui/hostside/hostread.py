"""What the host sampler reads without starting a process: the host's figures from ``/proc``
(:func:`read_host`) and the run folders under ``${TUNEDECK_HOME}`` (:func:`list_runs`, alive by
the recorded start time of their wrapper). Standard library only, Python >= 3.9."""

from __future__ import annotations

import json
import os
import socket
from typing import Any, Dict, List, Optional


def read_host(proc: str = "/proc") -> Dict[str, Any]:
    """CPU jiffies, memory, load and uptime from ``/proc`` (no process started)."""
    out: Dict[str, Any] = {"hostname": socket.gethostname()}
    cpus = 0
    with open(f"{proc}/stat", encoding="ascii", errors="replace") as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            parts = line.split()
            if parts[0] == "cpu":
                vals = [int(v) for v in parts[1:] if v.isdigit()]
                out["cpu"] = [sum(vals[:8]), sum(vals[3:5])]
            elif parts[0][3:].isdigit():
                cpus += 1
    out["cpus"] = cpus or None
    mem: Dict[str, int] = {}
    with open(f"{proc}/meminfo", encoding="ascii", errors="replace") as f:
        for line in f:
            key, _, rest = line.partition(":")
            fields = rest.split()
            if fields and fields[0].isdigit():
                mem[key.strip()] = int(fields[0]) * 1024
    if "MemTotal" in mem:
        avail = mem.get("MemAvailable")
        if avail is None and "MemFree" in mem:
            avail = mem["MemFree"] + mem.get("Buffers", 0) + mem.get("Cached", 0)
        out["mem_total"] = mem["MemTotal"]
        out["mem_used"] = mem["MemTotal"] - avail if avail is not None else None
    with open(f"{proc}/loadavg", encoding="ascii") as f:
        out["load"] = [float(x) for x in f.read().split()[:3]]
    with open(f"{proc}/uptime", encoding="ascii") as f:
        out["uptime"] = float(f.read().split()[0])
    return out


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def proc_starttime(pid: int) -> Optional[str]:
    """Field 22 of ``/proc/PID/stat`` (None when gone, a zombie or dead)."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    rest = text.rsplit(")", 1)[-1].split()
    if len(rest) < 20 or rest[0] in ("Z", "X"):
        return None
    return rest[19]


def list_runs(base: str, cache: Optional[Dict[str, Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """The run folders under ``base`` like ``tunedeck.hostops.hostruns.list_host_runs`` sees them.

    ``cache``: entries of runs that ended (an ``rc`` and no live process) are kept there and not
    read again, so a folder full of old runs costs one ``listdir`` a sample."""
    try:
        names = sorted(os.listdir(base))
    except FileNotFoundError:
        return []
    out = []
    for rid in names:
        if cache is not None and rid in cache:
            out.append(cache[rid])
            continue
        d = os.path.join(base, rid)
        if not os.path.isfile(os.path.join(d, "run.sh")):
            continue
        pid_text = (_read(os.path.join(d, "pid")) or "").strip()
        st = (_read(os.path.join(d, "starttime")) or "").strip()
        rc_text = (_read(os.path.join(d, "rc")) or "").strip()
        pid = int(pid_text) if pid_text.isdigit() else None
        alive = bool(pid and st and proc_starttime(pid) == st)
        try:
            size = os.path.getsize(os.path.join(d, "log"))
        except OSError:
            size = 0
        meta: Any = {}
        raw = _read(os.path.join(d, "meta.json"))
        if raw:
            try:
                meta = json.loads(raw)
            except ValueError:
                meta = {}
        entry = {
            "id": rid,
            "pid": pid,
            "starttime": st or None,
            "alive": alive,
            "rc": int(rc_text) if rc_text.lstrip("-").isdigit() else None,
            "log_size": size,
            "dir": d,
            "meta": meta if isinstance(meta, dict) else {},
        }
        out.append(entry)
        if cache is not None and not alive and entry["rc"] is not None:
            cache[rid] = entry
    if cache is not None:
        for gone in set(cache) - set(names):
            del cache[gone]
    return out


__all__ = ["list_runs", "proc_starttime", "read_host"]
