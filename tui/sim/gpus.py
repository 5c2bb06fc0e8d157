"""Simulated GPUs: the configuration and the state shared by sim servers and ``tunedeck sim smi``.

Layout of the state directory (``$TUNEDECK_SIM_STATE``, default ``<state_dir>/sim``)::

    gpus.json              optional: {"count": 8, "name": "NVIDIA H200", "memory_total_mib": 143771}
    servers/<pid>.json     one per running sim server, replaced atomically while it runs
    bin/                   the demo host's shims (nvidia-smi, tunedeck, vllm, sglang)

A server file says what that server holds on each GPU::

    {"pid": 123, "create_time": 1.7e9, "engine": "sglang", "updated": 1.7e9,
     "gpus": {"0": {"used_mib": 120000, "util": 97, "procs": [{"name": "sglang::scheduler_TP0",
                                                              "used_mib": 120000}]}}}

Readers ignore files whose process is gone (pid dead or reused), so a
SIGKILLed server never leaves a GPU "busy".
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger(__name__)

#: name -> (memory.total MiB, compute capability, power limit W)
KNOWN_GPUS: dict[str, tuple[int, str, float]] = {
    "NVIDIA H200": (143771, "9.0", 700.0),
    "NVIDIA H100 80GB HBM3": (81559, "9.0", 700.0),
    "NVIDIA A100-SXM4-80GB": (81920, "8.0", 400.0),
    "NVIDIA B200": (183359, "10.0", 1000.0),
    "NVIDIA L40S": (46068, "8.9", 350.0),
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": (97887, "12.0", 600.0),
}
DEFAULT_GPU = "NVIDIA H200"
DEFAULT_COUNT = 8
DRIVER_VERSION = "580.159.04"
CUDA_VERSION = "13.0"
#: memory the driver keeps back (memory.free = total - reserved - used), as on a real H200
RESERVED_MIB = 615
#: PCI bus ids of an HGX baseboard, in nvidia-smi order
BUS_IDS = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
IDLE_POWER_W = 77.0


def state_root() -> Path:
    """``$TUNEDECK_SIM_STATE`` or ``<tunedeck state dir>/sim``."""
    v = os.environ.get("TUNEDECK_SIM_STATE")
    if v:
        return Path(v)
    from tunedeck.util.paths import state_dir

    return state_dir() / "sim"


@dataclass(frozen=True)
class GpuConfig:
    count: int = DEFAULT_COUNT
    name: str = DEFAULT_GPU
    memory_total_mib: int = KNOWN_GPUS[DEFAULT_GPU][0]
    compute_cap: str = "9.0"
    power_limit_w: float = 700.0

    def uuid(self, index: int) -> str:
        import uuid  # only the queries that name uuids need it (and its platform import)

        return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"tunedeck-sim-gpu-{index}"))

    def bus_id(self, index: int) -> str:
        if index < len(BUS_IDS):
            return f"00000000:{BUS_IDS[index]}:00.0"
        return f"00000000:{0x10 + index:02X}:00.0"


class ConfigError(ValueError):
    pass


def load_config(root: Path | None = None) -> GpuConfig:
    """GPU count/name from env (``TUNEDECK_SIM_GPUS``, ``TUNEDECK_SIM_GPU_NAME``,
    ``TUNEDECK_SIM_GPU_MEM_MIB``) over ``<state>/gpus.json`` over 8 x H200."""
    root = root or state_root()
    data: dict[str, Any] = {}
    p = root / "gpus.json"
    if p.is_file():
        try:
            data = json.loads(p.read_text())
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except (OSError, ValueError) as e:
            raise ConfigError(f"{p}: invalid simulator GPU config: {e}") from None
    count = os.environ.get("TUNEDECK_SIM_GPUS", data.get("count", DEFAULT_COUNT))
    name = os.environ.get("TUNEDECK_SIM_GPU_NAME", data.get("name", DEFAULT_GPU))
    try:
        count = int(count)
    except (TypeError, ValueError):
        raise ConfigError(f"TUNEDECK_SIM_GPUS={count!r}: not an integer") from None
    if not 0 <= count <= 64:
        raise ConfigError(f"TUNEDECK_SIM_GPUS={count}: must be between 0 and 64")
    if not isinstance(name, str) or not name or any(c in name for c in ",\n\r"):
        raise ConfigError(f"GPU name {name!r}: must be a non-empty single line without commas")
    known = KNOWN_GPUS.get(name, (KNOWN_GPUS[DEFAULT_GPU][0], "9.0", 700.0))
    mem = os.environ.get("TUNEDECK_SIM_GPU_MEM_MIB", data.get("memory_total_mib", known[0]))
    try:
        mem = int(mem)
    except (TypeError, ValueError):
        raise ConfigError(f"GPU memory {mem!r}: not an integer number of MiB") from None
    if mem < 1024:
        raise ConfigError(f"GPU memory {mem} MiB: too small")
    return GpuConfig(count, name, mem, str(data.get("compute_cap", known[1])), float(known[2]))


# ---------------------------------------------------------------------- server records


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _proc_stat(pid: int) -> tuple[str, float] | None:
    """(state letter, start time as seconds since the epoch) of ``pid``: Linux's ``/proc``
    (the standard library only, so the simulator runs in the host-side runtime); elsewhere
    (a laptop's demo) psutil. None when the process is gone."""
    if sys.platform.startswith("linux"):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            state, ticks = rest[0], int(rest[19])
        except FileNotFoundError:
            return None
        except (OSError, IndexError, ValueError) as e:
            log.warning("sim: cannot read /proc/%d/stat: %s", pid, e)
            return None
        boot = _boot_time()
        return state, (boot + ticks / os.sysconf("SC_CLK_TCK")) if boot is not None else 0.0
    import psutil  # a laptop dependency; no GPU host runs the demo off Linux

    try:
        p = psutil.Process(pid)
        return ("Z" if p.status() == psutil.STATUS_ZOMBIE else "R"), p.create_time()
    except psutil.Error:
        return None


def _proc_create_time(pid: int) -> float | None:
    st = _proc_stat(pid)
    return st[1] if st is not None and st[1] > 0 else None


def servers_dir(root: Path | None = None) -> Path:
    return (root or state_root()) / "servers"


class ServerRecord:
    """Writer side: a sim server publishes what it holds on its GPUs (``pid``: on behalf of
    another process of its own, e.g. a simulated Ray worker; default this one)."""

    def __init__(
        self, engine: str, gpu_indices: list[int], root: Path | None = None, *, pid: int | None = None
    ) -> None:
        self.pid = pid or os.getpid()
        self.engine = engine
        self.gpus = list(gpu_indices)
        self.path = servers_dir(root) / f"{self.pid}.json"
        self.create_time = _proc_create_time(self.pid) or time.time()
        self._last = 0.0
        #: the last write failed (logged once, until a write succeeds again)
        self._failing = False

    def publish(self, per_gpu: dict[int, dict[str, Any]], *, force: bool = True, min_interval: float = 0.25) -> None:
        """Replace the record (temp file + rename: readers never see a torn file)."""
        now = time.monotonic()
        if not force and now - self._last < min_interval:
            return
        self._last = now
        rec = {
            "pid": self.pid,
            "create_time": self.create_time,
            "engine": self.engine,
            "updated": time.time(),
            "gpus": {str(k): v for k, v in per_gpu.items()},
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(rec))
            os.replace(tmp, self.path)
        except OSError as e:
            # the simulated nvidia-smi then shows these GPUs free; said once, not at every step
            if not self._failing:
                log.warning("sim: cannot publish the GPU record %s: %s", self.path, e)
            self._failing = True
        else:
            if self._failing:
                log.info("sim: the GPU record %s is published again", self.path)
            self._failing = False

    def remove(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("sim: cannot remove the GPU record %s (its pid is checked before it counts): %s", self.path, e)


def _alive(rec: dict[str, Any]) -> bool:
    pid = rec.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    st = _proc_stat(pid)
    if st is None:
        return False
    state, ct = st
    want = rec.get("create_time")
    if ct > 0 and isinstance(want, (int, float)) and abs(ct - want) > 2.0:
        return False  # pid reused by another process
    return state not in ("Z", "X")  # a zombie holds no GPU


#: the records this process found unreadable and has said so of
_skipped: set[Path] = set()


def live_servers(root: Path | None = None) -> list[dict[str, Any]]:
    d = servers_dir(root)
    out: list[dict[str, Any]] = []
    try:
        files = sorted(d.glob("*.json"))
    except OSError:
        return out
    for p in files:
        try:
            rec = json.loads(p.read_text())
            if not isinstance(rec, dict):
                raise ValueError(f"a JSON {type(rec).__name__}, not an object")
        except FileNotFoundError:
            continue  # its server removed it since the listing
        except (OSError, ValueError) as e:
            if p not in _skipped:  # a looping nvidia-smi reads the records every interval: said once
                _skipped.add(p)
                log.warning("sim: GPU record %s skipped: %s", p, e)
            continue
        if _alive(rec):
            out.append(rec)
    return out


@dataclass
class GpuReading:
    index: int
    used_mib: int = 0
    util: int = 0
    power_w: float = IDLE_POWER_W
    temp_c: int = 34
    sm_clock: int = 345
    mem_clock: int = 3201
    power_limit_w: float = 0.0  # the enforced limit (0: the board's, from the config)
    procs: list[tuple[int, str, int]] = field(default_factory=list)  # (pid, name, used_mib)


def _gpu_entries(rec: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(GPU index, its entry) of a server record's ``gpus`` map; malformed entries are skipped."""
    g = rec.get("gpus") or {}
    if not isinstance(g, dict):
        return
    for k, v in g.items():
        try:
            i = int(k)
        except ValueError:
            continue
        if isinstance(v, dict):
            yield i, v


def read_gpus(cfg: GpuConfig | None = None, root: Path | None = None) -> list[GpuReading]:
    """Current state of every simulated GPU, from the live servers' records."""
    cfg = cfg or load_config(root)
    gpus = [GpuReading(i) for i in range(cfg.count)]
    for rec in live_servers(root):
        pid = rec["pid"]
        for i, v in _gpu_entries(rec):
            if not 0 <= i < cfg.count:
                continue
            r = gpus[i]
            r.used_mib += int(v.get("used_mib", 0))
            r.util = max(r.util, int(v.get("util", 0)))
            for p in v.get("procs") or []:
                try:
                    r.procs.append((pid, str(p["name"]), int(p["used_mib"])))
                except (KeyError, TypeError, ValueError):
                    continue
    capped = power_cap_fault()
    for r in gpus:
        r.used_mib = min(r.used_mib, cfg.memory_total_mib - RESERVED_MIB)
        busy = r.util > 0
        # deterministic wobble so streams look alive without randomness
        wob = ((int(time.time() * 2) * 7919 + r.index * 104729) % 1000) / 1000.0
        idle = IDLE_POWER_W + (40.0 if r.procs else 0.0)
        limit = cfg.power_limit_w * POWER_CAP_FRACTION if capped else cfg.power_limit_w
        r.power_limit_w = limit
        # what the load would draw unhindered; the SM clock boosts as soon as a context holds the GPU
        want = idle + (cfg.power_limit_w * 0.9 - idle) * r.util / 100.0
        clock = MAX_SM_CLOCK if (busy or r.procs) else 345
        if want > limit * 0.99:
            # the power limit holds the draw at the cap and throttles the clock to fit under it
            clock = max(345, int(clock * (limit * 0.99 - idle) / max(1.0, want - idle)))
            want = limit * 0.99 - wob * 0.5
            r.power_w = round(want, 2)
        else:
            r.power_w = round(min(limit * 0.98, want) + wob * 3.0, 2)
        r.temp_c = int(34 + r.util * 0.28 + (3 if r.procs else 0) + wob)
        r.sm_clock = clock
    return gpus


#: the highest SM clock of the simulated boards (``clocks.max.sm``)
MAX_SM_CLOCK = 1980
#: ``TUNEDECK_SIM_GPU_FAULT=power-cap``: the enforced power limit drops to this share of the board's
POWER_CAP_FRACTION = 0.45


def power_cap_fault() -> bool:
    """``TUNEDECK_SIM_GPU_FAULT=power-cap``: a power limit set too low (e.g. ``nvidia-smi -pl``), so
    under load the GPUs draw at the cap and throttle their SM clock."""
    fault = os.environ.get("TUNEDECK_SIM_GPU_FAULT", "").strip()
    if fault not in ("", "power-cap"):
        raise ConfigError(f"TUNEDECK_SIM_GPU_FAULT={fault!r}: expected power-cap")
    return fault == "power-cap"


def used_by_others(indices: list[int], exclude_pid: int, root: Path | None = None) -> int:
    """MiB that other live sim servers hold on the busiest of ``indices``."""
    worst = 0
    per: dict[int, int] = {}
    for rec in live_servers(root):
        if rec.get("pid") == exclude_pid:
            continue
        for i, v in _gpu_entries(rec):
            try:
                used = int(v.get("used_mib", 0))
            except (ValueError, TypeError):
                continue
            if i in indices:
                per[i] = per.get(i, 0) + used
    if per:
        worst = max(per.values())
    return worst
