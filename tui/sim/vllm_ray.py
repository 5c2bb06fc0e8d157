"""vLLM on Ray (``--distributed-executor-backend ray``): ``initialize_ray_cluster`` against the
real Ray cluster (see :mod:`tunedeck.sim.raycluster`), the placement group's bundles on the other Ray
nodes' simulated workers (:mod:`tunedeck.sim.raynode`); and the API server's report of an engine that
failed to start, which ends every vLLM start-up failure."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
import uuid
from typing import NoReturn, Sequence

from tunedeck.sim import raycluster, raynode
from tunedeck.sim.simlog import Fatal, Log
from tunedeck.sim.startup import KitPart, StartupKit


def engine_failed(log: Log, pid: int, ec: int, printed: bool = False, cause: Sequence[str] = ()) -> NoReturn:
    """``EngineCore failed to start.`` (unless ``printed``) and the engine core's ``cause`` lines, the
    API server's traceback, exit 1."""
    if not printed:
        log.vl("EngineCore failed to start.", proc="EngineCore", pid=ec, level="ERROR", where="core.py:866")
    for line in cause:
        log.vl(line, proc="EngineCore", pid=ec, level="ERROR", where="core.py:866")
    for line in [
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py", line 782, in wait_for_engine_startup',
        '    raise RuntimeError("Engine core initialization failed. "',
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]:
        log.raw(f"(APIServer pid={pid}) {line}\n")
    raise Fatal(1)


