"""The A/B runner's operations on a real host: profiles, launcher, startup tracking, bench.

:class:`HostOps` implements :class:`tui.ab.runner.ServerOps` on top of

* :mod:`tui.profiles` (profile -> exact argv/env; ``--demo`` swaps the executable),
* :mod:`tui.services.launcher` (detached launch, run folders, stop with the
  PID-reuse guard and the wait for the GPUs to release the run's processes),
* the startup tracker when present (:mod:`tui.services.tracker`), else a
  small follower here: the server log through :class:`LogParser` for phases,
  progress and the failure diagnosis, ``GET /health`` and the process for
  readiness,
* ``tunedeck bench`` as a **subprocess** (its own process, so the caller's
  event loop — the TUI — never skews the timestamps), reading its JSON-lines
  progress and its summary.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from tui.ab.plans import Plan, PlanLevel
from tui.ab.runner import (
    BenchResult,
    LaunchHandle,
    ProfileInfo,
    ReadyResult,
    RunningServer,
    StopResult,
)
from tui.services.hosts import Host
from tui.util.aio import terminate_group

#: the longest a start may take before the A/B gives up on it (a 547 GB load takes ~10 min)
DEFAULT_READY_TIMEOUT = float(os.environ.get("TUNEDECK_AB_READY_TIMEOUT", "1800"))
REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def _num_or_none(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


class HostOps:
    """ServerOps over a :class:`Host` (the demo host, this machine or SSH)."""

    def __init__(
        self,
        host: Host,
        *,
        demo: bool = False,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
        stop_grace: float = 30.0,
        gpu_wait: float = 60.0,
        python: str = sys.executable,
    ) -> None:
        self.host = host
        self.demo = demo
        self.host_label = "demo" if demo else host.target
        self.ready_timeout = ready_timeout
        self.stop_grace = stop_grace
        self.gpu_wait = gpu_wait
        self.python = python
        self._records: dict[str, Any] = {}

    # ------------------------------------------------------------------ profiles
    async def resolve(self, profile: str) -> ProfileInfo:
        from tui.profiles.builder import build_command
        from tui.profiles.store import ProfileStore

        prof = ProfileStore().get(profile)
        cmd = build_command(prof, demo=self.demo)
        errors = [w for w in getattr(cmd, "warnings", ()) if getattr(w, "severity", "") == "error"]
        if errors:
            raise ValueError("; ".join(str(e) for e in errors))
        argv = list(cmd.argv)
        if self.demo and argv[:3] == [sys.executable, "-m", "tui"]:
            # ``python -m tui`` only imports from a source checkout's cwd; the launched server runs
            # in its run folder. The demo host's PATH has a ``tunedeck`` shim that sets PYTHONPATH.
            argv = ["tunedeck", *argv[3:]]
        served = prof.model
        for k, v in getattr(prof, "flags", ()) or ():
            if k in ("served-model-name", "served_model_name") and isinstance(v, str):
                served = v
        return ProfileInfo(
            name=prof.name,
            engine=prof.engine,
            model=prof.model,
            argv=tuple(argv),
            env=dict(cmd.env_dict() if callable(getattr(cmd, "env_dict", None)) else dict(cmd.env)),
            port=int(prof.effective_port() if callable(getattr(prof, "effective_port", None)) else prof.port),
            served_model=served,
            profile=prof,
        )

    # ------------------------------------------------------------------ running servers
    async def running_servers(self) -> list[RunningServer]:
        from tui.services import launcher

        from tui.services.hosts import HostError

        runs = None
        for attempt in range(3):  # read-only: a slow first SSH handshake or a blip is retried
            try:
                runs = await launcher.list_host_runs(self.host)
                break
            except HostError as e:
                if not e.retryable or attempt == 2:
                    raise
                await asyncio.sleep(1.0 + attempt)
        out = []
        for h in runs or ():
            if h.alive:
                prof = h.meta.get("profile") if isinstance(h.meta, Mapping) else None
                out.append(RunningServer(h.run_id, f"run {h.run_id}" + (f" ({prof})" if prof else "")
                                         + (f", pid {h.pid}" if h.pid else ""), h))
        return out

    async def stop_running(self, server: RunningServer) -> StopResult:
        from tui.services import launcher

        recs = await launcher.reattach(self.host)
        rec = next((r for r in recs if r.run_id == server.id), None) or launcher.RunStore().load(server.id)
        if rec is None:
            return StopResult(False, None, f"run {server.id}: no record")
        return self._stop_result(await launcher.stop_run(self.host, rec, grace=self.stop_grace,
                                                         gpu_wait=self.gpu_wait))

    @staticmethod
    def _stop_result(res: Any) -> StopResult:
        ok = res.state in ("stopped", "exited", "stale")
        return StopResult(ok, res.gpu_released if ok else None, res.message)

    # ------------------------------------------------------------------ launch / ready
    async def launch(self, info: ProfileInfo) -> LaunchHandle:
        from tui.services import launcher

        try:
            rec = await launcher.launch(
                self.host, list(info.argv), dict(info.env), engine=info.engine, port=info.port,
                profile=info.name,
            )
        except launcher.LaunchRefused as e:
            raise RuntimeError(str(e)) from None
        self._records[rec.run_id] = rec
        local = await self.host.forward_port(info.port)
        log = f"{rec.run_dir}/log" if rec.run_dir else None
        return LaunchHandle(rec.run_id, log, f"http://127.0.0.1:{local}", rec)

    async def wait_ready(
        self, info: ProfileInfo, handle: LaunchHandle, on_progress: Callable[[str, float | None], None]
    ) -> ReadyResult:
        tracked = await self._wait_with_tracker(info, handle, on_progress)
        if tracked is not None:
            return tracked
        return await self._wait_fallback(info, handle, on_progress)

    async def _wait_with_tracker(self, info, handle, on_progress) -> ReadyResult | None:
        """The launcher's startup tracker: log phases, /health, liveness, stall, ETA, diagnosis."""
        try:
            from tui.services import tracker
            from tui.services.launcher import RunStore
        except ImportError:
            return None
        rec = handle.handle

        def cb(p) -> None:
            text = tracker.format_progress(p)
            text = text.split("] ", 1)[-1] if text.startswith("[") else text
            on_progress(" ".join(text.split()), p.fraction)

        snap = await tracker.wait_ready(self.host, rec, timeout=self.ready_timeout, on_update=cb)
        saved = RunStore().load(rec.run_id) or rec
        t0 = saved.started or saved.created or 0.0
        timeline = tuple(
            {**e, "t": round(float(e["t"]) - t0, 3)} if isinstance(e.get("t"), (int, float)) and t0 else dict(e)
            for e in (saved.timeline or ())
        )
        if snap.state == "ready":
            return ReadyResult(True, snap.elapsed, timeline=timeline)
        diag = snap.diagnosis or (f"not ready after {self.ready_timeout:g} s" if snap.state == "starting"
                                  else f"server {snap.state}")
        return ReadyResult(False, snap.elapsed, diag, snap.proof, timeline)

    async def _wait_fallback(self, info, handle, on_progress) -> ReadyResult:
        import httpx

        from tui.collectors.logparse import LogParser
        from tui.services import launcher

        rec = handle.handle
        parser = LogParser(info.engine)
        offset = 0
        t0 = rec.started or time.time()
        start = time.monotonic()
        timeline: list[dict[str, Any]] = [{"t": 0.0, "phase": "process-start"}]
        last_desc = ""
        last_alive_check = 0.0
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                if handle.server_log:
                    try:
                        data = await launcher.read_log(self.host, handle.server_log, offset)
                    except Exception:  # noqa: BLE001 - a log hiccup is not a failure
                        data = b""
                    if data:
                        offset += len(data)
                        for ev in parser.feed(data):
                            ph = getattr(ev, "phase", None)
                            if getattr(ev, "event", "") == "phase" and ph and (
                                not timeline or timeline[-1]["phase"] != ph
                            ):
                                timeline.append({"t": round(time.time() - t0, 3), "phase": ph})
                st = parser.state
                if st.failure is not None:
                    f = st.failure
                    return ReadyResult(False, time.time() - t0, f.cause, f.line, tuple(timeline))
                desc = st.describe()
                frac = st.phase_progress()
                if desc != last_desc or frac is not None:
                    on_progress(desc, frac)
                    last_desc = desc
                try:
                    r = await client.get(f"{handle.url}/health")
                    healthy = r.status_code == 200
                except httpx.HTTPError:
                    healthy = False
                if healthy:
                    took = time.time() - t0
                    timeline.append({"t": round(took, 3), "phase": "ready"})
                    on_progress("ready", 1.0)
                    return ReadyResult(True, took, timeline=tuple(timeline))
                now = time.monotonic()
                if now - last_alive_check > 1.0 and rec.pid:
                    last_alive_check = now
                    alive = await launcher.process_alive(self.host, rec.pid, rec.starttime)
                    if not alive:
                        await asyncio.sleep(0.3)
                        if handle.server_log:
                            try:
                                data = await launcher.read_log(self.host, handle.server_log, offset)
                                for _ in parser.feed(data):
                                    pass
                                parser.finish()
                            except Exception:  # noqa: BLE001
                                pass
                        f = parser.state.failure
                        rc = await launcher.read_rc(self.host, rec.run_dir) if rec.run_dir else None
                        if f is not None:
                            return ReadyResult(False, time.time() - t0, f.cause, f.line, tuple(timeline))
                        return ReadyResult(False, time.time() - t0,
                                           f"the server process exited (rc {rc if rc is not None else '?'}) "
                                           "before it was ready", None, tuple(timeline))
                if now - start > self.ready_timeout:
                    return ReadyResult(False, time.time() - t0,
                                       f"not ready after {self.ready_timeout:g} s ({desc})", None, tuple(timeline))
                await asyncio.sleep(0.5)

    # ------------------------------------------------------------------ cache, metrics
    async def flush_cache(self, info: ProfileInfo, handle: LaunchHandle) -> str:
        """SGLang ``/flush_cache`` (retried while requests drain: 400), vLLM ``/reset_prefix_cache``."""
        import httpx

        path = "/flush_cache" if info.engine == "sglang" else "/reset_prefix_cache"
        try:
            async with httpx.AsyncClient(timeout=10.0) as client:
                for attempt in range(10):
                    r = await client.post(f"{handle.url}{path}")
                    if r.status_code == 200:
                        return f"prefix cache flushed ({path})"
                    if r.status_code == 400 and info.engine == "sglang" and attempt < 9:
                        await asyncio.sleep(0.5)
                        continue
                    break
                hint = " (vLLM needs VLLM_SERVER_DEV_MODE=1)" if info.engine == "vllm" else ""
                return f"cache not flushed: {path} answered HTTP {r.status_code}{hint}"
        except httpx.HTTPError as e:
            return f"cache not flushed: {path}: {type(e).__name__}"

    async def acceptance_rate(self, info: ProfileInfo, handle: LaunchHandle) -> float | None:
        """SGLang's ``sglang:spec_accept_rate`` gauge (0-1) as %, when the server exports it."""
        if info.engine != "sglang":
            return None
        import httpx

        try:
            async with httpx.AsyncClient(timeout=5.0) as client:
                r = await client.get(f"{handle.url}/metrics")
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        m = re.search(r"^sglang:spec_accept_rate(?:\{[^}]*\})?\s+([0-9.eE+-]+)", r.text, re.MULTILINE)
        if not m:
            return None
        v = float(m.group(1))
        if v <= 0:
            return None
        return v * 100.0 if v <= 1.0 else v

    # ------------------------------------------------------------------ bench
    def bench_argv(self, info: ProfileInfo, handle: LaunchHandle, plan: Plan, level: PlanLevel,
                   out: Path, labels: Mapping[str, str]) -> list[str]:
        argv = [
            self.python, "-m", "tui", "bench",
            "--url", handle.url,
            "--model", info.served_model or info.model,
            "--endpoint", plan.endpoint,
            "--concurrency", str(level.concurrency),
            "--num-prompts", str(level.num_prompts),
            "--input-len", str(level.input_len),
            "--output-len", str(level.output_len),
            "--warmup", str(level.warmup),
            "--ignore-eos" if plan.ignore_eos else "--no-ignore-eos",
            "--temperature", f"{plan.temperature:g}",
            "--seed", str(plan.seed),
            "--profile", info.name,
            "--label", f"ab-{labels.get('side', '')}-{info.name}",
            "--meta-json", str(out.parent / "meta.json"),
            "--progress",
            "--json", str(out),
        ]
        if level.request_rate:
            argv += ["--request-rate", f"{level.request_rate:g}"]
        return argv

    @staticmethod
    def bench_meta(info: ProfileInfo, handle: LaunchHandle, labels: Mapping[str, str]) -> dict[str, Any]:
        """What the bench records in meta.json about the server (secrets are redacted there)."""
        return {
            "server": {"argv": list(info.argv), "env": dict(info.env), "engine": info.engine,
                       "launch_run_id": handle.run_id, "server_log": handle.server_log},
            "ab": dict(labels),
        }

    async def bench(
        self,
        info: ProfileInfo,
        handle: LaunchHandle,
        plan: Plan,
        level: PlanLevel,
        on_progress: Callable[[str, float | None], None],
        labels: Mapping[str, str],
    ) -> BenchResult:
        tmp = Path(tempfile.mkdtemp(prefix="tunedeck-ab-"))
        out = tmp / "result.json"
        argv = self.bench_argv(info, handle, plan, level, out, labels)
        from tui.util.safety import redact_env

        meta = self.bench_meta(info, handle, labels)
        meta["server"]["env"] = redact_env(meta["server"]["env"])
        (tmp / "meta.json").write_text(json.dumps(meta))
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
            cwd=str(REPO_ROOT), start_new_session=True,
        )
        run_id: str | None = None
        last: dict[str, Any] = {}
        level_summary: dict[str, Any] | None = None
        err_tail = b""

        async def read_err() -> None:
            nonlocal err_tail
            assert proc.stderr is not None
            async for line in proc.stderr:
                err_tail = (err_tail + line)[-4000:]

        et = asyncio.create_task(read_err())
        try:
            assert proc.stdout is not None
            async for raw in proc.stdout:
                try:
                    ev = json.loads(raw)
                except ValueError:
                    continue
                if not isinstance(ev, dict):
                    continue
                last = ev
                run_id = ev.get("run_id") or run_id
                if ev.get("type") == "level_done" and isinstance(ev.get("summary"), dict):
                    level_summary = ev["summary"]
                if ev.get("type") == "error":
                    err_tail += f"{ev.get('kind', 'error')}: {ev.get('message', '')}\n".encode()
                msg, frac = _progress_text(ev, level)
                if msg:
                    on_progress(msg, frac)
            rc = await proc.wait()
            await et
        except asyncio.CancelledError:
            await _terminate(proc)
            et.cancel()
            raise
        summary: Any = None
        try:
            summary = json.loads(out.read_text())
        except (OSError, ValueError):
            summary = level_summary
        finally:
            for f in (out, tmp / "meta.json"):
                try:
                    f.unlink()
                except OSError:
                    pass
            try:
                tmp.rmdir()
            except OSError:
                pass
        if isinstance(summary, dict):
            run_id = summary.get("run_id") or run_id
            inner = _level_summary(summary, level.concurrency)
            result_dir = summary.get("result_dir") or summary.get("run_dir")
            if inner is not None:
                return BenchResult(run_id, inner, result_dir)
        err = err_tail.decode("utf-8", "replace").strip().splitlines()
        why = err[-1] if err else f"exit status {rc}"
        return BenchResult(run_id, {}, None, f"tunedeck bench failed: {why}")

    # ------------------------------------------------------------------ stop
    async def stop(self, info: ProfileInfo, handle: LaunchHandle) -> StopResult:
        from tui.services import launcher

        rec = handle.handle
        res = await launcher.stop_run(self.host, rec, grace=self.stop_grace, gpu_wait=self.gpu_wait)
        return self._stop_result(res)


def _level_summary(obj: Mapping[str, Any], concurrency: int) -> dict[str, Any] | None:
    from tui.ab.compare import summaries_to_levels

    levels = summaries_to_levels(obj)
    for lv in levels:
        if lv.concurrency == concurrency:
            return dict(lv.summary)
    if len(levels) == 1:
        return dict(levels[0].summary)
    return None


def _progress_text(ev: Mapping[str, Any], level: PlanLevel) -> tuple[str, float | None]:
    done = _num_or_none(ev.get("completed"))
    failed = _num_or_none(ev.get("failed")) or 0
    total = _num_or_none(ev.get("total")) or level.num_prompts
    tput = _num_or_none(ev.get("tok_s") or ev.get("output_tok_s") or ev.get("output_throughput"))
    if done is None:
        kind = ev.get("type") or ev.get("event") or ev.get("kind")
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


async def _terminate(proc: asyncio.subprocess.Process) -> None:
    import signal

    await terminate_group(proc, first=signal.SIGINT, grace=5)  # SIGINT: the bench writes a partial summary


__all__ = ["HostOps"]
