"""The A/B runner's operations on the host it runs on (the host-side runtime's side of an A/B).

:class:`LocalOps` implements :class:`tunedeck.ab.ops.ServerOps` next to the GPUs:

* the profiles arrive resolved (argv, env, port) from the laptop, which read them;
* :mod:`tunedeck.hostops.launcher` launches detached, :mod:`~tunedeck.hostops.hostruns` finds runs and
  :mod:`~tunedeck.hostops.runstop` stops them (PID-reuse guard, wait for the GPUs to release the
  run's processes);
* :mod:`tunedeck.hostops.tracker` follows the startup (log phases, ``/health``,
  liveness, stall, diagnosis);
* the benchmark runs in this process (:func:`tunedeck.bench.runner.run_benchmark`)
  against the server's own loopback; its results land in this job's results store.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Mapping

from tunedeck.ab import ops
from tunedeck.ab.plan import PlanLevel
from tunedeck.bench.counters import COUNTED_SPEC, Snapshot, level_figures, parse_counters
from tunedeck.hostops import hostruns, launcher, runstop, runstore, startupstate, tracker
from tunedeck.hostops.hosts import Host
from tunedeck.hostops.localhost import LocalHost
from tunedeck.util import http
from tunedeck.util.safety import flag_value, redact_argv, redact_env

log = logging.getLogger(__name__)

#: the longest a start may take before the A/B gives up on it (a 547 GB load takes ~10 min)
DEFAULT_READY_TIMEOUT = 1800.0


class LocalOps:
    """ServerOps on this machine, for an A/B whose profiles were resolved by the laptop."""

    def __init__(
        self,
        infos: Mapping[str, ops.ProfileInfo],
        *,
        host: Host | None = None,
        host_label: str = "local",
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
        stop_grace: float = 30.0,
        gpu_wait: float = 60.0,
    ) -> None:
        self.host = host or LocalHost()
        self.infos = dict(infos)
        self.host_label = host_label
        self.ready_timeout = ready_timeout
        self.stop_grace = stop_grace
        self.gpu_wait = gpu_wait

    # ------------------------------------------------------------------ profiles
    async def resolve(self, profile: str) -> ops.ProfileInfo:
        info = self.infos.get(profile)
        if info is None:
            raise ValueError(f"profile {profile!r} was not sent with the A/B")
        return info

    # ------------------------------------------------------------------ running servers
    async def running_servers(self) -> list[ops.RunningServer]:
        out = []
        for h in await hostruns.list_host_runs(self.host):
            if h.alive:
                prof = h.meta.get("profile") if isinstance(h.meta, Mapping) else None
                out.append(
                    ops.RunningServer(
                        h.run_id,
                        f"run {h.run_id}" + (f" ({prof})" if prof else "") + (f", pid {h.pid}" if h.pid else ""),
                        h,
                        str(prof) if prof else None,
                    )
                )
        return out

    async def stop_running(self, server: ops.RunningServer) -> ops.StopResult:
        recs = await hostruns.reattach(self.host)
        rec = next((r for r in recs if r.run_id == server.id), None) or runstore.RunStore().load(server.id)
        if rec is None:
            return ops.StopResult(False, None, f"run {server.id}: no record")
        return self._stop_result(await runstop.stop_run(self.host, rec, grace=self.stop_grace, gpu_wait=self.gpu_wait))

    @staticmethod
    def _stop_result(res: runstop.StopResult) -> ops.StopResult:
        ok = res.state in ("stopped", "exited", "stale")
        return ops.StopResult(ok, res.gpu_released if ok else None, res.message)

    # ------------------------------------------------------------------ launch / ready
    async def launch(self, info: ops.ProfileInfo) -> ops.LaunchHandle:
        try:
            rec = await launcher.launch(
                self.host,
                list(info.argv),
                dict(info.env),
                engine=info.engine,
                port=info.port,
                profile=info.name,
            )
        except launcher.LaunchRefused as e:
            raise RuntimeError(str(e)) from None
        log_path = f"{rec.run_dir}/log" if rec.run_dir else None
        return ops.LaunchHandle(rec.run_id, log_path, f"http://127.0.0.1:{info.port}", rec)

    async def wait_ready(
        self, info: ops.ProfileInfo, handle: ops.LaunchHandle, on_progress: Callable[[str, float | None], None]
    ) -> ops.ReadyResult:
        """The startup tracker: log phases, /health, liveness, stall, ETA, diagnosis."""
        rec = handle.handle

        def cb(p: Any) -> None:
            text = startupstate.format_progress(p)
            text = text.split("] ", 1)[-1] if text.startswith("[") else text
            on_progress(" ".join(text.split()), p.fraction)

        snap = await tracker.wait_ready(self.host, rec, timeout=self.ready_timeout, on_update=cb)
        saved = runstore.RunStore().load(rec.run_id) or rec
        t0 = saved.started or saved.created or 0.0
        timeline = tuple(
            {**e, "t": round(float(t) - t0, 3)} if isinstance(t := e.get("t"), (int, float)) and t0 else dict(e)
            for e in (saved.timeline or ())
        )
        if snap.state == "ready":
            return ops.ReadyResult(True, snap.elapsed, timeline=timeline)
        diag = snap.diagnosis or (
            f"not ready after {self.ready_timeout:g} s" if snap.state == "starting" else f"server {snap.state}"
        )
        return ops.ReadyResult(False, snap.elapsed, diag, snap.proof, timeline)

    # ------------------------------------------------------------------ cache, metrics
    async def flush_cache(self, info: ops.ProfileInfo, handle: ops.LaunchHandle) -> str:
        return await flush_prefix_cache(info.engine, handle.url)

    async def acceptance_rate(self, info: ops.ProfileInfo, handle: ops.LaunchHandle) -> tuple[float | None, str | None]:
        """The side's fallback for levels whose summary has no acceptance rate: (%, what it is).

        Each level's summary already holds the figures of the server's counters over that level
        (:func:`tunedeck.bench.counters.level_figures`); where the server has those counters, nothing
        else is read: a gauge would mix another span into the level's figures. Only a server
        without them gives its gauges, read by the same function and labelled as what they are."""
        try:
            r = await http.request("GET", f"{handle.url}/metrics", timeout=5.0)
        except http.HttpError as e:
            log.info("acceptance rate not read: %s", e)
            return None, None
        if r.status != 200:
            log.info("acceptance rate not read: %s/metrics answered HTTP %s", handle.url, r.status)
            return None, None
        return gauge_acceptance(parse_counters(r.text))

    # ------------------------------------------------------------------ bench
    async def bench(self, info: ops.ProfileInfo, handle: ops.LaunchHandle, req: ops.LevelRequest) -> ops.BenchResult:
        from tunedeck.bench.config import NotReady
        from tunedeck.bench.runner import run_benchmark
        from tunedeck.bench.store import StoreError

        cfg = level_config(info, handle.url, req)
        rec = handle.handle
        if (flag_value(info.argv, "--api-key") or info.env.get(launcher.API_KEY_ENV)) and getattr(rec, "run_dir", None):
            cfg.api_key_file = f"{rec.run_dir}/{launcher.API_KEY_FILE}"  # the run's 0600 key file
        meta = {
            "server": {
                "argv": redact_argv(info.argv),
                "env": redact_env(info.env),
                "engine": info.engine,
                "launch_run_id": handle.run_id,
                "server_log": handle.server_log,
            },
            "ab": dict(req.labels),
            "profile": info.name,
        }

        # the level's GPU and server timeline, and its validity findings (tunedeck.hostside.timeline)
        from tunedeck.hostside.timeline import Timeline

        timeline = Timeline(cfg.url)

        def emit(ev: dict[str, Any]) -> None:
            timeline.on_event(ev)
            report_progress(req, ev)

        try:
            await timeline.start()
            await timeline.check_start()
            summaries = await run_benchmark(cfg, emit=emit, meta_extra=meta, client_where="host")
        except (NotReady, StoreError, OSError) as e:
            return ops.BenchResult(None, {}, None, f"benchmark failed: {e}")
        finally:
            await timeline.stop()
        if not summaries:
            return ops.BenchResult(None, {}, None, "benchmark failed: no level ran")
        s = summaries[0]
        rid = s.get("run_id")
        if rid is not None and rid in timeline.validity:
            s = {**s, "validity": timeline.validity[rid]}
        return ops.BenchResult(s.get("run_id"), s, None)

    # ------------------------------------------------------------------ stop
    async def stop(self, info: ops.ProfileInfo, handle: ops.LaunchHandle) -> ops.StopResult:
        res = await runstop.stop_run(self.host, handle.handle, grace=self.stop_grace, gpu_wait=self.gpu_wait)
        return self._stop_result(res)


async def flush_prefix_cache(engine: str, base_url: str) -> str:
    """SGLang ``/flush_cache`` (retried while requests drain: 400), vLLM ``/reset_prefix_cache``;
    the result as one line."""
    path = "/flush_cache" if engine == "sglang" else "/reset_prefix_cache"
    status = 0
    try:
        for attempt in range(10):
            r = await http.request("POST", f"{base_url}{path}", timeout=10.0)
            status = r.status
            if status == 200:
                return f"prefix cache flushed ({path})"
            if status == 400 and engine == "sglang" and attempt < 9:
                await asyncio.sleep(0.5)
                continue
            break
    except http.HttpError as e:
        return f"cache not flushed: {e}"
    hint = " (vLLM needs VLLM_SERVER_DEV_MODE=1)" if engine == "vllm" else ""
    return f"cache not flushed: {path} answered HTTP {status}{hint}"


def level_config(info: ops.ProfileInfo, url: str, req: ops.LevelRequest) -> Any:
    """The :class:`tunedeck.bench.config.BenchConfig` of ``req``'s plan level against ``url``."""
    from tunedeck.bench.config import BenchConfig

    plan, level = req.plan, req.level
    return BenchConfig(
        url=url,
        model=info.served_model or info.model,
        endpoint=plan.endpoint,
        num_prompts=level.num_prompts,
        input_len=level.input_len,
        output_len=level.output_len,
        concurrency=[level.concurrency],
        request_rate=[level.request_rate] if level.request_rate else [float("inf")],
        warmup=level.warmup,
        ignore_eos=plan.ignore_eos,
        temperature=plan.temperature,
        seed=plan.seed,
        label=f"ab-{req.labels.get('side', '')}-{info.name}",
        workload=plan.workload,
    )