class RayPlacement(KitPart):
    """The engine core's placement group on the Ray cluster (``ec``: the engine core's pid)."""

    def __init__(self, kit: StartupKit, ec: int) -> None:
        super().__init__(kit)
        self.ec = ec
        #: (pid, ip, rank) of each Ray worker on another node
        self.workers: list[tuple[int, str, int]] = []

    async def place(self) -> None:
        """vLLM's ``initialize_ray_cluster`` against the real Ray cluster (see :mod:`raycluster`):
        this node runs the ranks its own GPUs hold, the cluster must hold ``tp × pp``."""
        a = self.a
        L = self.log
        world = max(1, a.tensor_parallel_size) * max(1, a.pipeline_parallel_size)
        ec = self.ec

        def vl(msg: str, level: str = "INFO", where: str = "ray_utils.py:398") -> None:
            L.vl(msg, proc="EngineCore", pid=ec, level=level, where=where)

        def fail(exc_line: str, frames: list[str]) -> NoReturn:
            tb = [
                "Traceback (most recent call last):",
                '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/ray_executor.py", line 96, in _init_executor',
                "    initialize_ray_cluster(self.parallel_config)",
                *frames,
                *exc_line.split("\n"),
            ]
            engine_failed(self.log, self.cfg.pid, ec, cause=tb)

        if world > self.cfg.gpu_cfg.count:
            vl(
                f"Total GPU requirement (world_size={world}) exceeds locally visible GPUs ({self.cfg.gpu_cfg.count}). "
                "For multi-node Ray clusters, this may be expected if the total cluster has enough GPUs. "
                f"If running single-node, consider reducing tensor_parallel_size ({a.tensor_parallel_size}) "
                f"or pipeline_parallel_size ({a.pipeline_parallel_size}).",
                level="WARNING",
                where="ray_utils.py:345",
            )
        address = raycluster.cluster_address()
        ray = raycluster.ray_executable()
        if address is not None:
            await self._open_channel(address)
        if address is None:  # ray.init() starts a local instance with this node's GPUs
            L.raw(
                f"(EngineCore pid={ec}) {raycluster.ray_stamp()}\tINFO worker.py:2007 -- Started a local Ray instance.\n"
            )
            view = raycluster.ClusterView(
                "", float(self.cfg.gpu_cfg.count), {}, "", {"GPU": float(self.cfg.gpu_cfg.count)}
            )
        else:
            L.raw(
                f"(EngineCore pid={ec}) {raycluster.ray_stamp()}\tINFO worker.py:1832 -- "
                f"Connecting to existing Ray cluster at address: {address}...\n"
            )
            try:
                if ray is None:
                    raise raycluster.RayUnavailable("no `ray` command (TUNEDECK_SIM_RAY, beside python, PATH)")
                view = await raycluster.ask_cluster(ray, address)
            except raycluster.RayUnavailable as e:
                said = str(e)
                fail(
                    said if re.match(r"^[\w.]+(?:Error|Exception): ", said) else f"ConnectionError: {said}",
                    ['  File "/usr/local/lib/python3.12/dist-packages/ray/_private/worker.py", line 1843, in init'],
                )
                return
            L.raw(f"(EngineCore pid={ec}) {raycluster.ray_stamp()}\tINFO worker.py:2003 -- Connected to Ray cluster.\n")
        vl("No current placement group found. Creating a new placement group.", where="ray_utils.py:379")
        if world > view.gpus:
            vl(
                "The number of required GPUs exceeds the total number of available GPUs in the placement group.",
                level="WARNING",
                where="ray_utils.py:384",
            )
        host_ip = os.environ.get("VLLM_HOST_IP") or (address or "127.0.0.1").rsplit(":", 1)[0].strip("[]")
        if view.gpus < 1:
            node = view.first_node or uuid.uuid4().hex + uuid.uuid4().hex[:24]
            fail(
                f"ValueError: Current node has no GPU available. current_node_resource={raycluster.fmt_resources(view.first_node_resources)}. "
                f"vLLM engine cannot start without GPU. Make sure you have at least 1 GPU available in a node "
                f"current_node_id={node!r} current_ip={host_ip!r}.",
                [
                    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/ray_utils.py", line 401, in initialize_ray_cluster',
                    "    raise ValueError(",
                ],
            )
            return
        specs = [{"GPU": 1.0} for _ in range(world)]
        specs[0] = {"GPU": 1.0, f"node:{host_ip}": 0.001}
        specs_s = "[" + ", ".join(raycluster.fmt_resources(x) for x in specs) + "]"
        limit = raycluster.pg_timeout()
        t0 = time.monotonic()
        interval = min(10.0, max(0.5, limit / 4))
        while view.gpus < world:
            left = limit - (time.monotonic() - t0)
            if left <= 0:
                fail(
                    f"ValueError: Cannot provide a placement group requiring {float(world)} GPUs "
                    f"(placement_group_specs={specs_s}) within {limit:g} seconds.\n"
                    "Tensor parallel size may exceed available GPUs in your cluster. Check resources with `ray status` "
                    "and `ray list nodes`.\n"
                    "If running on K8s with limited GPUs, consider reducing --tensor-parallel-size to match available "
                    "GPU resources.",
                    [
                        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/ray_utils.py", line 300, in _wait_until_pg_ready',
                        "    raise ValueError(",
                    ],
                )
                return
            await asyncio.sleep(min(interval, left))
            interval *= 2
            vl(
                f"Waiting for creating a placement group of specs for {int(time.monotonic() - t0)} seconds. "
                f"specs={specs_s}. Check `ray status` and `ray list nodes` to see if you have enough resources, "
                "and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment "
                "variable specified in each node if you are running on a multi-node.",
                where="ray_utils.py:270",
            )
            if address is not None and ray is not None:
                try:
                    view = await raycluster.ask_cluster(ray, address)
                except raycluster.RayUnavailable as e:  # as Ray's own client would, say so and go on waiting
                    print(f"ray status failed while waiting for the placement group: {e}", file=sys.stderr, flush=True)
        remote = world - len(self.cfg.gpus)
        if remote > 0 and view.nodes > 1 and self.state.gpu.ray_nodes is not None:
            await self._place_on_nodes(remote, world, host_ip)
        if len(self.cfg.gpus) < a.tensor_parallel_size:
            vl(
                f"tensor_parallel_size={a.tensor_parallel_size} is bigger than a reserved number of GPUs "
                f"({len(self.cfg.gpus)} GPUs) in a node {view.first_node or 'head'}. Tensor parallel workers can be "
                "spread out to 2+ nodes which can degrade the performance unless you have fast interconnect "
                "across nodes, like Infiniband. To resolve this issue, make sure you have more than "
                f"{a.tensor_parallel_size} GPUs available at each node.",
                level="WARNING",
                where="ray_utils.py:218",
            )

    async def _open_channel(self, address: str) -> None:
        """Listen for the other Ray nodes (see :mod:`raynode`); without it their GPUs look idle."""
        try:
            _, port = raynode.channel_address(address)
        except ValueError:
            print(f"simulator: RAY_ADDRESS {address!r} has no port; no other Ray node will hold GPUs", file=sys.stderr)
            return
        nodes = raynode.WorkerNodes(port)
        why = await nodes.listen()
        if why is not None:
            print(
                f"simulator: the other Ray nodes cannot reach this driver ({why}); their GPUs stay idle",
                file=sys.stderr,
            )
            return
        self.state.gpu.ray_nodes = nodes

    async def _place_on_nodes(self, bundles: int, world: int, host_ip: str) -> None:
        """The bundles this node's GPUs do not hold go to the other nodes' simulated Ray workers."""
        assert self.state.gpu.ray_nodes is not None
        placed = await self.state.gpu.ray_nodes.place(bundles, len(self.cfg.gpus), raynode.node_wait())
        got = sum(len(n.pids) for n in placed)
        if got < bundles:
            print(
                f"simulator: {bundles - got} of the placement group's {world} bundles are on Ray nodes that do not run "
                "under `tunedeck-host sim ray-node`; their GPUs are not shown as used",
                file=sys.stderr,
                flush=True,
            )
        port = 30000 + (self.cfg.pid % 20000)
        for n in placed:
            for i, pid in enumerate(n.pids):
                self.workers.append((pid, n.ip, n.first_rank + i))
                self.log.vl(
                    f"world_size={world} rank={n.first_rank + i} local_rank={i} "
                    f"distributed_init_method=tcp://{host_ip}:{port} backend=nccl",
                    proc="RayWorkerWrapper",
                    pid=pid,
                    ip=n.ip,
                    where="parallel_state.py:1400",
                )
