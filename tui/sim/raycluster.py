"""vLLM on Ray in the simulator: the real Ray cluster decides whether the engine gets its GPUs.

With ``--distributed-executor-backend ray`` vLLM joins a Ray cluster (``RAY_ADDRESS``, else the
cluster that ``ray start`` recorded in Ray's temp dir, else a new local one) and asks it for a
placement group of ``tp × pp`` one-GPU bundles (``vllm/v1/executor/ray_utils.py``,
``initialize_ray_cluster``). The simulator asks the same cluster, without importing Ray: it runs
the ``ray status`` command line (``TUNEDECK_SIM_RAY``, which a ``--sim`` deployment sets, else the
``ray`` next to this Python, else on PATH) and reads the cluster's GPU total. A real ``ray start
--num-gpus 8`` declares GPUs on a machine without any, so a real cluster of simulated hosts works.

What goes wrong, goes wrong with vLLM's texts:

- no GPU at all in the cluster: ``ValueError: Current node has no GPU available. …``;
- fewer GPUs than ``tp × pp``: the warning ``The number of required GPUs exceeds the total number
  of available GPUs in the placement group.``, ``Waiting for creating a placement group of specs
  for N seconds. …`` lines (the cluster is asked again each time: GPUs that join in time are
  taken), then ``ValueError: Cannot provide a placement group requiring N GPUs …`` after
  ``TUNEDECK_SIM_RAY_PG_TIMEOUT_S`` (default vLLM's ``PG_WAIT_TIMEOUT``, 1800) seconds.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Optional

#: vLLM's PG_WAIT_TIMEOUT (seconds)
PG_WAIT_TIMEOUT = 1800
_TOTAL_RE = re.compile(r"^\s*([\d.]+)/([\d.]+) (\S+)\s*$")
_NODE_RE = re.compile(r"^Node: ([0-9a-f]+)")


class RayUnavailable(Exception):
    """The cluster could not be asked (no ``ray`` command, or ``ray status`` failed)."""


@dataclass(frozen=True)
class ClusterView:
    """What ``ray status -v`` showed: resource totals of the cluster and of its first node, and
    how many nodes it has."""

    address: str
    gpus: float
    resources: dict[str, float]
    first_node: str
    first_node_resources: dict[str, float]
    nodes: int = 1


def ray_executable() -> Optional[str]:
    """``TUNEDECK_SIM_RAY`` (a name or a path), else ``ray`` next to this Python, else on PATH."""
    named = os.environ.get("TUNEDECK_SIM_RAY", "").strip()
    if named:
        return shutil.which(named) or (named if os.path.isfile(named) else None)
    beside = os.path.join(os.path.dirname(sys.executable), "ray")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("ray")


def cluster_address() -> Optional[str]:
    """The cluster vLLM's ``ray.init()`` joins: ``RAY_ADDRESS``, else the one ``ray start``
    recorded (``ray_current_cluster`` in Ray's default temp dir); None: it would start its own."""
    addr = os.environ.get("RAY_ADDRESS", "").strip()
    if addr and addr != "auto":
        return addr
    tmp = os.environ.get("RAY_TMPDIR") or "/tmp"
    try:
        with open(os.path.join(tmp, "ray", "ray_current_cluster"), encoding="utf-8") as f:
            recorded = f.read().strip()
    except OSError:
        return None
    return recorded or None


def _resource_value(amount: str, unit: str) -> tuple[str, float]:
    scale = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "B": 1}
    for suffix, mult in scale.items():
        if amount.endswith(suffix):
            return unit, float(amount[: -len(suffix)]) * mult
    return unit, float(amount)


def parse_status(text: str, address: str) -> ClusterView:
    """The totals in ``ray status -v`` output (``Total Usage:`` lines ``0.0/16.0 GPU``) and the
    first ``Node:`` section's."""
    totals: dict[str, float] = {}
    first: dict[str, float] = {}
    first_node = ""
    section = ""
    nodes = 0
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("Total Usage:"):
            section = "total"
            continue
        m = _NODE_RE.match(line)
        if m:
            section = "node" if not first_node else "other"
            nodes += 1
            first_node = first_node or m.group(1)
            continue
        if not line.startswith(" "):
            if line and section == "total":
                section = ""
            continue
        parts = line.split()
        if len(parts) == 2 and "/" in parts[0]:
            total = parts[0].split("/", 1)[1]
            try:
                key, value = _resource_value(total, parts[1])
            except ValueError:
                continue
            if section == "total":
                totals[key] = value
            elif section == "node":
                first[key] = value
    return ClusterView(address, totals.get("GPU", 0.0), totals, first_node, first, max(1, nodes))


async def ask_cluster(ray: str, address: str, timeout: float = 60.0) -> ClusterView:
    """Run ``ray status -v --address=ADDRESS``; raises :class:`RayUnavailable` with its last line."""
    try:
        proc = await asyncio.create_subprocess_exec(
            ray,
            "status",
            "-v",
            f"--address={address}",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as e:
        raise RayUnavailable(f"cannot run {ray}: {e.strerror or e}") from None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise RayUnavailable(f"`ray status --address={address}` did not answer in {timeout:g} s") from None
    text = out.decode("utf-8", "replace")
    if proc.returncode != 0:
        last = next((x.strip() for x in reversed(text.splitlines()) if x.strip()), f"exit status {proc.returncode}")
        raise RayUnavailable(last)
    return parse_status(text, address)


def ray_stamp() -> str:
    """Ray's own log time stamp (``2024-10-21 09:00:11,112``)."""
    t = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t * 1000) % 1000:03d}"


def pg_timeout() -> float:
    try:
        return float(os.environ.get("TUNEDECK_SIM_RAY_PG_TIMEOUT_S") or PG_WAIT_TIMEOUT)
    except ValueError:
        return float(PG_WAIT_TIMEOUT)


def fmt_resources(res: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in res.items()) + "}"