def gauge_acceptance(snap: Snapshot) -> tuple[float | None, str | None]:
    """(acceptance rate %, the note saying what it is) from a server's gauges, or (None, None)
    where the server counts speculative decoding (its levels' summaries have the figures) or
    says nothing of it."""
    if any(k in snap for k in COUNTED_SPEC):
        return None, None
    figs = level_figures(snap, snap)  # no counter: only the gauges, as read now
    rate = figs["spec_decode_acceptance_rate"]
    if rate is None:
        return None, None
    notes = [n for n in str(figs["server_counters_note"] or "").split("; ") if "acceptance" in n]
    return rate, "; ".join(notes) or None


def _num_or_none(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def progress_text(ev: Mapping[str, Any], level: PlanLevel) -> tuple[str, float | None]:
    """One progress line (and fraction) for a benchmark progress event."""
    done = _num_or_none(ev.get("completed"))
    failed = _num_or_none(ev.get("failed")) or 0
    total = _num_or_none(ev.get("total")) or level.num_prompts
    tput = _num_or_none(ev.get("tok_s") or ev.get("output_tok_s") or ev.get("output_throughput"))
    if done is None:
        kind = ev.get("type")
        if kind == "waiting":
            return f"waiting for {ev.get('url')}", None
        if kind == "level_start":
            return f"warmup ({ev.get('warmup')} requests), then {ev.get('num_prompts')} timed requests", 0.0
        if kind == "error":
            return f"error: {ev.get('message')}", None
        return "", None
    frac = min(1.0, (done + failed) / total) if total else None
    msg = f"{int(done)}/{int(total)} requests" + (f", {int(failed)} failed" if failed else "")
    if tput is not None:
        msg += f", {tput:.0f} tok/s"
    return msg, frac


def report_progress(req: ops.LevelRequest, ev: Mapping[str, Any]) -> None:
    """Tell ``req``'s caller the progress a benchmark event says, where it says any."""
    msg, frac = progress_text(ev, req.level)
    if msg:
        req.on_progress(msg, frac)


__all__ = ["LocalOps", "flush_prefix_cache", "gauge_acceptance", "level_config", "progress_text", "report_progress"]
