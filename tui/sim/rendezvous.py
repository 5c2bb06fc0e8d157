"""Multi-node SGLang in the simulator: the ranks really rendezvous over TCP at ``--dist-init-addr``.

With ``--nnodes N`` (N > 1) the node of rank 0 listens on the ``--dist-init-addr`` port (as
torch's TCPStore does) and waits for the other nodes; the others connect, retrying, until
``--dist-timeout`` (default 600 s, torch's). What goes wrong, goes wrong with the real texts:

- a node that never comes: the head fails with ``torch.distributed.DistStoreError: Timed out
  after 601 seconds waiting for clients. 8/16 clients joined.``; a worker that cannot reach the
  head with ``torch.distributed.DistNetworkError: The client socket has timed out after 600000ms
  while trying to connect to (HOST, PORT).``;
- a node that dies after the rendezvous: the others hang in NCCL for
  ``TUNEDECK_SIM_NCCL_TIMEOUT_S`` (default 10) seconds, then fail with ``RuntimeError: NCCL
  error: remote process exited or there was a network error``, as sglang-fail-nccl-1.log shows.

Each node simulates ``tp / nnodes`` ranks on its own (simulated) GPUs; only the head serves HTTP,
the other nodes keep their ranks loaded and wait.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any

from tunedeck.sim.simlog import Fatal

if TYPE_CHECKING:
    from tunedeck.sim.startup import StartupKit

DEFAULT_DIST_TIMEOUT = 600
_TB = (
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2937, in run_scheduler_process\n'
    "    scheduler = Scheduler(\n"
    "                ^^^^^^^^^^\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 766, in init_torch_distributed\n'
    "    init_distributed_environment(\n"
)


def multi_node(args: Any) -> bool:
    return int(getattr(args, "nnodes", 1) or 1) > 1


def local_ranks(args: Any, tp: int) -> int:
    """The ranks this node runs: ``tp / nnodes`` (all of them on one node)."""
    n = int(getattr(args, "nnodes", 1) or 1)
    return max(1, tp // n) if n > 1 else tp


def first_rank(args: Any, tp: int) -> int:
    return int(getattr(args, "node_rank", 0) or 0) * local_ranks(args, tp)


def _addr(args: Any) -> tuple[str, int]:
    text = args.dist_init_addr or "127.0.0.1:5000"
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


class Rendezvous:
    """The connections between this node and the others (kept open: a peer that dies closes them)."""

    def __init__(self, kit: StartupKit) -> None:
        self.kit = kit
        self.a = kit.a
        self.n = int(self.a.nnodes)
        self.rank = int(self.a.node_rank or 0)
        self.timeout = float(self.a.dist_timeout or os.environ.get("TUNEDECK_SIM_DIST_TIMEOUT") or DEFAULT_DIST_TIMEOUT)
        self.host, self.port = _addr(self.a)
        self.peers: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.server: asyncio.AbstractServer | None = None
        self.ranks_per_node = local_ranks(self.a, int(self.a.tp_size) * max(1, int(self.a.pp_size)))

    # ------------------------------------------------------------------ failures, in the engine's words
    def _fail(self, exc_line: str) -> None:
        L = self.kit.log
        L.sg(_TB + exc_line + "\n", rank=first_rank(self.a, self.ranks_per_node * self.n))
        L.sg("Received sigquit from a child process. It usually means the child failed.")
        raise Fatal(137, kill=True)

    # ------------------------------------------------------------------ join
    async def join(self) -> None:
        if self.rank == 0:
            await self._serve()
        else:
            await self._connect()
        self.kit.background(self._watch(), "rendezvous-watch")

    async def _serve(self) -> None:
        joined = asyncio.Event()
        by_rank: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}

        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # a node introduces itself ("rank N") once its connect succeeded on its side: a connection
            # it gave up on (a connect that timed out under load) says nothing and is not a peer,
            # and a node that connects again replaces its earlier connection
            try:
                line = await asyncio.wait_for(reader.readline(), 30)
            except (OSError, asyncio.TimeoutError):
                line = b""
            parts = line.split()
            if len(parts) != 2 or parts[0] != b"rank" or not parts[1].isdigit() or joined.is_set():
                writer.close()
                return
            old = by_rank.pop(int(parts[1]), None)
            if old is not None:
                old[1].close()
            by_rank[int(parts[1])] = (reader, writer)
            if len(by_rank) >= self.n - 1:
                self.peers = list(by_rank.values())
                joined.set()

        self.server = await asyncio.start_server(on_client, host=None, port=self.port, reuse_address=True)
        try:
            await asyncio.wait_for(joined.wait(), self.timeout)
        except asyncio.TimeoutError:
            total = self.n * self.ranks_per_node
            came = (1 + len(by_rank)) * self.ranks_per_node
            self._fail(
                f"torch.distributed.DistStoreError: Timed out after {int(self.timeout) + 1} seconds waiting "
                f"for clients. {came}/{total} clients joined."
            )
        for _, w in self.peers:
            w.write(b"go\n")
            await w.drain()

    async def _connect(self) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), 5)
                writer.write(b"rank %d\n" % self.rank)
                await writer.drain()
                line = await asyncio.wait_for(reader.readline(), max(1.0, deadline - time.monotonic()))
                if line == b"go\n":
                    self.peers.append((reader, writer))
                    return
                writer.close()
            except (OSError, asyncio.TimeoutError):
                pass
            if time.monotonic() >= deadline:
                self._fail(
                    f"torch.distributed.DistNetworkError: The client socket has timed out after "
                    f"{int(self.timeout * 1000)}ms while trying to connect to ({self.host}, {self.port})."
                )
            await asyncio.sleep(0.2)

    # ------------------------------------------------------------------ a peer that dies
    async def _watch(self) -> None:
        waits = [asyncio.ensure_future(r.read()) for r, _ in self.peers]
        if not waits:
            return
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        # the collective hangs until NCCL gives up, then every rank fails
        await asyncio.sleep(float(os.environ.get("TUNEDECK_SIM_NCCL_TIMEOUT_S", "10") or 10))
        self._fail("RuntimeError: NCCL error: remote process exited or there was a network error")


async def join(kit: StartupKit) -> Rendezvous | None:
    """The rendezvous of a multi-node SGLang start (None on one node)."""
    if kit.cfg.engine != "sglang" or not multi_node(kit.a):
        return None
    r = Rendezvous(kit)
    loop = asyncio.get_running_loop()
    t = loop.time()
    await r.join()
    kit.clock.t0 += loop.time() - t  # the load goes on from where the rendezvous let it
    return r


async def wait_headless(kit: StartupKit) -> None:
    """A node other than the head keeps its ranks loaded and serves nothing (only the head has the
    HTTP server), until it is stopped or a peer dies."""
    if kit.cfg.engine == "sglang" and multi_node(kit.a) and int(kit.a.node_rank or 0) > 0:
        kit.state.phase = "ready"
        await asyncio.Event().wait()
