"""What the GPUs of a host hold now, from ``nvidia-smi``: the processes on them (a launch refuses
unknown ones, a stop waits for its own to leave) and the memory in use per GPU."""

from __future__ import annotations

from tunedeck.hostops.hosts import Host
from tunedeck.util.safety import safe_line


async def compute_apps(host: Host, timeout: float = 10.0) -> list[tuple[int, str, float | None]] | None:
    """``nvidia-smi --query-compute-apps`` as (pid, gpu_uuid, used MiB); None when nvidia-smi
    is missing or failed (no GPU information)."""
    r = await host.run(
        [host.nvidia_smi, "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
        timeout=timeout,
    )
    if not r.ok:
        return None
    out: list[tuple[int, str, float | None]] = []
    for line in r.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        mem: float | None
        try:
            mem = float(parts[2]) if len(parts) > 2 else None
        except ValueError:
            mem = None
        out.append((int(parts[0]), safe_line(parts[1]), mem))  # host text: shown in refusals
    return out


async def gpu_memory_used(host: Host, timeout: float = 10.0) -> dict[int, float] | None:
    r = await host.run(
        [host.nvidia_smi, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"], timeout=timeout
    )
    if not r.ok:
        return None
    out: dict[int, float] = {}
    for line in r.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            try:
                out[int(parts[0])] = float(parts[1])
            except ValueError:
                pass
    return out


__all__ = ["compute_apps", "gpu_memory_used"]
