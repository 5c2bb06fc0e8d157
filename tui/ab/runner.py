"""The A/B orchestrator: launch A, benchmark it, stop it, the same for B, compare.

Sequence per side (and per repeat with ``interleave``)::

    stop what is running (asks first) -> launch -> wait ready (progress events)
    -> flush the prefix cache -> benchmark each plan level (warmup first)
    -> stop -> confirm the GPU memory is freed

Without ``interleave`` each side is launched once and the plan is run
``repeats`` times on it (cache flushed before each repeat): A A A, B B B.
With ``interleave`` every repeat relaunches: A B A B ... (drift between
the two shows up as noise instead of as a difference; costs a load per run).

Cancel (:meth:`ABRunner.cancel`, or cancelling the task) at any point
stops the server this run started and keeps every finished result. If A or
B fails to start, the run stops with the tracker's diagnosis, keeps what it
has, and leaves nothing running.

What the runner does on the host goes through :class:`~tunedeck.ab.ops.ServerOps` (see
:mod:`tunedeck.hostside.abops` for the implementation over the launcher, tracker and
``tunedeck bench``), so the same code drives the CLI and the TUI.
Progress is reported as :class:`~tunedeck.ab.events.ABEvent` objects to an ``on_event`` callback;
what it produced is an :class:`~tunedeck.ab.report.ABReport`. The names of those modules stay
importable from here (``__all__``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import replace
from typing import Any, Awaitable, Callable, Mapping, Sequence

from tunedeck.ab.cancel import CampaignTask, failure_text
from tunedeck.ab.compare import compare
from tunedeck.ab.events import ABEvent, EventFn
from tunedeck.ab.journal import Journal, new_id
from tunedeck.ab.ops import (
    LaunchHandle,
    LevelRequest,
    ProfileInfo,
    ServerOps,
    StopResult,
    journal_launch,
)
from tunedeck.ab.plan import Plan
from tunedeck.ab.report import ABReport, side_of
from tunedeck.ab.sides import LevelResult, SideRun

log = logging.getLogger(__name__)


class ABFailed(Exception):
    """A side failed to start (or the run could not go on); the report is kept."""


Confirm = Callable[[str], "bool | Awaitable[bool]"]


async def _maybe_await(v: Any) -> Any:
    if inspect.isawaitable(v):
        return await v
    return v


# ---------------------------------------------------------------------- runner


class ABRunner:
    def __init__(
        self,
        ops: ServerOps,
        a: str,
        b: str,
        plan: Plan,
        *,
        repeats: int = 1,
        interleave: bool = False,
        confirm_stop: Confirm | None = None,
        on_event: EventFn | None = None,
        journal: Journal | None = None,
        noise_pct: float | None = None,
        ab_id: str | None = None,
    ) -> None:
        if repeats < 1:
            raise ValueError("repeats must be >= 1")
        self.ops = ops
        self.plan = plan
        self.repeats = repeats
        self.interleave = interleave
        self.confirm_stop = confirm_stop
        self.on_event = on_event
        self.journal = journal if journal is not None else Journal()
        self.noise_pct = noise_pct
        self._compare_failed = False  # said once in the report; not tried again when it ends
        self.report = ABReport(
            id=ab_id or new_id("ab"),
            a=a,
            b=b,
            plan=plan,
            host=ops.host_label,
            repeats=repeats,
            interleave=interleave,
        )
        self._infos: dict[str, ProfileInfo] = {}
        self._runs: dict[str, list[SideRun]] = {"A": [], "B": []}
        self._live: tuple[ProfileInfo, LaunchHandle] | None = None
        self._task = CampaignTask()
        self._step = 0
        self._steps = self._count_steps()

    # -------------------------------------------------------------- events
    def _count_steps(self) -> int:
        launches = 2 * self.repeats if self.interleave else 2
        benches = 2 * self.repeats * len(self.plan.levels)
        return launches * 2 + benches  # launch+stop per launch, one per bench

    def _emit(
        self,
        kind: str,
        message: str,
        side: str | None = None,
        repeat: int | None = None,
        fraction: float | None = None,
        advance: bool = False,
        **data: Any,
    ) -> None:
        if advance:
            self._step += 1
        ev = ABEvent(kind, message, side, repeat, self._step, self._steps, fraction, data)
        if self.on_event is not None:
            try:
                self.on_event(ev)
            except Exception:
                log.exception("A/B %s: the event callback failed on %r", self.report.id, kind)

    # -------------------------------------------------------------- control
    def cancel(self) -> None:
        """Stop as soon as possible; the server this run started is stopped, results kept."""
        self._task.cancel()

    async def run(self) -> ABReport:
        rep = self.report
        self._journal({**rep.to_dict(), "status": "running"})
        try:
            await self._task.run(self._run)
            rep.status = "completed"
        except asyncio.CancelledError:
            rep.status = "cancelled"
            rep.error = rep.error or "cancelled by the user"
            self._emit("cancelled", "A/B cancelled; stopping the server it started")
            await asyncio.shield(self._cleanup())
        except ABFailed as e:
            rep.status = "failed"
            rep.error = str(e)
            self._emit("error", str(e))
            await asyncio.shield(self._cleanup())
        except Exception as e:  # noqa: BLE001 - report any failure, leave nothing running
            rep.status = "failed"
            rep.error = failure_text(e)
            self._emit("error", rep.error)
            await asyncio.shield(self._cleanup())
        finally:
            self._finish()
        if rep.status == "cancelled":
            self._task.take_back()
        return rep

    # -------------------------------------------------------------- internals
    async def _run(self) -> None:
        rep = self.report
        self._emit(
            "start",
            f"A/B {rep.id}: A={rep.a} vs B={rep.b} on {rep.host}, plan {self.plan.name}, "
            f"{self.repeats} repeat(s){', interleaved' if self.interleave else ''}",
        )
        for w in self.plan.warnings():
            rep.warnings.append(w)
            self._emit("info", f"warning: {w}")
        for label, name in (("A", rep.a), ("B", rep.b)):
            try:
                self._infos[label] = await self.ops.resolve(name)
            except Exception as e:  # profile errors name the file and key
                raise ABFailed(f"{label} ({name}): {e}") from e
            self._sync_side(label)
        await self._stop_existing()
        if self.interleave:
            for r in range(self.repeats):
                for label in ("A", "B"):
                    await self._side(label, [r])
        else:
            for label in ("A", "B"):
                await self._side(label, list(range(self.repeats)))
        self._compare()

    async def _stop_existing(self) -> None:
        running = await self.ops.running_servers()
        if not running:
            self._emit("info", f"no server of ours running on {self.ops.host_label}")
            return
        desc = "; ".join(s.description for s in running)
        question = f"Stop what is running on {self.ops.host_label} ({desc}) to start the A/B?"
        self._emit("confirm", question)
        ok = False
        if self.confirm_stop is not None:
            ok = bool(await _maybe_await(self.confirm_stop(question)))
        if not ok:
            raise ABFailed(
                f"not started: a server is running on {self.ops.host_label} ({desc}) and stopping it was not confirmed"
            )
        for s in running:
            self._emit("stop-existing", f"stopping {s.description}")
            res = await self.ops.stop_running(s)
            if not res.stopped:
                raise ABFailed(f"could not stop {s.description}: {res.message}")
            self._emit(
                "gpu-freed" if res.gpu_freed else "info",
                "GPU memory freed" if res.gpu_freed else f"stopped ({res.message or 'GPU memory not confirmed'})",
            )

    async def _side(self, label: str, repeats: Sequence[int]) -> None:
        info = self._infos[label]
        first = repeats[0]
        self._emit("launch", f"launching {info.name} ({info.engine})", label, first, advance=True)
        launching = asyncio.ensure_future(self.ops.launch(info))
        try:
            handle = await asyncio.shield(launching)
        except asyncio.CancelledError:
            # cancelled while the launch ran: let it finish, so the cleanup stops what it started
            try:
                self._live = (info, await launching)
            except Exception:  # noqa: BLE001 - the launch failed: nothing runs to stop
                pass
            raise
        except ABFailed:
            raise
        except Exception as e:  # noqa: BLE001 - refused (something holds the GPUs), host error
            raise ABFailed(f"{label} ({info.name}) could not be launched: {e}") from None
        self._live = (info, handle)

        def progress(msg: str, frac: float | None) -> None:
            self._emit("progress", msg, label, first, fraction=frac)

        ready = await self.ops.wait_ready(info, handle, progress)
        self.report.launches.append(
            {
                "side": label,
                "profile": info.name,
                "launch_run_id": handle.run_id,
                "server_log": handle.server_log,
                "ready": ready.ready,
                "startup_s": ready.startup_s,
                "diagnosis": ready.diagnosis,
                "evidence": ready.evidence,
                "timeline": [dict(t) for t in ready.timeline],
            }
        )
        self.journal_safe(
            journal_launch, handle, ready, profile=info.name, host=self.ops.host_label, ab_id=self.report.id, side=label
        )
        if not ready.ready:
            why = ready.diagnosis or "the server did not become ready"
            if ready.evidence:
                why += f" (log: {ready.evidence.strip()})"
            self._emit(
                "failed",
                f"{info.name} failed to start: {why}",
                label,
                first,
                diagnosis=ready.diagnosis,
                evidence=ready.evidence,
            )
            await self._stop_live(label, first)
            raise ABFailed(f"{label} ({info.name}) failed to start: {why}")
        self._emit(
            "ready",
            f"{info.name} ready in {ready.startup_s:.1f} s" if ready.startup_s is not None else f"{info.name} ready",
            label,
            first,
            startup_s=ready.startup_s,
        )
        for i, r in enumerate(repeats):
            msg = await self.ops.flush_cache(info, handle)
            self._emit("flush", msg, label, r)
            levels: list[LevelResult] = []
            run = SideRun(
                levels=(),
                startup_s=ready.startup_s if i == 0 else None,
                launch_run_id=handle.run_id,
                server_log=handle.server_log,
            )
            self._runs[label].append(run)
            idx = len(self._runs[label]) - 1
            for lv in self.plan.levels:
                if lv.warmup:
                    self._emit("warmup", f"{lv.warmup} warmup request(s) at C={lv.concurrency}", label, r)
                self._emit(
                    "bench-start",
                    f"benchmark {lv.title}: C={lv.concurrency}, {lv.num_prompts} prompts, "
                    f"{lv.input_len} in / {lv.output_len} out",
                    label,
                    r,
                    concurrency=lv.concurrency,
                )

                def bprog(msg: str, frac: float | None, _r: int = r) -> None:
                    self._emit("bench-progress", msg, label, _r, fraction=frac)

                labels = {"ab_id": self.report.id, "side": label, "repeat": str(r + 1), "profile": info.name}
                res = await self.ops.bench(info, handle, LevelRequest(self.plan, lv, labels, bprog))
                if res.error and not res.summary:
                    raise ABFailed(f"{label} ({info.name}) benchmark at C={lv.concurrency} failed: {res.error}")
                levels.append(LevelResult(lv.concurrency, dict(res.summary), res.run_id))
                self._runs[label][idx] = run = replace(run, levels=tuple(levels))
                self._sync_side(label)
                tput = res.summary.get("output_throughput")
                self._emit(
                    "bench-done",
                    f"C={lv.concurrency}: "
                    + (f"{tput:.1f} output tok/s" if isinstance(tput, (int, float)) else "done")
                    + (f", {res.summary.get('failed')} failed" if res.summary.get("failed") else ""),
                    label,
                    r,
                    advance=True,
                    run_id=res.run_id,
                    concurrency=lv.concurrency,
                    summary=dict(res.summary),
                )
                self.journal_safe(
                    Journal.record_bench,
                    res.run_id or new_id("bench"),
                    profile=info.name,
                    host=self.ops.host_label,
                    concurrency=lv.concurrency,
                    summary=res.summary,
                    result_dir=res.result_dir,
                    ab_id=self.report.id,
                    side=label,
                    repeat=r + 1,
                    server_log=handle.server_log,
                    launch_run_id=handle.run_id,
                )
            try:
                acc, note = await self.ops.acceptance_rate(info, handle)
            except Exception:
                log.warning("A/B %s: %s: acceptance rate not read", self.report.id, label, exc_info=True)
                acc, note = None, None
            if acc is not None:
                self._runs[label][idx] = replace(run, acceptance_rate=acc, acceptance_note=note)
                self._sync_side(label)
                if note:
                    warning = f"{label} ({info.name}): {note}"
                    if warning not in self.report.warnings:
                        self.report.warnings.append(warning)
        await self._stop_live(label, repeats[-1])
        self._emit("side-done", f"{info.name} done", label, repeats[-1])

    async def _stop_live(self, label: str | None, repeat: int | None) -> None:
        if self._live is None:
            return
        info, handle = self._live
        self._emit("stop", f"stopping {info.name}", label, repeat, advance=True)
        try:
            res = await self.ops.stop(info, handle)
        except Exception as e:  # noqa: BLE001
            res = StopResult(False, None, f"{type(e).__name__}: {e}")
        if not res.stopped:
            self.report.left_running.append(f"{info.name} ({handle.run_id}): {res.message}")
            self._emit("error", f"could not stop {info.name}: {res.message}", label, repeat)
        elif res.gpu_freed is False:
            self.report.left_running.append(f"{info.name}: GPU memory not freed ({res.message})")
            self._emit("error", f"{info.name} stopped but GPU memory is still in use: {res.message}", label, repeat)
        else:
            self._emit("gpu-freed", "GPU memory freed" if res.gpu_freed else f"stopped ({res.message})", label, repeat)
        self._live = None

    async def _cleanup(self) -> None:
        await self._stop_live(None, None)

    def _sync_side(self, label: str) -> None:
        info = self._infos.get(label)
        if info is None:
            return
        self.report.sides[label] = side_of(label, info, self.plan, self._runs[label])

    def _compare(self) -> None:
        a, b = self.report.sides.get("A"), self.report.sides.get("B")
        if not a or not b or not a.runs or not b.runs:
            return
        kw = {"noise_pct": self.noise_pct} if self.noise_pct else {}
        try:
            self.report.comparison = compare(a, b, **kw)
        except Exception as e:
            log.exception("A/B %s: comparing the sides failed", self.report.id)
            self._compare_failed = True
            self.report.warnings.append(f"no comparison: {type(e).__name__}: {e}")
            self._emit("error", f"no comparison: {type(e).__name__}: {e}")
            return
        self._emit("comparison", self.report.comparison.headline)

    def _finish(self) -> None:
        rep = self.report
        if rep.comparison is None and not self._compare_failed:
            self._compare()  # partial results still compare when both sides have some
        self._journal(rep.to_dict())
        self._emit("done", f"A/B {rep.id} {rep.status}" + (f": {rep.error}" if rep.error else ""))

    def _journal(self, record: Mapping[str, Any]) -> None:
        try:
            self.journal.append(record)
        except Exception as e:  # noqa: BLE001 - never lose the run over the journal
            self.report.warnings.append(f"journal not written: {e}")

    def journal_safe(self, write: Callable[..., object], *args: Any, **kw: Any) -> None:
        """``write(journal, *args, **kw)``; a failure is a warning of the report, never the end of the run."""
        try:
            write(self.journal, *args, **kw)
        except Exception as e:  # noqa: BLE001
            self.report.warnings.append(f"journal not written: {e}")


__all__ = ["ABFailed", "ABRunner"]
