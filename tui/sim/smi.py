"""``tunedeck sim smi``: an ``nvidia-smi`` that answers from the simulator's GPU state.

Forms (output byte-compatible with a real H200 host, driver 580):
``--query-gpu=F,... --format=csv[,noheader][,nounits]``, ``--query-compute-apps=F,...``,
``-l S`` / ``-lms MS`` loops, ``-i IDS``, ``-L``, ``topo -m``, ``--version`` and the plain table.

Faults for tests: ``TUNEDECK_SIM_SMI_FAULT`` = ``nodriver`` (exit 9), ``nvml-missing`` (12),
``gpu-lost`` (15), ``mismatch`` (18), ``hang`` (never returns), ``na`` (``[N/A]`` readings).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, Sequence, TextIO

from tunedeck.sim.gpus import (
    CUDA_VERSION,
    DRIVER_VERSION,
    MAX_SM_CLOCK,
    RESERVED_MIB,
    ConfigError,
    GpuConfig,
    GpuReading,
    load_config,
    read_gpus,
)

NA = "[N/A]"

FAULTS: dict[str, tuple[int, str]] = {
    "nodriver": (
        9,
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n",
    ),
    "nvml-missing": (
        12,
        "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the "
        "NVIDIA Display Driver is properly installed and present in your system.\n"
        "Please also try adding directory that contains libnvidia-ml.so to your system PATH.\n",
    ),
    "gpu-lost": (
        15,
        "Unable to determine the device handle for GPU0000:18:00.0: GPU is lost.  "
        "Reboot the system to recover this GPU\n",
    ),
    "mismatch": (18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.173\n"),
}

# field -> (header, unit or "", getter(cfg, reading) -> str, value is a reading that "na" hides)
Getter = Callable[[GpuConfig, GpuReading], str]


def _f(v: float) -> str:
    return f"{v:.2f}"


GPU_FIELDS: dict[str, tuple[str, str, Getter, bool]] = {
    "index": ("index", "", lambda c, r: str(r.index), False),
    "count": ("count", "", lambda c, r: str(c.count), False),
    "uuid": ("uuid", "", lambda c, r: c.uuid(r.index), False),
    "name": ("name", "", lambda c, r: c.name, False),
    "serial": ("serial", "", lambda c, r: f"16540240{r.index:05d}", False),
    "pci.bus_id": ("pci.bus_id", "", lambda c, r: c.bus_id(r.index), False),
    "driver_version": ("driver_version", "", lambda c, r: DRIVER_VERSION, False),
    "compute_cap": ("compute_cap", "", lambda c, r: c.compute_cap, False),
    "pstate": ("pstate", "", lambda c, r: "P0", False),
    "persistence_mode": ("persistence_mode", "", lambda c, r: "Enabled", False),
    "fan.speed": ("fan.speed", "%", lambda c, r: NA, False),
    "utilization.gpu": ("utilization.gpu", "%", lambda c, r: str(r.util), True),
    "utilization.memory": ("utilization.memory", "%", lambda c, r: str(int(r.util * 0.6)), True),
    "memory.total": ("memory.total", "MiB", lambda c, r: str(c.memory_total_mib), False),
    "memory.used": ("memory.used", "MiB", lambda c, r: str(r.used_mib), False),
    "memory.free": (
        "memory.free",
        "MiB",
        lambda c, r: str(c.memory_total_mib - RESERVED_MIB - r.used_mib),
        False,
    ),
    "memory.reserved": ("memory.reserved", "MiB", lambda c, r: str(RESERVED_MIB), False),
    "temperature.gpu": ("temperature.gpu", "", lambda c, r: str(r.temp_c), True),
    "temperature.memory": ("temperature.memory", "", lambda c, r: str(r.temp_c + 8), True),
    "power.draw": ("power.draw", "W", lambda c, r: _f(r.power_w), True),
    "power.limit": ("power.limit", "W", lambda c, r: _f(r.power_limit_w or c.power_limit_w), False),
    "enforced.power.limit": ("enforced.power.limit", "W", lambda c, r: _f(r.power_limit_w or c.power_limit_w), False),
    "clocks.sm": ("clocks.current.sm", "MHz", lambda c, r: str(r.sm_clock), True),
    "clocks.mem": ("clocks.current.memory", "MHz", lambda c, r: str(r.mem_clock), True),
    "clocks.gr": ("clocks.current.graphics", "MHz", lambda c, r: str(r.sm_clock), True),
    "clocks.max.sm": ("clocks.max.sm", "MHz", lambda c, r: str(MAX_SM_CLOCK), False),
    "mig.mode.current": ("mig.mode.current", "", lambda c, r: "Disabled", False),
    "ecc.errors.uncorrected.volatile.total": (
        "ecc.errors.uncorrected.volatile.total",
        "",
        lambda c, r: "0",
        False,
    ),
}
ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "gpu_serial": "serial",
    "clocks.current.sm": "clocks.sm",
    "clocks.current.memory": "clocks.mem",
    "clocks.current.graphics": "clocks.gr",
    "clocks.graphics": "clocks.gr",
    "clocks.memory": "clocks.mem",
    "power.limit.enforced": "enforced.power.limit",
    "pci.bus": "pci.bus_id",
}

APP_FIELDS: dict[str, tuple[str, str]] = {
    "pid": ("pid", ""),
    "process_name": ("process_name", ""),
    "name": ("process_name", ""),
    "gpu_uuid": ("gpu_uuid", ""),
    "gpu_name": ("gpu_name", ""),
    "gpu_bus_id": ("gpu_bus_id", ""),
    "gpu_serial": ("gpu_serial", ""),
    "used_memory": ("used_gpu_memory", "MiB"),
    "used_gpu_memory": ("used_gpu_memory", "MiB"),
}


class SmiUsage(Exception):
    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _fmt(value: str, unit: str, nounits: bool) -> str:
    if value == NA or not unit or nounits:
        return value
    return f"{value} {unit}"


def _header(name: str, unit: str, nounits: bool) -> str:
    # a real nvidia-smi keeps the unit in the header even with nounits
    return f"{name} [{unit}]" if unit else name


def _split_fields(spec: str) -> list[str]:
    return [f.strip() for f in spec.split(",") if f.strip()]


def _select(gpus: list[GpuReading], ids: list[int] | None) -> list[GpuReading]:
    if ids is None:
        return gpus
    return [g for g in gpus if g.index in ids]


def query_gpu_rows(
    fields: Sequence[str], cfg: GpuConfig, gpus: list[GpuReading], *, noheader: bool, nounits: bool, na: bool
) -> tuple[str | None, list[str]]:
    cols = []
    for f in fields:
        key = ALIASES.get(f, f)
        if key not in GPU_FIELDS:
            raise SmiUsage(f'Field "{f}" is not a valid field to query.\n\n')
        cols.append(GPU_FIELDS[key])
    header = None if noheader else ", ".join(_header(h, u, nounits) for h, u, _g, _n in cols)
    rows = []
    for r in gpus:
        cells = []
        for _h, unit, get, hideable in cols:
            v = NA if (na and hideable) else get(cfg, r)
            cells.append(_fmt(v, unit, nounits))
        rows.append(", ".join(cells))
    return header, rows


def query_app_rows(
    fields: Sequence[str], cfg: GpuConfig, gpus: list[GpuReading], *, noheader: bool, nounits: bool
) -> tuple[str | None, list[str]]:
    cols = []
    for f in fields:
        if f not in APP_FIELDS:
            raise SmiUsage(f'Field "{f}" is not a valid field to query.\n\n')
        cols.append((f, *APP_FIELDS[f]))
    header = None if noheader else ", ".join(_header(h, u, nounits) for _f0, h, u in cols)
    rows = []
    for g in gpus:
        for pid, pname, used in g.procs:
            vals = {
                "pid": str(pid),
                "process_name": pname,
                "name": pname,
                "gpu_uuid": cfg.uuid(g.index),
                "gpu_name": cfg.name,
                "gpu_bus_id": cfg.bus_id(g.index),
                "gpu_serial": f"16540240{g.index:05d}",
                "used_memory": str(used),
                "used_gpu_memory": str(used),
            }
            rows.append(", ".join(_fmt(vals[f], u, nounits) for f, _h, u in cols))
    return header, rows


def table(cfg: GpuConfig, gpus: list[GpuReading], *, na: bool = False) -> str:
    """The default ``nvidia-smi`` view (same column layout as driver 580)."""
    out = [time.strftime("%a %b %e %H:%M:%S %Y") + "       "]
    bar = "+-----------------------------------------------------------------------------------------+"
    sep = "+-----------------------------------------+------------------------+----------------------+"
    out.append(bar)
    out.append(f"| NVIDIA-SMI {DRIVER_VERSION:<23}Driver Version: {DRIVER_VERSION:<15}CUDA Version: {CUDA_VERSION:<9}|")
    out.append(sep)
    out.append("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |")
    out.append("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |")
    out.append("|                                         |                        |               MIG M. |")
    out.append("|=========================================+========================+======================|")
    for r in gpus:
        name = cfg.name if len(cfg.name) <= 29 else cfg.name[:26] + "..."
        out.append(f"| {r.index:>3}  {name:<31}On  |   {cfg.bus_id(r.index)} Off |                    0 |")
        temp = "N/A" if na else f"{r.temp_c}C"
        pwr = "N/A" if na else f"{round(r.power_w)}W"
        util = "N/A" if na else f"{r.util}%"
        cap = f"{int(r.power_limit_w or cfg.power_limit_w)}W"
        out.append(
            f"| N/A  {temp:>4}    P0 {pwr:>15} / {cap:>5} | {r.used_mib:>7}MiB / {cfg.memory_total_mib:>6}MiB "
            f"| {util:>7}      Default |"
        )
        out.append("|                                         |                        |             Disabled |")
        out.append(sep)
    out.append("")
    out.append(bar)
    out.append("| Processes:                                                                              |")
    out.append("|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |")
    out.append("|        ID   ID                                                               Usage      |")
    out.append("|=========================================================================================|")
    procs = [(g.index, pid, name, used) for g in gpus for pid, name, used in g.procs]
    if not procs:
        out.append("|  No running processes found                                                             |")
    for idx, pid, name, used in procs:
        pname = name if len(name) <= 33 else "..." + name[-30:]
        out.append(f"| {idx:>4}   N/A  N/A  {pid:>14}      C   {pname:<33}{used:>10}MiB |")
    out.append(bar)
    return "\n".join(out) + "\n"


LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def topo(cfg: GpuConfig, *, tty: bool = False) -> str:
    """``nvidia-smi topo -m`` of an HGX H200 board: all GPU pairs NV18, one NIC per GPU."""
    n = cfg.count
    nics = n
    half = max(1, (n + 1) // 2)

    def numa(i: int) -> int:
        return 0 if i < half else 1

    def affinity(i: int) -> str:
        return "0-47,96-143" if numa(i) == 0 else "48-95,144-191"

    head = "\t" + "\t".join([f"GPU{i}" for i in range(n)] + [f"NIC{i}" for i in range(nics)])
    head += "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    if tty:
        head = "\t\x1b[4m" + head[1:] + "\x1b[0m"
    lines = [head]
    for i in range(n):
        cells = [f"GPU{i}"]
        cells += [" X " if j == i else "NV18" for j in range(n)]
        cells += ["PIX" if k == i else ("NODE" if numa(k) == numa(i) else "SYS") for k in range(nics)]
        cells += [affinity(i), str(numa(i)), "", "N/A"]
        lines.append("\t".join(cells))
    for k in range(nics):
        cells = [f"NIC{k}"]
        cells += ["PIX" if j == k else ("NODE" if numa(j) == numa(k) else "SYS") for j in range(n)]
        cells += [" X " if m == k else ("NODE" if numa(m) == numa(k) else "SYS") for m in range(nics)]
        cells += ["", "", "", ""]
        lines.append("\t".join(cells))
    text = "\n".join(lines) + "\n" + LEGEND
    text += "\nNIC Legend:\n\n" + "".join(f"  NIC{k}: mlx5_{k}\n" for k in range(nics))
    return text


HELP = """NVIDIA System Management Interface -- v{drv}

