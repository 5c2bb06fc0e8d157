"""vLLM on Ray in the simulator: the other Ray nodes' GPUs are held as by Ray's worker processes.

With ``--distributed-executor-backend ray`` vLLM's placement group puts ``tp × pp`` one-GPU
bundles on the cluster's nodes; on every node but the driver's, the raylet (a child of that
node's ``ray start --block``) starts ``ray::RayWorkerWrapper`` worker processes that hold those
GPUs until the driver exits or the Ray node stops. The simulator leaves Ray itself untouched and
plays those workers on both sides of one TCP channel:

- on a worker node, ``tunedeck-host sim ray-node -- ray start --address=HEAD:PORT … --block``
  (what a ``--sim`` deployment runs there) runs the real ``ray start`` as its child and keeps
  dialling the head's simulated vLLM at ``HEAD:PORT+1`` (the Ray head's GCS port plus one);
- the head's simulated vLLM listens on that port while it runs. Once Ray shows the placement's
  GPUs it asks the connected nodes for the bundles its own GPUs do not hold; each node starts
  one worker process per bundle (real processes in the Ray node's run, named
  ``ray::RayWorkerWrapper``), publishes what they hold on its simulated GPUs as the driver's
  memory grows, and ends them when the channel closes (the driver exited, crashed or was
  killed) or when its ``ray start`` ends (the Ray node was stopped).

The protocol is one line per message: the head greets (``tunedeck-sim-ray 1``), the node says
``node IP GPUS``, the head answers ``place N FIRST_RANK`` when it needs N bundles there, the node
``pids P…`` once its workers run, then the head sends ``use MIB UTIL`` whenever its per-GPU memory
or utilisation changes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

from tunedeck.sim.gpus import ServerRecord, load_config
from tunedeck.util.aio import cancel_and_wait, wait_while

GREETING = b"tunedeck-sim-ray 1\n"
#: the name Ray gives a vLLM worker actor's process (its ``setproctitle``), as nvidia-smi lists it
WORKER_NAME = "ray::RayWorkerWrapper"
#: a worker process: it names itself, then lives until its node closes its stdin (or dies)
_WORKER_CODE = (
    "import sys\n"
    "try:\n"
    "    open('/proc/self/comm', 'w').write(sys.argv[1][:15])\n"
    "except OSError:\n"
    "    pass\n"
    "sys.stdin.buffer.read()\n"
)
#: seconds between two dials of the head while no driver listens
DIAL_INTERVAL = 0.5
#: seconds a stop signal leaves ``ray start`` to end its node before it is passed on: a stop
#: signals the run's whole process group, and a second TERM would cut short Ray's own clean-up
PASS_ON_AFTER = 15.0


def channel_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` of the Ray head (GCS) → where the head's simulated vLLM listens (PORT + 1)."""
    host, _, port = address.strip().rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port) + 1


def node_wait() -> float:
    """``TUNEDECK_SIM_RAY_NODE_WAIT_S`` (default 10): how long the driver waits for the other
    nodes to answer on the channel once Ray shows the placement's GPUs."""
    try:
        return max(0.0, float(os.environ.get("TUNEDECK_SIM_RAY_NODE_WAIT_S") or 10))
    except ValueError:
        return 10.0


# ====================================================================== the driver's side


@dataclass
class Node:
    """A Ray node on the channel, as the driver sees it."""

    ip: str
    gpus: int
    writer: asyncio.StreamWriter
    placed: int = 0
    first_rank: int = 0
    pids: list[int] = field(default_factory=list)
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    gone: bool = False
    last: tuple[int, int] = (-1, -1)


