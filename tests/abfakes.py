"""An in-memory ServerOps for orchestrator and Pilot tests (fast, deterministic)."""

from __future__ import annotations

import asyncio

from tunedeck.ab.ops import BenchResult, LaunchHandle, ProfileInfo, ReadyResult, RunningServer, StopResult


class FakeOps:
    host_label = "fake"

    def __init__(self, *, speed=None, fail=None, running=(), bench_delay=0.0):
        self.speed = speed or {"base": 100.0, "tuned": 118.0}
        self.fail = fail or {}
        self.running = list(running)
        self.bench_delay = bench_delay
        self.log: list[str] = []
        self.live: set[str] = set()
        self.n = 0

    async def resolve(self, profile):
        if profile == "missing":
            raise ValueError("no profile named 'missing'")
        return ProfileInfo(profile, "sglang", "m", ("sglang", f"--p={profile}"), {}, 30000)

    async def running_servers(self):
        return [RunningServer(s, f"old server {s}") for s in self.running]

    async def stop_running(self, server):
        self.log.append(f"stop-existing {server.id}")
        self.running.remove(server.id)
        return StopResult(True, True)

    async def launch(self, info):
        self.n += 1
        rid = f"run{self.n}"
        self.live.add(rid)
        self.log.append(f"launch {info.name}")
        return LaunchHandle(rid, f"/logs/{rid}.log", "http://127.0.0.1:1")

    async def wait_ready(self, info, handle, on_progress):
        on_progress("loading weights", 0.5)
        if info.name in self.fail:
            return ReadyResult(False, 1.0, self.fail[info.name], "E: boom", ({"phase": "failed"},))
        return ReadyResult(True, 2.0, timeline=({"phase": "ready", "t": 2.0},))

    async def flush_cache(self, info, handle):
        self.log.append(f"flush {info.name}")
        return "cache flushed"

    async def bench(self, info, handle, req):
        level = req.level
        self.log.append(f"bench {info.name} C={level.concurrency}")
        req.on_progress("running", 0.5)
        await asyncio.sleep(self.bench_delay)
        v = self.speed[info.name] * level.concurrency
        return BenchResult(
            f"b{self.n}-{level.concurrency}-{len(self.log)}",
            {
                "max_concurrency": level.concurrency,
                "output_throughput": v,
                "median_tpot_ms": 1000.0 / self.speed[info.name],
                "completed": level.num_prompts,
                "failed": 0,
            },
        )

    async def acceptance_rate(self, info, handle):
        return None, None

    async def stop(self, info, handle):
        self.log.append(f"stop {info.name}")
        self.live.discard(handle.run_id)
        return StopResult(True, True)


class InProcessCampaign:
    """An A/B run in this process over :class:`FakeOps`, behind the interface the Compare screen
    follows (``id``, ``report``, ``events()``, ``cancel()``), as :class:`tunedeck.services.abrun.ABRun` has."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.report = None
        self._q: asyncio.Queue = asyncio.Queue()
        runner.on_event = self._q.put_nowait

    @property
    def id(self) -> str:
        return self.runner.report.id

    async def events(self):
        task = asyncio.create_task(self.runner.run())
        task.add_done_callback(lambda _t: self._q.put_nowait(None))
        while True:
            ev = await self._q.get()
            if ev is None:
                break
            yield ev
        self.report = await task

    async def cancel(self) -> str:
        self.runner.cancel()
        return "cancelled"


def fake_campaigns(ops: FakeOps):
    """A ``start_campaign`` for the Compare screen that runs the A/B in process over ``ops``."""
    from tunedeck.ab.runner import ABRunner

    async def start(a, b, plan, repeats, interleave, confirm):
        return InProcessCampaign(
            ABRunner(ops, a, b, plan, repeats=repeats, interleave=interleave, confirm_stop=confirm)
        )

    return start
