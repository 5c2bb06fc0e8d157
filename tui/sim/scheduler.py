"""Serving: requests in, continuous batching (or fixed timing) driven by :mod:`tunedeck.sim.perf`,
tokens out in the engine's format (:mod:`tunedeck.sim.formats`), the engines' decode log lines and gauges."""

from __future__ import annotations

import asyncio
import json
import random
import time

from tunedeck.sim import perf
from tunedeck.sim.clock import FixedClock
from tunedeck.sim.formats import Formats, Req
from tunedeck.sim.state import ServerState


class Scheduler:
    """The continuous-batching scheduler and what a request goes through, on the server's state."""

    def __init__(self, state: ServerState, formats: Formats) -> None:
        self.state = state
        self.cfg = state.cfg
        self.e = state.cfg.engine
        self.formats = formats
        # the same objects as the state's, read on every token
        self.metrics = state.metrics
        self.cache = state.cache
        self.log = state.log
        self.loop: asyncio.AbstractEventLoop | None = None
        #: set when a request arrives while the scheduler sleeps
        self.wake: asyncio.Event | None = None
        self.clock: FixedClock | None = None
        self.decode_steps_since_log = 0
        self.gen_since_log = 0
        self.log_t = 0.0
        #: tokens and verify steps since the last decode line (its ``accept len``)
        self.accept_sum = 0
        self.accept_n = 0

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to the server's event loop (before the first request)."""
        self.loop = loop
        self.wake = asyncio.Event()

    # ------------------------------------------------------------------ requests
    def submit(self, r: Req) -> None:
        """Hand a new request to the fixed clock or the scheduler; its chunks follow from there."""
        if self.cfg.fixed:
            self._fixed_start(r)
        else:
            self.state.waiting.append(r)
            self.metrics.waiting = len(self.state.waiting)
            assert self.wake is not None
            self.wake.set()

    # ---- fixed timing (bypasses the model: exact TTFT and inter-token delay, see tunedeck.sim.clock)
    def _fixed_start(self, r: Req) -> None:
        if self.clock is None:
            assert self.loop is not None
            self.clock = FixedClock(self.loop, self.cfg.fixed_ttft, self.cfg.fixed_itl, self._fixed_emit)
        r.admitted = r.arrival
        self.state.running.append(r)
        self.metrics.running = len(self.state.running)
        self.clock.add(r)

    def _fixed_emit(self, r: Req, now: float) -> None:
        if r.out == 0:
            self.metrics.prompt_tokens += r.prompt_tokens
        self.emit(r, 1, now)

    # ---- continuous batching
    async def run(self) -> None:
        """The scheduler loop, for the life of the server (a background task)."""
        loop = asyncio.get_running_loop()
        assert self.wake is not None
        rng = random.Random(self.cfg.seed * 31 + 7)
        pc = self.cfg.perf
        k = pc.decode_steps if self.e == "sglang" else 1
        if self.cache is not None:
            self.cache.resize(self.state.kv_tokens // self.cache.block)
        t_next = loop.time()
        step = 0
        self.log_t = loop.time()
        while True:
            if not self.state.running and not self.state.waiting and self.state.chunked is None:
                self.wake.clear()
                self.update_gauges()
                await self.wake.wait()
                t_next = loop.time()
            now = loop.time()
            if t_next < now - 0.05:
                t_next = now - 0.05  # never burst more than ~50 ms of backlog
            sched: list[tuple[Req, int]] = []
            if self.e == "sglang":
                if self.state.chunked is not None or step % k == 0 or not self.state.running:
                    sched = self._sglang_batch(max(now, t_next))
                if sched:
                    t_next = await self._sglang_prefill(sched, rng, t_next)
                    continue
            else:
                self._vllm_preempt()
                sched = self._vllm_schedule(max(now, t_next))
            b = sum(1 for r in self.state.running if r.todo == 0) + sum(1 for r, take in sched if take == r.todo)
            if b == 0 and not sched:
                if not self.state.waiting:
                    continue
                await self._sleep_until(t_next + 0.001)  # a prompt that fits nowhere waits for KV to free
                t_next = loop.time()
                continue
            dur = perf.decode_step_time(pc, b) * perf.jitter(rng)
            newtoks = sum(take for _r, take in sched)
            if newtoks:
                dur += perf.prefill_time(pc, newtoks)
            t_next += dur / self.cfg.speed
            await self._sleep_until(t_next)
            tnow = loop.time()
            for r, take in sched:
                self._prefilled(r, take)
            gen = 0
            spec = self.cfg.spec
            for r in self.state.running:
                if r.finish is not None or r.todo:
                    continue
                n = 1
                if spec is not None and r.out > 0:
                    acc = perf.sample_accepted(spec, rng, r.alpha)
                    n = 1 + acc
                    self.accept_sum += n
                    self.accept_n += 1
                    r.verify_ct += 1
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
                if self.decode_steps_since_log >= self.cfg.decode_log_interval:
                    self._sglang_decode_log(tnow)

    # ---- prefix cache, prefill chunks, KV room
    def _lookup(self, r: Req) -> None:
        """How much of ``r``'s prompt the prefix cache holds (``cached``) and what is left to prefill (``todo``).

        At least the last prompt token is always computed, as both engines do; a request preempted
        after generating recomputes its generated tokens too (they are not in the cache).
        """
        cached = 0
        cache = self.cache
        if cache is not None and r.hashes:
            cached = cache.match(r.hashes, (r.prompt_tokens - 1) // cache.block) * cache.block
        r.cached = cached
        r.todo = r.prompt_tokens + r.out - cached

    def _admit(self, r: Req, now: float) -> None:
        """``r`` leaves the queue: its cache lookup counts in the metrics."""
        self.state.waiting.popleft()
        if not r.admitted:
            r.admitted = now
        if self.cache is not None:
            self.metrics.prefix_queries += r.prompt_tokens
            self.metrics.prefix_hits += r.cached

    def _prefilled(self, r: Req, take: int) -> None:
        """``take`` more prompt tokens of ``r`` were computed; a finished prompt enters the cache."""
        r.todo -= take
        if r.todo == 0:
            if r.out == 0:
                self.metrics.prompt_tokens += r.prompt_tokens
            if self.cache is not None and r.hashes:
                self.cache.insert(r.hashes)

    def _kv_room(self, r: Req, extra: int) -> bool:
        """Whether ``r``'s prompt (and what it generated) fits in the KV cache beside the running
        requests and ``extra`` tokens admitted this step; with nothing running it always goes."""
        if not self.state.kv_tokens or (not self.state.running and not extra):
            return True
        used: int = self.metrics.used_tokens
        return used + extra + r.prompt_tokens + r.out <= self.state.kv_tokens

    def _next_waiting(self, extra: int) -> Req | None:
        """The first waiting request (those finished while they waited dropped), its prefix looked
        up, when its KV fits beside ``extra`` tokens admitted this step; None: nothing to admit now."""
        waiting = self.state.waiting
        while waiting and waiting[0].finish is not None:
            waiting.popleft()
        if not waiting:
            return None
        r = waiting[0]
        self._lookup(r)
        return r if self._kv_room(r, extra) else None

    def _sglang_batch(self, now: float) -> list[tuple[Req, int]]:
        """The next prefill batch: (request, prompt tokens computed now).

        The request being chunked goes first; new requests follow while the batch stays within
        ``--max-prefill-tokens`` and the chunk size (``--chunked-prefill-size``); a prompt larger
        than what is left is cut to it and continued in the next batches (decode waits meanwhile).
        With chunking off, a prompt over the budget runs alone.
        """
        batch: list[tuple[Req, int]] = []
        budget = self.cfg.prefill_budget
        chunk = self.cfg.chunk_size
        room = budget if chunk is None else min(budget, chunk)
        c = self.state.chunked
        if c is not None:
            take = min(c.todo, room)
            batch.append((c, take))
            if take < c.todo:
                return batch
            self.state.chunked = None
            room -= take
        extra = 0
        while len(self.state.running) + len(batch) < self.cfg.max_running:
            r = self._next_waiting(extra)
            if r is None:
                break
            if r.todo <= room or (not batch and chunk is None):
                take = r.todo
            elif chunk is not None and room > 0:
                take = room
            else:
                break
            self._admit(r, now)
            batch.append((r, take))
            extra += r.prompt_tokens
            room -= take
            if take < r.todo:
                self.state.chunked = r
                break
        return batch

    async def _sglang_prefill(self, batch: list[tuple[Req, int]], rng: random.Random, t_next: float) -> float:
        """Run one SGLang prefill batch; the requests whose prompt is done get their first token."""
        loop = asyncio.get_running_loop()
        toks = sum(take for _r, take in batch)
        # cache hits of the requests starting here (a continued chunk's earlier chunks count as new
        # tokens, not hits, in SGLang's PrefillAdder)
        cached = sum(r.cached for r, _take in batch if r.todo == r.prompt_tokens - r.cached)
        dur = perf.prefill_time(self.cfg.perf, toks) * perf.jitter(rng)
        t_next += dur / self.cfg.speed
        await self._sleep_until(t_next)
        tnow = loop.time()
        done = []
        for r, take in batch:
            self._prefilled(r, take)
            if r.todo == 0:
                done.append(r)
        self.metrics.cache_hit_rate = cached / max(1, cached + toks)
        self.state.running.extend(done)
        self.update_gauges()
        self.log.sg(
            f"Prefill batch, #new-seq: {len(batch)}, #new-token: {toks}, #cached-token: {cached}, token usage: {self.metrics.token_usage:.2f}, "
            f"#running-req: {len(self.state.running) - len(done)}, #queue-req: {len(self.state.waiting)}, #pending-token: 0, "
            f"cuda graph: False, input throughput (token/s): {toks / max(1e-6, dur):.2f}",
            rank=0,
        )
        for r in done:
            self.emit(r, 1, tnow)
        self._finish_done()
        self._step_done()
        return t_next

    def _vllm_schedule(self, now: float) -> list[tuple[Req, int]]:
        """One vLLM step's prefill work within ``--max-num-batched-tokens``: running decodes take
        1 token each (1 + drafts under speculative decoding), partly prefilled requests continue,
        then waiting requests start, each prompt cut to the tokens left (chunked prefill)."""
        per_decode = 1 + (self.cfg.spec.num_steps if self.cfg.spec is not None else 0)
        budget = self.cfg.prefill_budget
        sched: list[tuple[Req, int]] = []
        for r in self.state.running:
            if r.todo == 0 and r.finish is None:
                budget -= per_decode
        for r in self.state.running:
            if r.todo > 0 and budget > 0:
                take = min(r.todo, budget)
                sched.append((r, take))
                budget -= take
        extra = 0
        while len(self.state.running) < self.cfg.max_running and budget > 0:
            new = self._next_waiting(extra)
            if new is None:
                break
            self._admit(new, now)
            take = min(new.todo, budget)
            self.state.running.append(new)
            sched.append((new, take))
            extra += new.prompt_tokens + new.out
            budget -= take
        return sched

    def _vllm_preempt(self) -> None:
        """A full KV cache preempts the most recently admitted running requests (recompute: back to
        the front of the queue, their KV freed), as vLLM's scheduler does."""
        if not self.state.kv_tokens:
            return
        need = sum(r.prompt_tokens + r.out + 1 for r in self.state.running if r.finish is None)
        while need > self.state.kv_tokens and len(self.state.running) > 1:
            r = self.state.running.pop()
            if r.finish is not None:
                continue
            need -= r.prompt_tokens + r.out + 1
            r.todo = -1
            r.cached = 0
            self.state.waiting.appendleft(r)
            self.metrics.preemptions += 1
            self.update_gauges()

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
        self.state.last_gen_tput = tput
        self.metrics.gen_throughput = tput
        spec = ""
        if self.cfg.spec and self.accept_n:
            # the gauges are this interval's figures, as SGLang's scheduler sets them at each decode line
            al = self.accept_sum / self.accept_n
            spec = f"accept len: {al:.2f}, accept rate: {(al - 1) / self.cfg.spec.num_steps:.2f}, "
            self.metrics.spec_accept_length = al
            self.metrics.spec_accept_rate = (al - 1) / self.cfg.spec.num_steps
            self.metrics.spec_num_steps = self.cfg.spec.num_steps
            self.metrics.spec_num_draft_tokens = self.cfg.spec.draft_tokens
            self.state.accept_total_sum += self.accept_sum
            self.state.accept_total_n += self.accept_n
            self.accept_sum = self.accept_n = 0
        graph = len(self.state.running) <= self.cfg.perf.cuda_graph_max_bs and not self.cfg.perf.enforce_eager
        self.log.sg(
            f"Decode batch, #running-req: {len(self.state.running)}, #token: {self.metrics.used_tokens}, token usage: {self.metrics.token_usage:.2f}, "
            f"{spec}cuda graph: {graph}, gen throughput (token/s): {tput:.2f}, #queue-req: {len(self.state.waiting)}",
            rank=0,
        )
        self.decode_steps_since_log = 0
        self.gen_since_log = 0
        self.log_t = now

    def _step_done(self) -> None:
        if self.state.step_waiters:
            ws, self.state.step_waiters = self.state.step_waiters, []
            for answer in ws:
                answer()

    def update_gauges(self) -> None:
        m = self.metrics
        m.running = len(self.state.running)
        m.waiting = len(self.state.waiting)
        used = sum(r.prompt_tokens + r.out for r in self.state.running)
        m.used_tokens = used
        m.token_usage = min(1.0, used / self.state.kv_tokens) if self.state.kv_tokens else 0.0

    def _finish_done(self) -> None:
        if any(r.finish is not None for r in self.state.running):
            self.state.running = [r for r in self.state.running if r.finish is None]

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
            self.abort(r)
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
            r.text.append(self.formats.words(r.wpos + pos, n))
        if r.stream and conn is not None:
            frames = self.formats.token_frames(r, r.wpos + pos, n, first)
            if r.finish is None:
                conn.write_frames(frames)
            else:
                conn.end_stream(frames + self.formats.end_frames(r))
        if self.state.rec_file is not None and not r.internal:
            r.times.append(time.time())
            r.counts.append(n)
        if r.finish is not None:
            self._complete(r, now)
        return n

    def abort(self, r: Req) -> None:
        """End ``r`` unfinished (its client went away, or the server stops)."""
        if r.finish is not None:
            return
        r.finish = "abort"
        r.aborted = True
        if self.e == "sglang":
            self.metrics.aborted += 1
        else:
            self.metrics.finished["abort"] += 1
        if r in self.state.running and self.cfg.fixed:
            self.state.running.remove(r)
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
        m.spec_verify_calls += r.verify_ct  # SGLang counts a request's verify steps when it finishes
        m.finished[r.finish or "stop"] = m.finished.get(r.finish or "stop", 0) + 1
        if self.cfg.fixed and r in self.state.running:
            self.state.running.remove(r)
            m.running = len(self.state.running)
        if not r.stream:
            self.formats.respond(r)
        if self.state.rec_file is not None and not r.internal:
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
                self.state.rec_file.write(json.dumps(rec, separators=(",", ":")) + "\n")
            except (OSError, ValueError):
                pass
        if r.done is not None and not r.done.done():
            r.done.set_result(None)
