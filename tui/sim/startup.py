"""An engine's start-up: the protocol both engines implement (:class:`EngineStartup`; SGLang's
:class:`tunedeck.sim.sglang_startup.SglangStartup` and vLLM's :class:`tunedeck.sim.vllm_startup.VllmStartup`
are siblings, neither knows the other) and the tools they share (:class:`StartupKit`)."""

from __future__ import annotations

import asyncio
import random
import socket
from typing import Any, Callable, Coroutine, NoReturn, Protocol

from tunedeck.sim.httpd import HttpServer
from tunedeck.sim.state import ServerState

#: a task that lives as long as the server, and its name
Task = tuple[Coroutine[Any, Any, None], str]


class EngineStartup(Protocol):
    """One engine's start-up as its log shows it, and the engine's own moments around serving.

    The server calls, in order: :meth:`note` for each flag accepted but not modelled,
    :meth:`start`, then starts the scheduler and :meth:`serving_tasks`, awaits :meth:`warm_up`,
    calls :meth:`ready`; :meth:`crash` under ``--sim-fault crash``; :meth:`stopping` on shutdown.
    A failure raises :class:`tunedeck.sim.simlog.Fatal` after printing it in the engine's words.
    """

    def note(self, text: str) -> None:
        """One line of the simulator's own in the engine's log format."""

    async def start(self) -> None:
        """From the first log line to the HTTP server listening (``state.http``)."""

    def serving_tasks(self) -> list[Task]:
        """The engine's own tasks while it serves (vLLM's periodic stat lines)."""

    async def warm_up(self) -> None:
        """What runs with the scheduler before the server is ready (SGLang's warm-up request)."""

    def ready(self) -> None:
        """The server is ready (SGLang's ready line)."""

    def stopping(self) -> None:
        """The first line of a clean shutdown, before uvicorn's."""

    def crash(self) -> NoReturn:
        """``--sim-fault crash``: a served engine dies of a CUDA error, as a real one does."""


class LoadClock:
    """The start-up's time: a moment is a fraction of ``--sim-load-seconds`` after the start,
    divided by ``--sim-speed``."""

    def __init__(self, load_s: float, speed: float) -> None:
        self.load_s = load_s
        self.speed = speed
        #: the event loop's time when the server started (a multi-node rendezvous moves it on)
        self.t0 = 0.0

    async def at(self, frac: float) -> None:
        loop = asyncio.get_running_loop()
        target = self.t0 + frac * self.load_s / self.speed
        delay = target - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)

    def elapsed(self, f0: float, f1: float) -> float:
        """The simulated seconds from ``f0`` to ``f1``, as the engine's log reports them."""
        return float(max(0.01, (f1 - f0) * self.load_s))


class StartupKit:
    """What both start-ups use: the server's state, the load clock, the rank order of "(all)"
    lines, the GPU memory shown, the HTTP server and the server's background tasks."""

    def __init__(
        self,
        state: ServerState,
        clock: LoadClock,
        new_http: Callable[[], HttpServer],
        background: Callable[[Coroutine[Any, Any, None], str], None],
    ) -> None:
        self.state = state
        self.cfg = state.cfg
        self.a = state.cfg.args
        self.log = state.log
        self.clock = clock
        self.at = clock.at
        self.elapsed = clock.elapsed
        self.set_mem = state.gpu.set_mem
        self.new_http = new_http
        self.background = background
        self._ranks_drawn = 0

    def ranks(self) -> list[int]:
        """This node's ranks in a seeded shuffled order, a different one each call (the order in
        which the ranks' processes print the same line)."""
        r = list(range(len(self.cfg.gpus) or 1))
        random.Random(self.cfg.seed + self._ranks_drawn).shuffle(r)
        self._ranks_drawn += 1
        return r

    def worker_pid(self, rank: int) -> int:
        """The (simulated) pid of rank ``rank``'s worker process."""
        return self.cfg.pid + 2 + rank

    def serve(self) -> HttpServer:
        """The HTTP server (started by the caller on ``state.sock``)."""
        http = self.state.http = self.new_http()
        return http


class KitPart:
    """A part of a start-up: the kit, and the server's state, config, arguments and log it reads."""

    def __init__(self, kit: StartupKit) -> None:
        self.kit = kit
        self.state = kit.state
        self.cfg = kit.cfg
        self.a = kit.a
        self.log = kit.log


def bind_socket(host: str, port: int) -> socket.socket:
    host = host or "0.0.0.0"
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(1024)
    except OSError:
        s.close()
        raise
    s.setblocking(False)
    return s