NVSMI provides monitoring information for Tesla and select Quadro devices.
(tunedeck simulator: answers from the simulated GPU state)

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
    -L,   --list-gpus           Display a list of GPUs connected to the system.
    -i,   --id=                 Target a specific GPU.
    -l,   --loop=               Probe until Ctrl+C at specified second interval.
    -lms, --loop-ms=            Probe until Ctrl+C at specified millisecond interval.
    --query-gpu=                Information about GPU.
    --query-compute-apps=       List of active compute processes.
    --format=                   Comma separated list of format options: csv, noheader, nounits
    topo -m                     Display the GPUDirect communication matrix for the system.
"""


def _opt_value(argv: list[str], i: int, name: str) -> tuple[str, int]:
    a = argv[i]
    if "=" in a and a.startswith("--"):
        return a.split("=", 1)[1], i + 1
    if i + 1 >= len(argv):
        raise SmiUsage(f"Option {name} requires an argument.\n\nPlease run 'nvidia-smi -h' for help.\n")
    return argv[i + 1], i + 2


def main(argv: Sequence[str], out: TextIO | None = None) -> int:
    out = out or sys.stdout
    argv = list(argv)
    fault = os.environ.get("TUNEDECK_SIM_SMI_FAULT", "").strip()
    if fault == "hang":
        while True:
            time.sleep(3600)
    if fault in FAULTS:
        code, text = FAULTS[fault]
        out.write(text)
        out.flush()
        return code
    na = fault == "na"
    try:
        return _main(argv, out, na)
    except SmiUsage as e:
        out.write(str(e))
        out.flush()
        return e.code
    except ConfigError as e:
        sys.stderr.write(f"tunedeck sim smi: {e}\n")
        return 2
    except (BrokenPipeError, KeyboardInterrupt):
        return 0


def _main(argv: list[str], out: TextIO, na: bool) -> int:
    query_gpu: list[str] | None = None
    query_apps: list[str] | None = None
    fmt: list[str] | None = None
    ids: list[int] | None = None
    loop_s: float | None = None
    list_gpus = False
    i = 0
    if argv[:1] == ["topo"]:
        rest = argv[1:]
        if rest and rest[0] in ("-m", "--matrix"):
            cfg = load_config()
            out.write(topo(cfg, tty=out.isatty()))
            out.flush()
            return 0
        raise SmiUsage("Invalid combination of input arguments. Please run 'nvidia-smi topo -h' for help.\n")
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            out.write(HELP.format(drv=DRIVER_VERSION))
            return 0
        if a in ("--version",):
            out.write(
                f"NVIDIA-SMI version  : {DRIVER_VERSION}\nNVML version        : {DRIVER_VERSION.rsplit('.', 1)[0]}\n"
                f"DRIVER version      : {DRIVER_VERSION}\nCUDA Version        : {CUDA_VERSION}\n"
            )
            return 0
        if a in ("-L", "--list-gpus"):
            list_gpus = True
            i += 1
        elif a.startswith("--query-gpu"):
            v, i = _opt_value(argv, i, "--query-gpu")
            query_gpu = _split_fields(v)
        elif a.startswith("--query-compute-apps"):
            v, i = _opt_value(argv, i, "--query-compute-apps")
            query_apps = _split_fields(v)
        elif a.startswith("--format"):
            v, i = _opt_value(argv, i, "--format")
            fmt = _split_fields(v)
        elif a in ("-i", "--id") or a.startswith("--id="):
            v, i = _opt_value(argv, i, "-i")
            try:
                ids = [int(x) for x in v.split(",")]
            except ValueError:
                raise SmiUsage(f"No devices were found matching {v!r}\n", 6) from None
        elif a in ("-l", "--loop") or a.startswith("--loop="):
            v, i = _opt_value(argv, i, "-l")
            loop_s = _num(v, "-l")
        elif a in ("-lms", "--loop-ms") or a.startswith("--loop-ms="):
            v, i = _opt_value(argv, i, "-lms")
            loop_s = _num(v, "-lms") / 1000.0
        else:
            raise SmiUsage("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
    cfg = load_config()
    if ids is not None and any(not 0 <= x < cfg.count for x in ids):
        raise SmiUsage("No devices were found matching the given ID(s)\n", 6)
    if cfg.count == 0:
        out.write("No devices were found\n")
        return 6
    if (query_gpu is not None or query_apps is not None) and (fmt is None or "csv" not in fmt):
        raise SmiUsage(
            "'--format' option is required when using '--query-*' options.\n\nPlease run 'nvidia-smi -h' for help.\n"
        )
    noheader = bool(fmt and "noheader" in fmt)
    nounits = bool(fmt and "nounits" in fmt)

    first = True
    while True:
        gpus = _select(read_gpus(cfg), ids)
        if list_gpus:
            text = "".join(f"GPU {g.index}: {cfg.name} (UUID: {cfg.uuid(g.index)})\n" for g in gpus)
        elif query_gpu is not None:
            header, rows = query_gpu_rows(query_gpu, cfg, gpus, noheader=noheader, nounits=nounits, na=na)
            text = ((header + "\n") if header and first else "") + "".join(r + "\n" for r in rows)
        elif query_apps is not None:
            header, rows = query_app_rows(query_apps, cfg, gpus, noheader=noheader, nounits=nounits)
            text = ((header + "\n") if header and first else "") + "".join(r + "\n" for r in rows)
        else:
            text = table(cfg, gpus, na=na)
        out.write(text)
        out.flush()
        first = False
        if loop_s is None:
            return 0
        time.sleep(loop_s)


def _num(v: str, opt: str) -> float:
    try:
        x = float(v)
    except ValueError:
        raise SmiUsage(f"Invalid value {v!r} for option {opt}.\n\nPlease run 'nvidia-smi -h' for help.\n") from None
    if x <= 0:
        raise SmiUsage(f"Invalid value {v!r} for option {opt}.\n\nPlease run 'nvidia-smi -h' for help.\n")
    return x


if __name__ == "__main__":
    # the demo host's nvidia-smi (tunedeck.sim.demo): this module alone, logging as the CLI does
    from tunedeck.util import logs

    logs.setup(lazy=True)
    raise SystemExit(main(sys.argv[1:]))