class WorkerNodes:
    """The head's end of the channel: the other Ray nodes, and the bundles placed on them."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.nodes: list[Node] = []
        self.server: Optional[asyncio.AbstractServer] = None
        self.joined = asyncio.Event()

    async def listen(self) -> Optional[str]:
        """Open the channel; the reason when it cannot be (the port is taken)."""
        try:
            self.server = await asyncio.start_server(self._client, host=None, port=self.port, reuse_address=True)
        except OSError as e:
            return f"port {self.port}: {e.strerror or e}"
        return None

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(GREETING)
            await writer.drain()
            parts = (await asyncio.wait_for(reader.readline(), 10)).split()
            if len(parts) != 3 or parts[0] != b"node" or not parts[2].isdigit():
                writer.close()
                return
            node = Node(parts[1].decode("ascii", "replace"), int(parts[2]), writer)
        except (OSError, asyncio.TimeoutError, ValueError):
            writer.close()
            return
        self.nodes.append(node)
        self.joined.set()
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                words = line.split()
                if words[:1] == [b"pids"]:
                    node.pids = [int(w) for w in words[1:] if w.isdigit()]
                    node.answered.set()
        except OSError:
            pass
        finally:
            node.gone = True
            node.answered.set()
            if node in self.nodes:
                self.nodes.remove(node)
            writer.close()

    def _free(self) -> int:
        return sum(n.gpus for n in self.nodes if not n.placed and not n.gone)

    async def place(self, bundles: int, first_rank: int, timeout: float) -> list[Node]:
        """Ask the nodes for ``bundles`` workers (ranks from ``first_rank`` on), waiting up to
        ``timeout`` s for enough nodes to join; the nodes that started workers."""
        await wait_while(lambda: self._free() < bundles, self.joined, timeout)
        placed: list[Node] = []
        rank = first_rank
        for n in list(self.nodes):
            if bundles <= 0:
                break
            if n.placed or n.gone or n.gpus <= 0:
                continue
            n.placed, n.first_rank = min(n.gpus, bundles), rank
            bundles -= n.placed
            rank += n.placed
            try:
                n.writer.write(b"place %d %d\n" % (n.placed, n.first_rank))
                await n.writer.drain()
            except OSError:
                continue
            placed.append(n)
        end = time.monotonic() + 15
        for n in placed:
            try:
                await asyncio.wait_for(n.answered.wait(), max(0.1, end - time.monotonic()))
            except asyncio.TimeoutError:
                pass
        return [n for n in placed if n.pids and not n.gone]

    def use(self, used_mib: int, util: int) -> None:
        """Tell the nodes what each of their workers holds now (only what changed)."""
        for n in self.nodes:
            if not n.placed or n.gone or n.last == (used_mib, util):
                continue
            n.last = (used_mib, util)
            try:
                n.writer.write(b"use %d %d\n" % (used_mib, util))
            except OSError:
                n.gone = True

    def close(self) -> None:
        for n in self.nodes:
            n.writer.close()
        if self.server is not None:
            self.server.close()


# ====================================================================== a worker node's side


def _option(argv: list[str], name: str) -> Optional[str]:
    """The value of ``--name=V`` or ``--name V`` in a ``ray start`` command line."""
    for i, a in enumerate(argv):
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


class RayNode:
    """``sim ray-node -- RAY START …``: the real ``ray start`` as a child, and the workers the
    driver places on this node."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.address = _option(argv, "--address")
        self.ip = _option(argv, "--node-ip-address")
        gpus = _option(argv, "--num-gpus")
        cfg = load_config()
        try:
            self.gpus = min(cfg.count, int(float(gpus))) if gpus is not None else cfg.count
        except ValueError:
            self.gpus = 0
        self.workers: list[tuple[asyncio.subprocess.Process, ServerRecord, int]] = []
        self.ray: Optional[asyncio.subprocess.Process] = None

    def say(self, msg: str) -> None:
        sys.stderr.write(f"tunedeck-host sim ray-node: {msg}\n")
        sys.stderr.flush()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            self.ray = await asyncio.create_subprocess_exec(*self.argv)
        except OSError as e:
            self.say(f"cannot run {self.argv[0]}: {e.strerror or e}")
            return 127
        stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            try:
                loop.add_signal_handler(sig, stopping.set)
            except (NotImplementedError, RuntimeError):
                pass
        dial = loop.create_task(self.dial()) if self.address else None
        ended = loop.create_task(self.ray.wait())
        stop = loop.create_task(stopping.wait())
        await asyncio.wait({ended, stop}, return_when=asyncio.FIRST_COMPLETED)
        if dial is not None:
            await cancel_and_wait([dial], "ray node: dialing the head")
        await self.release()
        if not ended.done():
            # a stop signals the whole run (this process group): Ray got it too and ends its node;
            # one sent to this process alone is passed on
            try:
                await asyncio.wait_for(asyncio.shield(ended), PASS_ON_AFTER)
            except asyncio.TimeoutError:
                self.say(f"{self.argv[0]} still runs {PASS_ON_AFTER:g} s after the stop signal: passing it on")
                self.ray.send_signal(signal.SIGTERM)
        stop.cancel()
        return await ended

    async def dial(self) -> None:
        """Connect to the driver whenever one listens; hold what it places until it goes away."""
        assert self.address is not None
        try:
            host, port = channel_address(self.address)
        except ValueError:
            self.say(f"--address={self.address}: not HOST:PORT; no worker will hold this node's GPUs")
            return
        while True:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 3)
            except (OSError, asyncio.TimeoutError):
                await asyncio.sleep(DIAL_INTERVAL)
                continue
            try:
                await self.serve(reader, writer)
            except (OSError, asyncio.TimeoutError, ValueError) as e:
                self.say(f"the channel to the driver at {host}:{port} failed: {e}")
            finally:
                writer.close()
                await self.release()
            await asyncio.sleep(DIAL_INTERVAL)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await asyncio.wait_for(reader.readline(), 10) != GREETING:
            return  # something else listens there: not a driver of ours
        ip = self.ip or writer.get_extra_info("sockname")[0]
        writer.write(b"node %s %d\n" % (ip.encode("ascii", "replace"), self.gpus))
        await writer.drain()
        while True:
            line = await reader.readline()
            if not line:
                return
            words = line.split()
            if words[:1] == [b"place"] and len(words) == 3 and not self.workers:
                await self.start_workers(int(words[1]))
                pids = b" ".join(b"%d" % p.pid for p, _, _ in self.workers)
                writer.write(b"pids " + pids + b"\n")
                await writer.drain()
            elif words[:1] == [b"use"] and len(words) == 3:
                self.hold(int(words[1]), int(words[2]))

    async def start_workers(self, n: int) -> None:
        for gpu in range(min(n, self.gpus)):
            p = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-c", _WORKER_CODE, WORKER_NAME, stdin=asyncio.subprocess.PIPE
            )
            self.workers.append((p, ServerRecord("vllm", [gpu], pid=p.pid), gpu))
        if self.workers:
            self.say(
                f"the driver placed {len(self.workers)} worker(s) here: {WORKER_NAME} pids "
                + " ".join(str(p.pid) for p, _, _ in self.workers)
            )
        self.hold(0, 0)

    def hold(self, used_mib: int, util: int) -> None:
        for p, rec, gpu in self.workers:
            if p.returncode is not None:
                continue
            procs = [{"name": WORKER_NAME, "used_mib": used_mib}] if used_mib else []
            rec.publish({gpu: {"used_mib": used_mib, "util": util, "procs": procs}})

    async def release(self) -> None:
        """End the workers (their stdin closes) and take back their GPUs."""
        if not self.workers:
            return
        workers, self.workers = self.workers, []
        for p, rec, _ in workers:
            rec.remove()
            if p.stdin is not None:
                p.stdin.close()
        for p, _, _ in workers:
            try:
                await asyncio.wait_for(p.wait(), 2)
            except asyncio.TimeoutError:
                p.kill()
                await p.wait()
        self.say(f"released {len(workers)} worker(s): the driver went away or this Ray node stops")


def main(argv: list[str]) -> int:
    """``sim ray-node -- RAY START ARGS…``"""
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0].startswith("-"):
        sys.stderr.write("usage: tunedeck-host sim ray-node -- RAY start [RAY START OPTIONS...]\n")
        return 2
    from tunedeck.util.aio import run_async

    try:
        return run_async(RayNode(argv).run())
    except KeyboardInterrupt:
        return 130
