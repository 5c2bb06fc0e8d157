"""Serving: requests in, continuous batching (or fixed timing) driven by :mod:`tui.sim.perf`,
tokens out through :class:`tui.sim.api.Api`, the engines' decode log lines and gauges."""

from __future__ import annotations

import asyncio
import json
import random
import time

from tui.sim import perf
from tui.sim.api import Req
from tui.sim.clock import FixedClock
from tui.sim.core import SimCore


class Scheduler(SimCore):
    """The continuous-batching scheduler and what a request goes through."""

    # ------------------------------------------------------------------ requests
    def submit(self, r: Req) -> None:
        """Hand a new request to the fixed clock or the scheduler; its chunks follow from there."""
        if self.fixed:
            self._fixed_start(r)
        else:
            self.waiting.append(r)
            self.metrics.waiting = len(self.waiting)
            assert self.wake is not None
            self.wake.set()

    # ---- fixed timing (bypasses the model: exact TTFT and inter-token delay, see tui.sim.clock)
    def _fixed_start(self, r: Req) -> None:
        if self.clock is None:
            self.clock = FixedClock(self.loop, self.fixed_ttft, self.fixed_itl, self._fixed_emit)
        r.admitted = r.arrival
        self.running.append(r)
        self.metrics.running = len(self.running)
        self.clock.add(r)

    def _fixed_emit(self, r: Req, now: float) -> None:
        if r.out == 0:
            self.metrics.prompt_tokens += r.prompt_tokens
        self.emit(r, 1, now)

    # ---- continuous batching
    async def scheduler(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.wake is not None
        rng = random.Random(self.seed * 31 + 7)
        pc = self.perf
        k = pc.decode_steps if self.e == "sglang" else 1
        t_next = loop.time()
        step = 0
        self.log_t = loop.time()
        while True:
            if not self.running and not self.waiting:
                self.wake.clear()
                self.update_gauges()
                await self.wake.wait()
                t_next = loop.time()
            now = loop.time()
            if t_next < now - 0.05:
                t_next = now - 0.05  # never burst more than ~50 ms of backlog
            new: list[Req] = []
            if step % k == 0 or not self.running:
                budget = self.prefill_budget
                while self.waiting and len(self.running) + len(new) < self.max_running:
                    r = self.waiting[0]
                    if r.finish is not None:
                        self.waiting.popleft()
                        continue
                    if new and r.prompt_tokens > budget:
                        break
                    self.waiting.popleft()
                    r.admitted = max(now, t_next)
                    budget -= r.prompt_tokens
                    new.append(r)
            if self.e == "sglang" and new:
                toks = sum(r.prompt_tokens for r in new)
                dur = perf.prefill_time(pc, toks) * perf.jitter(rng)
                t_next += dur / self.speed
                await self._sleep_until(t_next)
                tnow = loop.time()
                self.metrics.prompt_tokens += toks
                self.prompt_since_log += toks
                self.running.extend(new)
                self.update_gauges()
                self.log.sg(
                    f"Prefill batch, #new-seq: {len(new)}, #new-token: {toks}, #cached-token: 0, token usage: {self.metrics.token_usage:.2f}, "
                    f"#running-req: {len(self.running) - len(new)}, #queue-req: {len(self.waiting)}, #pending-token: 0, "
                    f"cuda graph: False, input throughput (token/s): {toks / max(1e-6, dur):.2f}",
                    rank=0,
                )
                for r in new:
                    self.emit(r, 1, tnow)
                self._finish_done()
                self._step_done()
                continue
            if self.e == "vllm" and new:
                self.running.extend(new)
            b = len(self.running)
            if b == 0:
                continue
            dur = perf.decode_step_time(pc, b) * perf.jitter(rng)
            newtoks = sum(r.prompt_tokens for r in new)
            if newtoks:
                dur += perf.prefill_time(pc, newtoks)
                self.metrics.prompt_tokens += newtoks
            t_next += dur / self.speed
            await self._sleep_until(t_next)
            tnow = loop.time()
            gen = 0
            spec = self.spec
            for r in self.running:
                if r.finish is not None:
                    continue
                n = 1
                if spec is not None and r.out > 0:
                    acc = perf.sample_accepted(spec, rng)
                    n = 1 + acc
                    self.accept_sum += n
                    self.accept_n += 1
                    m = self.metrics
                    m.spec_drafts += 1
                    m.spec_draft_tokens += spec.num_steps
                    m.spec_accepted += acc
                    for pos in range(acc):
                        if pos < len(m.spec_per_pos):
                            m.spec_per_pos[pos] += 1
                gen += self.emit(r, n, tnow)
            self.metrics.iteration.observe(gen + newtoks)
            self._finish_done()
            self.update_gauges()
            self._step_done()
            step += 1
            if self.e == "sglang":
                self.decode_steps_since_log += 1
                self.gen_since_log += gen
                if self.decode_steps_since_log >= self.decode_log_interval:
                    self._sglang_decode_log(tnow)

    async def _sleep_until(self, t: float) -> None:
        loop = asyncio.get_running_loop()
        d = t - loop.time()
        if d > 0:
            await asyncio.sleep(d)
        else:
            await asyncio.sleep(0)

    def _sglang_decode_log(self, now: float) -> None:
        dt = max(1e-6, now - self.log_t)
        tput = self.gen_since_log / dt
        self.last_gen_tput = tput
        self.metrics.gen_throughput = tput
        spec = ""
        if self.spec and self.accept_n:
            al = self.accept_sum / self.accept_n
            spec = f"accept len: {al:.2f}, accept rate: {(al - 1) / self.spec.num_steps:.2f}, "
            self.metrics.spec_accept_length = al
            self.metrics.spec_accept_rate = (al - 1) / self.spec.num_steps
            self.accept_sum = self.accept_n = 0
        graph = len(self.running) <= self.perf.cuda_graph_max_bs and not self.perf.enforce_eager
        self.log.sg(
            f"Decode batch, #running-req: {len(self.running)}, #token: {self.metrics.used_tokens}, token usage: {self.metrics.token_usage:.2f}, "
            f"{spec}cuda graph: {graph}, gen throughput (token/s): {tput:.2f}, #queue-req: {len(self.waiting)}",
            rank=0,
        )
        self.decode_steps_since_log = 0
        self.gen_since_log = 0
        self.log_t = now

    def _step_done(self) -> None:
        if self.step_waiters:
            ws, self.step_waiters = self.step_waiters, []
            for answer in ws:
                answer()

    def update_gauges(self) -> None:
        m = self.metrics
        m.running = len(self.running)
        m.waiting = len(self.waiting)
        used = sum(r.prompt_tokens + r.out for r in self.running)
        m.used_tokens = used
        m.token_usage = min(1.0, used / self.kv_tokens) if self.kv_tokens else 0.0

    def _finish_done(self) -> None:
        if any(r.finish is not None for r in self.running):
            self.running = [r for r in self.running if r.finish is None]

    # ---- token emission: writes straight to the client's transport
    def emit(self, r: Req, n: int, now: float) -> int:
        """Produce ``n`` tokens for ``r`` at loop time ``now``; returns tokens produced.

        A stream's chunk is written at once; its last chunk goes out in the same write as
        the finish, usage and ``[DONE]`` events and the end of the body.
        """
        if r.finish is not None:
            return 0
        conn = r.conn
        if conn is not None and conn.closed:
            self._abort(r)
            return 0
        n = min(n, r.max_tokens - r.out, max(1, r.eos_at - r.out))
        first = r.out == 0
        pos = r.out
        r.out += n
        m = self.metrics
        m.generation_tokens += n
        if first:
            r.first = now
            m.ttft.observe(now - r.arrival)
        else:
            m.itl.observe(now - r.last)
        r.last = now
        if r.out >= r.max_tokens:
            r.finish = "length"
        elif r.out >= r.eos_at:
            r.finish = "stop"
        if r.text is not None:
            r.text.append(self.words(r.wpos + pos, n))
        if r.stream and conn is not None:
            frames = self.token_frames(r, r.wpos + pos, n, first)
            if r.finish is None:
                conn.write_frames(frames)
            else:
                conn.end_stream(frames + self.end_frames(r))
        if self.rec_file is not None and not r.internal:
            r.times.append(time.time())
            r.counts.append(n)
        if r.finish is not None:
            self._complete(r, now)
        return n

    def _abort(self, r: Req) -> None:
        if r.finish is not None:
            return
        r.finish = "abort"
        r.aborted = True
        if self.e == "sglang":
            self.metrics.aborted += 1
        else:
            self.metrics.finished["abort"] += 1
        if r in self.running and self.fixed:
            self.running.remove(r)
        if r.conn is not None:
            r.conn.abort()  # the client has gone, or the server stops: the response ends unfinished
        if r.done is not None and not r.done.done():
            r.done.set_result(None)

    def _complete(self, r: Req, now: float) -> None:
        m = self.metrics
        m.e2e.observe(now - r.arrival)
        m.queue.observe(max(0.0, r.admitted - r.arrival))
        m.prefill.observe(max(0.0, r.first - r.admitted))
        m.decode.observe(max(0.0, now - r.first))
        if r.out > 1:
            m.tpot.observe((now - r.first) / (r.out - 1))
        m.requests += 1
        m.finished[r.finish or "stop"] = m.finished.get(r.finish or "stop", 0) + 1
        if self.fixed and r in self.running:
            self.running.remove(r)
            m.running = len(self.running)
        if not r.stream:
            self.respond(r)
        if self.rec_file is not None and not r.internal:
            rec = {
                "id": r.rid,
                "engine": self.e,
                "kind": r.kind,
                "stream": r.stream,
                "arrival": r.arrival_wall,
                "times": r.times,
                "tokens": r.counts,
                "ttft": (r.times[0] - r.arrival_wall) if r.times else None,
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.out,
                "finish_reason": r.finish,
            }
            try:
                self.rec_file.write(json.dumps(rec, separators=(",", ":")) + "\n")
            except (OSError, ValueError):
                pass
        if r.done is not None and not r.done.done():
            r.done.set_result(None)
